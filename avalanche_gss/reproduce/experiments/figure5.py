"""``python -m reproduce figure5``: GSS-Greedy against ``n`` and the batch size (Figure 5).

GSS-Greedy's final average accuracy on disjoint MNIST against ``n`` and against the batch
size (M = 300).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from avalanche_gss.reproduce.common import (
    command,
    data_fields,
    method_code,
    prog_of,
    settings_by_method,
    settings_for,
)
from avalanche_gss.reproduce.experiments.figure_runs import (
    DISJOINT,
    FIGURE5,
    PAPER_FIGURE5_N,
    base_config,
    chosen_for,
    figure_data_label,
    figure_sweep,
    flavours,
    row_label,
    stream_protocol,
)
from avalanche_gss.reproduce.reports.outputs import show_outputs
from avalanche_gss.reproduce.reports.plotting import Panel, Series, plot_panels
from avalanche_gss.reproduce.reports.rows import group_rows
from avalanche_gss.reproduce.reports.writing import (
    data_lines,
    format_cell,
    output_paths,
    protocol_line,
    provenance,
    provenance_line,
    table_csv,
    write_report,
)
from avalanche_gss.reproduce.runs.planning import Run, run_result
from avalanche_gss.reproduce.runs.training import (
    BUFFER_METHODS,
    RunSettings,
    run_label,
    settings_dict,
)

log = logging.getLogger("reproduce")


def _job_label(settings: RunSettings) -> str:
    """A run's name in logs and failure lines: its :func:`run_label`, ``n``, batch size."""
    n = settings.options.get("n")
    return "-".join([run_label(settings), *([f"n{n}"] if n is not None else []),
                     f"batch{settings.batch_size}"])


