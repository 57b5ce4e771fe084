"""``python -m reproduce composition``: what each buffer holds along a disjoint MNIST stream.

Not a table of the paper: the diagnosis behind our Table 1/4 findings (why a policy
trails or leads). For each method (and variant) it records, every 400 samples, the
stored samples per task, the stored-score quantiles (GSS-Greedy) and the share of
offered samples the buffer took in, then writes ``composition.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from avalanche_gss.diagnostics import BufferTrace
from avalanche_gss.experiments import VARIANT_METHODS, RunSettings, run
from avalanche_gss.reporting import provenance, provenance_line, write_text
from reproduce.common import command, resolve_data
from reproduce.protocols import DATA_LABELS, PROTOCOLS


def composition(args: argparse.Namespace) -> int:
    protocol = PROTOCOLS["table1"]
    data_name, data = resolve_data(args, protocol)
    methods = args.methods or ["Reservoir", "GSS-Greedy"]
    seeds = args.seeds or [0]
    m = (args.buffer_sizes or [300])[0]
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        split = protocol.stream(data, seed, {})
        for method in methods:
            for variant in (args.variants if method in VARIANT_METHODS else ["paper"]):
                settings = RunSettings(method=method, buffer_size=m, seed=seed,
                                       variant=variant, n_iter=args.n_iter or protocol.n_iter,
                                       lr=args.lr or protocol.lr, device=args.device)
                trace = BufferTrace(None, split.task_classes, every=400)
                result = run(settings, split, plugins=[trace])
                rows.append({"method": method, "seed": seed,
                             "variant": variant if method in VARIANT_METHODS else None,
                             "buffer_size": m, "avg": result.avg,
                             "task_accuracy": result.task_accuracy,
                             "trace": trace.records})
    os.makedirs(args.out, exist_ok=True)
    report = {"experiment": "composition", "dataset": data.name, "data_source": data.source,
              "command": command(), "provenance": provenance(args.device, args.threads),
              "rows": rows}
    write_text(os.path.join(args.out, "composition.json"), json.dumps(report, indent=1))
    label = DATA_LABELS.get(data.name, data.name)
    lines = [f"# Buffer composition along disjoint {label} (M={m})", "",
             f"Data: {data.source}", "",
             "| method | seed | samples | stored per task | score q10/q50/q90 | admitted |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        name = r["method"] + (f" ({r['variant']})" if r["variant"] else "")
        for rec in r["trace"]:
            lines.append(f"| {name} | {r['seed']} | {rec['samples']} | "
                         f"{rec.get('task_counts')} | {rec.get('score_q10_q50_q90', '-')} | "
                         f"{100 * rec['admitted_share']:.1f}% |")
        lines.append(f"| {name} | {r['seed']} | final accuracy | "
                     f"{[round(a, 1) for a in r['task_accuracy']]} | avg {r['avg']:.1f} | |")
    lines += ["", provenance_line(report["provenance"]), "",
              f"Command: `{report['command']}`", ""]
    text = "\n".join(lines)
    write_text(os.path.join(args.out, "composition.md"), text)
    print(text)
    return 0
