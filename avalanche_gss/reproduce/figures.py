"""The paper's figures (``figure2``, ``figure4``, ``figure5``) for ``python -m reproduce``.

Each entry of :data:`FIGURES` takes the parsed command line, writes
``<experiment>.json/.md/.csv/.png`` into ``--out`` and prints the markdown.
Runs go through :func:`~avalanche_gss.sweep.run_sweep` with :func:`figure_job`, so a
stopped sweep resumes from ``--cache``.

- ``figure2``: surrogate (Eq. 5) against Monte Carlo solid angle (Eq. 4) of random vector
  sets in 200 dimensions, with their Pearson and Spearman correlations.
- ``figure4``: test accuracy every 100 training samples on disjoint MNIST, M = 300, for
  GSS-Greedy, GSS-IQP, GEM, iCaRL (task ends), Single and the i.i.d. baselines (end).
- ``figure5``: GSS-Greedy's final average accuracy on disjoint MNIST against ``n`` and
  against the batch size (M = 300).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from avalanche_gss.benchmarks import ArrayDataset, TaskSplit
from avalanche_gss.evaluation import CurveResult, mean_curve, run_curve
from avalanche_gss.experiments import (
    BUFFER_METHODS,
    METHODS,
    TASK_AWARE,
    VARIANT_METHODS,
    VARIANTS,
    RunResult,
    RunSettings,
    settings_dict,
)
from avalanche_gss.experiments import run as run_one
from avalanche_gss.plotting import Panel, Series, plot_curves, plot_panels
from avalanche_gss.plotting import plot_surrogate_vs_solid_angle as plot_surrogate
from avalanche_gss.reporting import (
    data_lines,
    format_cell,
    protocol_line,
    provenance,
    provenance_line,
    rows_from_runs,
    write_outputs,
    write_text,
)
from avalanche_gss.reproduce.common import (
    code_identity,
    command,
    data_fields,
    data_identity,
    load_checked,
    method_code,
    prepare_job,
    resolve_data,
    settings_by_method,
    settings_for,
)
from avalanche_gss.reproduce.protocols import (
    PAPER_DATA,
    PROTOCOLS,
    data_label,
    disjoint_stream,
)
from avalanche_gss.reproduce.tables import show_outputs
from avalanche_gss.solid_angle import SurrogateStudy, surrogate_vs_solid_angle
from avalanche_gss.sweep import run_sweep

log = logging.getLogger("reproduce")

FIGURES_VERSION = 2
"""Bump when a change makes cached figure runs stale (it is part of every job's cache key)."""

FIGURE2: dict[str, Any] = {
    "dim": 200, "ks": (5, 10, 20), "n_sets": 200, "n_samples": 1_000_000,
    "correlation_range": (0.0, 0.9), "jitter": 0.5, "seeds": (0,),
    "quick": {"ks": (5, 10), "n_sets": 60, "n_samples": 50_000},
}
"""Figure 2: vectors per set ``k`` (the buffer size of Eq. 4), sets, Monte Carlo draws."""

FIGURE4: dict[str, Any] = {
    "methods": ("GSS-Greedy", "GSS-IQP", "GEM", "iCaRL", "Single", "iid-online",
                "iid-offline"),
    "buffer_sizes": (300,), "seeds": (0, 1, 2), "samples_per_task": 1000,
    "every_samples": 100,
    "quick": {"seeds": (0,), "samples_per_task": 500},
}
"""Figure 4 (disjoint MNIST, 1k samples per task, accuracy every 100 samples)."""

FIGURE5: dict[str, Any] = {
    "methods": ("GSS-Greedy",), "buffer_sizes": (300,), "seeds": (0, 1, 2),
    "samples_per_task": 1000, "n_values": (1, 2, 5, 10, 20, 50),
    "batch_sizes": (1, 5, 10, 20, 50, 100), "n": 10, "batch_size": 10,
    "quick": {"seeds": (0,), "samples_per_task": 500, "n_values": (1, 10, 50),
              "batch_sizes": (1, 10, 50)},
}
"""Figure 5: ``n`` at batch size 10, batch size at ``n = 10`` (replay batches stay 10)."""

PAPER_FIGURE5_N = {1: 67.3}
"""The only number the paper's text gives for Figure 5 (GSS-Greedy, ``n = 1``)."""

_DISJOINT = PROTOCOLS["table1"]  # lr, n_iter of the disjoint MNIST experiments


def _chosen(args: argparse.Namespace, spec: dict[str, Any]) -> dict[str, Any]:
    """The spec's settings, its ``quick`` ones under ``--quick``, then the command line's."""
    chosen = {k: v for k, v in spec.items() if k != "quick"}
    if args.quick:
        chosen.update(spec["quick"])
    for key in ("methods", "seeds", "buffer_sizes"):
        if getattr(args, key, None) is not None and key in chosen:
            chosen[key] = tuple(getattr(args, key))
    return chosen


def _split(config: dict[str, Any], seed: int) -> TaskSplit:
    data = load_checked(config)
    return disjoint_stream(config["samples_per_task"])(data, seed, {})


def figure_job(config: dict[str, Any]) -> dict[str, Any]:
    """One run of a figure (module-level, so worker processes and submitit can pickle it).

    :param config: ``kind`` (``"curve"``: :func:`~avalanche_gss.evaluation.run_curve`
        every ``every_samples``; ``"final"``: :func:`~avalanche_gss.experiments.run`),
        ``data``, ``root``, ``download``, ``samples_per_task`` and ``settings``.
    :return: the :class:`CurveResult` or :class:`RunResult` as a dict.
    """
    prepare_job(config)  # a worker process: the user modules its method comes from
    settings = RunSettings(**config["settings"])
    split = _split(config, settings.seed)
    if config["kind"] == "curve":
        return run_curve(settings, split, every_samples=config["every_samples"]).to_dict()
    return run_one(settings, split).to_dict()


def _sweep(args: argparse.Namespace, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cache_dir = args.cache or os.path.join(args.out, "cache", args.experiment)
    return run_sweep(configs, figure_job, cache_dir=cache_dir, workers=args.workers,
                     launcher=args.launcher, cluster=args.cluster, threads=args.threads)


def _base_config(args: argparse.Namespace, data_name: str, samples_per_task: int,
                 data: ArrayDataset) -> dict[str, Any]:
    return {"version": FIGURES_VERSION, **code_identity(),
            "experiment": args.experiment, "data": data_name, "root": args.root,
            "download": args.download, **data_identity(data), "threads": args.threads,
            "samples_per_task": samples_per_task}


def _data_label(data: ArrayDataset) -> tuple[str, bool]:
    """How the data are named in titles; whether they were verified to be MNIST (or subset)."""
    return data_label(data), data.verified_as in PAPER_DATA["mnist"]


def _stream_protocol(args: argparse.Namespace, data_name: str, samples_per_task: int,
                     seed: int) -> tuple[ArrayDataset, TaskSplit, dict[str, Any]]:
    _, data = resolve_data(args, _DISJOINT)  # one-line errors for data that cannot load
    try:
        _DISJOINT.check(data)
    except ValueError as err:
        raise SystemExit(f"python -m reproduce: error: --data {data_name}: {err}") from None
    split = disjoint_stream(samples_per_task)(data, seed, {})
    stream = {k: v for k, v in split.protocol.items() if k != "deviations"}
    return data, split, {"stream": stream, "deviations": split.protocol.get("deviations", [])}


def _finish(report: dict[str, Any], paths: dict[str, str], md: str | None = None) -> int:
    if md is not None:
        write_text(paths["md"], md)
    write_text(paths["json"], json.dumps(report, indent=1))
    return show_outputs(paths)


def _overrides(configs: Sequence[dict[str, Any]], lr: float, n_iter: int
               ) -> dict[str, dict[str, Any]]:
    """Each method's learning rate and iterations per batch where they are not the figure's.

    The authors' scripts give GEM, iCaRL and the baselines their own.
    """
    by_method = settings_by_method([c["settings"] for c in configs])
    found = {m: {k: s[k] for k, base in (("lr", lr), ("n_iter", n_iter)) if s[k] != base}
             for m, s in by_method.items()}
    return {m: o for m, o in found.items() if o}


def _label(method: str, keys: dict[str, Any]) -> str:
    return method + (f" ({keys['variant']})" if "variant" in keys else "")


def _flavours(args: argparse.Namespace, method: str) -> list[dict[str, Any]]:
    """A method with variants once per ``--variants`` entry; other methods once."""
    if method in VARIANT_METHODS:
        return [{"variant": v} for v in (getattr(args, "variants", None) or VARIANTS)]
    return [{}]


# --------------------------------------------------------------------------- figure 2


def figure2(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Surrogate vs solid angle of random vector sets (paper Figure 2, appendix A).

    ``--buffer-sizes`` sets the vectors per set ``k``; ``--seeds`` the generator seeds.

    :param args: the parsed command line.
    :param argv: the command line (for the record; ``sys.argv`` by default).
    :return: the exit status.
    """
    chosen = _chosen(args, FIGURE2)
    ks = tuple(args.buffer_sizes) if args.buffer_sizes else chosen["ks"]
    start = time.perf_counter()
    studies: dict[str, SurrogateStudy] = {}
    rows = []
    for seed in chosen["seeds"]:
        for k in ks:
            log.info("figure2: %d sets of %d vectors in %d dims, %d draws each (seed %d)",
                     chosen["n_sets"], k, chosen["dim"], chosen["n_samples"], seed)
            study = surrogate_vs_solid_angle(
                chosen["n_sets"], k, chosen["dim"], chosen["n_samples"],
                torch.Generator().manual_seed(seed),
                correlation_range=tuple(chosen["correlation_range"]), jitter=chosen["jitter"])
            label = f"k={k}" + (f", seed {seed}" if len(chosen["seeds"]) > 1 else "")
            studies[label] = study
            log.info("figure2 k=%d: Pearson %+.3f, Spearman %+.3f", k, study.pearson,
                     study.spearman)
            rows.append({
                "method": "surrogate-vs-solid-angle", "buffer_size": k, "k": k,
                "dim": chosen["dim"], "seeds": [seed], "n_sets": chosen["n_sets"],
                "n_samples": chosen["n_samples"], "pearson": study.pearson,
                "spearman": study.spearman, "log_pearson": study.log_pearson,
                "pearson_sign": study.pearson_sign, "spearman_sign": study.spearman_sign,
                "monotone_increasing": study.spearman > 0,
                "zero_estimates": sum(r["solid_angle"] <= 0 for r in study.records),
                "records": study.records,
            })
    os.makedirs(args.out, exist_ok=True)
    paths = {ext: os.path.join(args.out, f"figure2.{ext}") for ext in ("json", "csv", "md")}
    paths["png"] = plot_surrogate(
        studies, os.path.join(args.out, "figure2.png"),
        title=f"Surrogate vs solid angle, {chosen['dim']} dimensions")
    with io.StringIO(newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["k", "seed", "set", "target_correlation", "surrogate", "solid_angle",
                         "stderr", "span_dim"])
        for row in rows:
            for i, r in enumerate(row["records"]):
                writer.writerow([row["k"], row["seeds"][0], i, f"{r['correlation']:.4f}",
                                 f"{r['surrogate']:.4f}", f"{r['solid_angle']:.6g}",
                                 f"{r['stderr']:.3g}", int(r["span_dim"])])
        write_text(paths["csv"], f.getvalue())
    cmd = command(argv)
    source = (f"synthetic: random vector sets in {chosen['dim']} dimensions "
              "(avalanche_gss.solid_angle.shared_direction_set), no dataset")
    report = {
        "experiment": "figure2",
        "title": "surrogate (Eq. 5) vs Monte Carlo solid angle (Eq. 4) (paper Figure 2)",
        "dataset": "synthetic", "data_source": source, "command": cmd,
        "protocol": {**{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items()},
                     "ks": list(ks), "quick": args.quick,
                     "expected_sign": "+ (a smaller surrogate goes with a smaller solid "
                                      "angle: the monotonic relation the paper needs)"},
        "rows": rows,
        "wall_seconds": time.perf_counter() - start,
    }
    lines = [
        "# figure2: surrogate vs solid angle (paper Figure 2)", "", f"Data: {source}", "",
        f"{chosen['n_sets']} sets per row; solid angle by Monte Carlo with "
        f"{chosen['n_samples']:,} Gaussian draws in the span (standard error <= "
        f"{0.5 / chosen['n_samples'] ** 0.5:.1e}, appendix A). The paper reports a monotonic "
        "relation (log scale); a positive Spearman correlation is that relation.", "",
        "Columns: k: vectors per set (the buffer size of Eq. 4); dim: their dimension; "
        "Pearson and Spearman (rank) correlations of the surrogate with the solid angle; "
        "Pearson (surrogate, log10 angle): with the angle's logarithm (estimates of 0 left "
        "out); sign: of the Pearson and Spearman correlations; estimates = 0: sets whose "
        "Monte Carlo estimate is 0.", "",
        "| k (vectors) | dim | Pearson | Spearman (rank) | Pearson (surrogate, log10 angle) "
        "| sign (Pearson / Spearman) | estimates = 0 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['k']} | {row['dim']} | {row['pearson']:+.3f} | {row['spearman']:+.3f} | "
            f"{row['log_pearson']:+.3f} | {row['pearson_sign']:+d} / {row['spearman_sign']:+d} "
            f"| {row['zero_estimates']} |")
    lines += ["", f"Plot: `{paths['png']}`", "", f"Command: `{cmd}`", ""]
    return _finish(report, paths, "\n".join(lines))


# --------------------------------------------------------------------------- figure 4


def _curve_rows(pairs: list[tuple[dict[str, Any], CurveResult]]) -> list[dict[str, Any]]:
    """Table rows of the final accuracies, each with its seeds' curves."""
    rows = rows_from_runs([(keys, c.result) for keys, c in pairs])
    for row in rows:
        keys = {k: row[k] for k in ("variant",) if k in row}
        members = sorted((c for k, c in pairs
                          if c.result.settings.method == row["method"]
                          and c.result.settings.buffer_size == row["buffer_size"] and k == keys),
                         key=lambda c: c.result.settings.seed)
        samples, mean, std = mean_curve(members)
        _, seen_mean, _ = mean_curve(members, seen=True)
        row.update({
            "schedule": members[0].schedule,
            "samples": samples,
            "curve_mean": mean, "curve_std": std, "curve_seen_mean": seen_mean,
            "curve_avg": [c.avg for c in members],
            "curve_seen_avg": [c.seen_avg for c in members],
            "curve_task_accuracy": [c.task_accuracy for c in members],
            "eval_seconds": [c.eval_seconds for c in members],
        })
    return rows


def figure4(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Test accuracy along disjoint MNIST every 100 samples (paper Figure 4a).

    :param args: the parsed command line.
    :param argv: the command line (for the record; ``sys.argv`` by default).
    :return: the exit status.
    """
    chosen = _chosen(args, FIGURE4)
    chosen["methods"] = tuple(m for m in chosen["methods"] if m in METHODS)
    data_name = args.data or _DISJOINT.dataset
    spt, every = chosen["samples_per_task"], chosen["every_samples"]
    data, split, stream = _stream_protocol(args, data_name, spt, chosen["seeds"][0])
    shown_as, own = _data_label(data)
    runs, configs = [], []
    for seed in chosen["seeds"]:
        for method in chosen["methods"]:
            for flavour in _flavours(args, method):
                keys = dict(flavour)
                for m in chosen["buffer_sizes"]:
                    s = settings_for(args, _DISJOINT, method, buffer_size=m, seed=seed, **flavour)
                    runs.append(keys)
                    configs.append({**_base_config(args, data_name, spt, data), "kind": "curve",
                                    "every_samples": every, "settings": settings_dict(s),
                                    **method_code(s.method)})
    log.info("figure4: %d runs on %s (%s)", len(configs), data.name, data.source)
    start = time.perf_counter()
    results = _sweep(args, configs)
    pairs = [(keys, CurveResult.from_dict(r)) for keys, r in zip(runs, results, strict=True)]
    rows = _curve_rows(pairs)
    ends = pairs[0][1].task_ends
    cmd = command(argv)
    report: dict[str, Any] = {
        "experiment": "figure4",
        "title": f"test accuracy along disjoint {shown_as}, every {every} samples "
                 + ("(paper Figure 4a)" if own else "(protocol of paper Figure 4a)"),
        **data_fields(data),
        "command": cmd, "provenance": provenance(args.device, args.threads),
        "protocol": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items()},
            **stream, "lr": args.lr or _DISJOINT.lr, "n_iter": args.n_iter or _DISJOINT.n_iter,
            "settings_by_method": settings_by_method([c["settings"] for c in configs]),
            "method_overrides": _overrides(configs, args.lr or _DISJOINT.lr,
                                           args.n_iter or _DISJOINT.n_iter),
            "batch_size": 10, "replay_batch_size": 10,
            "task_aware": [m for m in chosen["methods"] if m in TASK_AWARE],
            "task_ends": ends, "quick": args.quick,
            "curve": "curve_mean / curve_avg: test accuracy averaged over ALL tasks (unseen "
                     "tasks count, at ~0%), as the authors' main.py and GEM evaluate every "
                     "task at every point; curve_seen_mean / curve_seen_avg: over the tasks "
                     "seen so far",
            "schedules": "periodic: every every_samples stream samples and at task ends "
                         "(GEM: inside its task-level experiences); task_ends: iCaRL "
                         "(nearest-mean classifier); end: i.i.d. baselines",
        },
        "rows": rows,
        "wall_seconds": time.perf_counter() - start,
    }
    paths = write_outputs(report, args.out, columns=[(f"M={m}", m) for m in
                                                     chosen["buffer_sizes"]],
                          row_key="buffer_size", paper={})
    series = []
    for row in rows:
        label = _label(row["method"], row) + (
            f" M={row['buffer_size']}" if len(chosen["buffer_sizes"]) > 1 else "")
        style = {"periodic": "line", "task_ends": "markers", "end": "end"}[row["schedule"]]
        series.append(Series(label, row["samples"], row["curve_mean"], row["curve_std"], style))
    paths["png"] = plot_curves(
        series, os.path.join(args.out, "figure4.png"), vlines=ends[:-1],
        title=f"Disjoint {shown_as}: test accuracy (mean over all tasks), "
              f"{len(chosen['seeds'])} seed(s)")
    paths["curves_csv"] = os.path.join(args.out, "figure4_curves.csv")
    with io.StringIO(newline="") as f:
        writer = csv.writer(f)
        n_tasks = len(ends)
        writer.writerow(["method", "variant", "buffer_size", "seed", "schedule", "samples",
                         "avg_all_tasks", "avg_seen_tasks",
                         *[f"T{k + 1}" for k in range(n_tasks)]])
        for keys, c in pairs:
            s = c.result.settings
            for x, a, sa, accs in zip(c.samples, c.avg, c.seen_avg, c.task_accuracy,
                                      strict=True):
                writer.writerow([s.method, keys.get("variant", ""), s.buffer_size, s.seed,
                                 c.schedule, x, f"{a:.2f}", f"{sa:.2f}",
                                 *[f"{v:.2f}" for v in accs]])
        write_text(paths["curves_csv"], f.getvalue())
    with open(paths["md"]) as f:
        md = f.read().replace(f"\nCommand: `{cmd}`\n", "")
    lines = [md.rstrip("\n"), "", "## Accuracy along the stream (mean over all tasks)", "",
             f"Stream: {len(ends)} tasks, {ends[0]} training samples each (the paper: 1000), "
             f"batches of 10, test accuracy every {every} samples.", "",
             "At each task's end, mean over seeds (the curve's points are in "
             f"`{os.path.basename(paths['curves_csv'])}` and the JSON):", "",
             "| method | " + " | ".join(f"{x} samples" for x in ends) + " |",
             "|---|" + "---|" * len(ends)]
    for row in rows:
        at = dict(zip(row["samples"], row["curve_mean"], strict=True))
        cells = [f"{at[x]:.1f}" if x in at else "-" for x in ends]
        label = _label(row["method"], row)
        lines.append(f"| {label} ({row['schedule']}) | " + " | ".join(cells) + " |")
    lines += ["", provenance_line(report["provenance"]), "", f"Plot: `{paths['png']}`", "",
              f"Command: `{cmd}`", ""]
    return _finish(report, paths, "\n".join(lines))


# --------------------------------------------------------------------------- figure 5


def figure5(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """GSS-Greedy's final average accuracy against ``n`` and the batch size (paper Figure 5).

    :param args: the parsed command line.
    :param argv: the command line (for the record; ``sys.argv`` by default).
    :return: the exit status.
    """
    chosen = _chosen(args, FIGURE5)
    methods = tuple(m for m in chosen["methods"] if m in BUFFER_METHODS)
    if not methods:
        raise SystemExit("figure5 needs a buffer method (GSS-Greedy by default)")
    data_name = args.data or _DISJOINT.dataset
    spt = chosen["samples_per_task"]
    data, split, stream = _stream_protocol(args, data_name, spt, chosen["seeds"][0])
    shown_as, own = _data_label(data)
    runs: list[dict[str, Any]] = []
    configs = []
    for seed in chosen["seeds"]:
        for method in methods:
            for flavour in _flavours(args, method):
                variant = dict(flavour)
                for m in chosen["buffer_sizes"]:
                    points = [{"batch_size": b} for b in chosen["batch_sizes"]]
                    if method == "GSS-Greedy":
                        points = [{"n": n} for n in chosen["n_values"]] + points
                    for point in points:
                        fields = {**({"n": chosen["n"]} if method == "GSS-Greedy" else {}),
                                  "batch_size": chosen["batch_size"], **point}
                        s = settings_for(args, _DISJOINT, method, buffer_size=m,
                                         seed=seed, **flavour, **fields)
                        runs.append({**variant, **point})
                        configs.append({**_base_config(args, data_name, spt, data),
                                        "kind": "final",
                                        "settings": settings_dict(s),
                                        **method_code(s.method)})
    log.info("figure5: %d runs on %s (%s)", len(configs), data.name, data.source)
    start = time.perf_counter()
    results = _sweep(args, configs)
    pairs = []
    for keys, r in zip(runs, results, strict=True):
        res = dict(r)
        res["settings"] = RunSettings(**res["settings"])
        pairs.append((keys, RunResult(**res)))
    rows = rows_from_runs(pairs)
    cmd = command(argv)
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
            "methods": list(methods), **stream, "lr": args.lr or _DISJOINT.lr,
            "settings_by_method": settings_by_method([c["settings"] for c in configs]),
            "n_iter": args.n_iter or _DISJOINT.n_iter, "replay_batch_size": 10,
            "quick": args.quick,
            "panels": "rows with `n` vary n at batch size 10; rows with `batch_size` vary the "
                      "incoming batch size at n = 10 (replay batches stay 10 samples, "
                      "n_iter stays fixed: larger batches mean fewer updates)",
            "paper": {"n=1": PAPER_FIGURE5_N[1]} if own else {},
        },
        "rows": rows,
        "wall_seconds": time.perf_counter() - start,
    }
    paths = write_outputs(report, args.out, columns=[], row_key="n", paper={})
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
        labels = list(dict.fromkeys(_label(r["method"], r) for r in panel_rows))
        series = []
        md += [f"## vs {name} ({title}, M = {', '.join(map(str, chosen['buffer_sizes']))})", "",
               "| method | " + " | ".join(f"{key}={v}" for v in values) + " |",
               "|---|" + "---|" * len(values)]
        for label in labels:
            mine = {r[key]: r for r in panel_rows if _label(r["method"], r) == label}
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
    return _finish(report, paths, "\n".join(md))


FIGURES: dict[str, Callable[..., int]] = {
    "figure2": figure2,
    "figure4": figure4,
    "figure5": figure5,
}
"""Figure experiments by name."""