def figure5(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """GSS-Greedy's final average accuracy against ``n`` and the batch size (paper Figure 5).

    :param args: the parsed command line.
    :param argv: the command line (for the record; ``sys.argv`` by default).
    :return: the exit status.
    """
    chosen = chosen_for(args, FIGURE5)
    methods = tuple(m for m in chosen["methods"] if m in BUFFER_METHODS)
    if not methods:
        raise SystemExit("figure5 needs a buffer method (GSS-Greedy by default)")
    data_name = args.data or DISJOINT.dataset
    spt = chosen["samples_per_task"]
    data, split, stream = stream_protocol(args, data_name, spt, chosen["seeds"][0])
    shown_as, own = figure_data_label(data)
    runs: list[Run] = []
    configs = []
    for seed in chosen["seeds"]:
        for method in methods:
            for flavour in flavours(args, method):
                variant = dict(flavour)
                for m in chosen["buffer_sizes"]:
                    points = [{"batch_size": b} for b in chosen["batch_sizes"]]
                    if method == "GSS-Greedy":
                        points = [{"n": n} for n in chosen["n_values"]] + points
                    for point in points:
                        fields = {**({"n": chosen["n"]} if method == "GSS-Greedy" else {}),
                                  "batch_size": chosen["batch_size"], **point}
                        s = settings_for(args, DISJOINT, method, buffer_size=m,
                                         seed=seed, **flavour, **fields)
                        runs.append(Run(s, {**variant, **point}))
                        configs.append({**base_config(args, data_name, spt, data),
                                        "kind": "final",
                                        "settings": settings_dict(s),
                                        "label": _job_label(s),
                                        **method_code(s.method)})
    log.info("figure5: %d runs on %s (%s)", len(configs), data.name, data.source)
    start = time.perf_counter()
    results = figure_sweep(args, configs)
    rows = [r.to_dict() for r in group_rows(
        [(run.keys, run_result(run.settings, res)) for run, res in zip(runs, results,
                                                                       strict=True)])]
    cmd = command(argv, prog_of(args))
    report: dict[str, Any] = {
        "experiment": "figure5",
        "title": "GSS-Greedy: final average accuracy vs n and vs batch size on disjoint "
                 f"{shown_as} " + ("(paper Figure 5)" if own else
                                "(protocol of paper Figure 5; the paper's number is for "
                                "MNIST and is not shown)"),
        **data_fields(data),
        "command": cmd, "provenance": provenance(args.device, args.threads),
        "protocol": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items()},
            "methods": list(methods), **stream, "lr": args.lr or DISJOINT.lr,
            "settings_by_method": settings_by_method([c["settings"] for c in configs]),
            "n_iter": args.n_iter or DISJOINT.n_iter, "replay_batch_size": 10,
            "quick": args.quick,
            "panels": "rows with `n` vary n at batch size 10; rows with `batch_size` vary the "
                      "incoming batch size at n = 10 (replay batches stay 10 samples, "
                      "n_iter stays fixed: larger batches mean fewer updates)",
            "paper": {"n=1": PAPER_FIGURE5_N[1]} if own else {},
        },
        "rows": rows,
        "wall_seconds": time.perf_counter() - start,
    }
    paths = output_paths(args.out, "figure5", "json", "csv", "md")
    panels = []
    line = protocol_line({**report["protocol"], "batch_size": chosen["batch_size"]})
    md = [f"# figure5: {report['title']}", "", *data_lines(report),
          f"{line} The paper: 1000 training samples per task.", "",
          f"Columns: n=v: GSS-Greedy scores each sample against v buffer gradients (batches "
          f"of {chosen['batch_size']}); batch_size=v: incoming batches of v samples (n = "
          f"{chosen['n']}). Rows: the method, with its variant in parentheses.", "",
          "Each cell: final average accuracy over the 5 tasks, "
          + (f"mean ± std over {len(chosen['seeds'])} seeds" if len(chosen["seeds"]) > 1
             else "one seed (no spread)")
          + (" (the paper's number in parentheses)." if own else "."), ""]
    for key, values, title, xlabel in (
            ("n", chosen["n_values"], f"batch size {chosen['batch_size']}",
             "n (buffer gradients per score)"),
            ("batch_size", chosen["batch_sizes"], f"n = {chosen['n']}", "batch size")):
        name = xlabel.split(" (")[0]
        panel_rows = [r for r in rows if key in r]
        if not panel_rows:
            continue
        labels = list(dict.fromkeys(row_label(r["method"], r) for r in panel_rows))
        series = []
        md += [f"## vs {name} ({title}, M = {', '.join(map(str, chosen['buffer_sizes']))})", "",
               "| method | " + " | ".join(f"{key}={v}" for v in values) + " |",
               "|---|" + "---|" * len(values)]
        for label in labels:
            mine = {r[key]: r for r in panel_rows if row_label(r["method"], r) == label}
            xs = [v for v in values if v in mine]
            series.append(Series(label, xs, [mine[v]["avg_mean"] for v in xs],
                                 [mine[v]["avg_std"] or 0.0 for v in xs], "markers"))
            cells = []
            for v in values:
                cell = format_cell(mine[v]["avg_mean"], mine[v]["avg_std"]) if v in mine else "-"
                if (own and key == "n" and v in PAPER_FIGURE5_N
                        and label.startswith("GSS-Greedy")):
                    cell += f" ({PAPER_FIGURE5_N[v]:.1f})"
                cells.append(cell)
            md.append(f"| {label} | " + " | ".join(cells) + " |")
        md.append("")
        if key == "n":
            shown = [n for n in PAPER_FIGURE5_N if n in values] if own else []
            if shown:
                series.append(Series("paper (text)", shown, [PAPER_FIGURE5_N[n] for n in shown],
                                     style="reference"))
        panels.append(Panel(f"vs {name} ({title})", xlabel, "average accuracy (%)", series,
                            logx=True))
    paths["png"] = plot_panels(panels, os.path.join(args.out, "figure5.png"),
                               title=f"GSS-Greedy ablation, disjoint {shown_as}")
    deviations = stream["deviations"]
    if deviations:
        md += ["Deviations from the paper's protocol:", ""] + [f"- {d}" for d in deviations]
        md.append("")
    md += [provenance_line(report["provenance"]), "", f"Plot: `{paths['png']}`", "",
           f"Command: `{cmd}`", ""]
    write_report(paths, report, table_csv(report), "\n".join(md))
    return show_outputs(paths, prog=prog_of(args))
