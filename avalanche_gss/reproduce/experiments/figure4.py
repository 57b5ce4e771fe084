"""``python -m reproduce figure4``: test accuracy along disjoint MNIST (paper Figure 4a).

Test accuracy every 100 training samples on disjoint MNIST, M = 300, for GSS-Greedy,
GSS-IQP, GEM, iCaRL (task ends), Single and the i.i.d. baselines (end).
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
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
    FIGURE4,
    base_config,
    chosen_for,
    figure_data_label,
    figure_sweep,
    flavours,
    method_overrides,
    row_label,
    stream_protocol,
)
from avalanche_gss.reproduce.reports.outputs import show_outputs
from avalanche_gss.reproduce.reports.plotting import Series, plot_curves
from avalanche_gss.reproduce.reports.rows import Row, group_rows
from avalanche_gss.reproduce.reports.writing import (
    output_paths,
    provenance,
    provenance_line,
    table_csv,
    table_markdown,
    write_report,
    write_text,
)
from avalanche_gss.reproduce.runs.evaluation import CurveResult, mean_curve
from avalanche_gss.reproduce.runs.planning import Run
from avalanche_gss.reproduce.runs.training import (
    BUFFER_METHODS,
    METHODS,
    TASK_AWARE,
    RunSettings,
    run_label,
    settings_dict,
)

log = logging.getLogger("reproduce")


@dataclass
class CurveRow(Row):
    """A row of Figure 4: its final accuracies, and its seeds' curves along the stream.

    :param schedule: when the method was evaluated (``periodic``, ``task_ends``, ``end``).
    :param samples: the stream samples seen at each point of the curve.
    :param curve_mean: the mean over seeds of the accuracy over all tasks, at each point.
    :param curve_std: its std over seeds.
    :param curve_seen_mean: the mean over seeds of the accuracy over the tasks seen so far.
    :param curve_avg: each seed's accuracy over all tasks, at each point.
    :param curve_seen_avg: each seed's accuracy over the tasks seen so far.
    :param curve_task_accuracy: each seed's accuracy per task, at each point.
    :param eval_seconds: each seed's evaluation time.
    """

    schedule: str = ""
    samples: list[int] = field(default_factory=list)
    curve_mean: list[float] = field(default_factory=list)
    curve_std: list[float] = field(default_factory=list)
    curve_seen_mean: list[float] = field(default_factory=list)
    curve_avg: list[list[float]] = field(default_factory=list)
    curve_seen_avg: list[list[float]] = field(default_factory=list)
    curve_task_accuracy: list[Any] = field(default_factory=list)
    eval_seconds: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """:meth:`Row.to_dict`, then the curves."""
        return {**super().to_dict(), "schedule": self.schedule, "samples": self.samples,
                "curve_mean": self.curve_mean, "curve_std": self.curve_std,
                "curve_seen_mean": self.curve_seen_mean, "curve_avg": self.curve_avg,
                "curve_seen_avg": self.curve_seen_avg,
                "curve_task_accuracy": self.curve_task_accuracy,
                "eval_seconds": self.eval_seconds}


def curve_rows(pairs: list[tuple[dict[str, Any], CurveResult]]) -> list[CurveRow]:
    """Rows of the final accuracies, each with its seeds' curves."""
    rows = group_rows([(keys, c.result) for keys, c in pairs], CurveRow)
    for row in rows:
        keys = {k: row.keys[k] for k in ("variant",) if k in row.keys}
        members = sorted((c for k, c in pairs
                          if c.result.settings.method == row.method
                          and c.result.settings.buffer_size == row.buffer_size and k == keys),
                         key=lambda c: c.result.settings.seed)
        row.samples, row.curve_mean, row.curve_std = mean_curve(members)
        _, row.curve_seen_mean, _ = mean_curve(members, seen=True)
        row.schedule = members[0].schedule
        row.curve_avg = [c.avg for c in members]
        row.curve_seen_avg = [c.seen_avg for c in members]
        row.curve_task_accuracy = [c.task_accuracy for c in members]
        row.eval_seconds = [c.eval_seconds for c in members]
    return rows


def plan(args: argparse.Namespace, chosen: dict[str, Any]) -> list[Run]:
    """Every method (and variant) x buffer size x seed, on Table 1's protocol."""
    runs = []
    for seed in chosen["seeds"]:
        for method in chosen["methods"]:
            for flavour in flavours(args, method):
                for m in chosen["buffer_sizes"]:
                    runs.append(Run(settings_for(args, DISJOINT, method, buffer_size=m,
                                                 seed=seed, **flavour), dict(flavour)))
    return runs


def _job_label(settings: RunSettings) -> str:
    """A run's name in logs and failure lines: its :func:`run_label`, and its buffer size.

    A method without a buffer has no buffer size in its :func:`run_label`: its runs of
    each ``--buffer-sizes`` get it here, so that they stay apart.
    """
    label = run_label(settings)
    if settings.method in BUFFER_METHODS or settings.method in TASK_AWARE:
        return label
    return f"{label}-M{settings.buffer_size}"


def _curves_csv(pairs: list[tuple[dict[str, Any], CurveResult]], n_tasks: int) -> str:
    """One line per point of every run's curve."""
    with io.StringIO(newline="") as f:
        writer = csv.writer(f)
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
        return f.getvalue()


def _markdown(report: dict[str, Any], rows: Sequence[CurveRow], paths: dict[str, str]) -> str:
    """The final accuracies' table, then the accuracy at each task end, from the rows."""
    protocol = report["protocol"]
    ends, every = protocol["task_ends"], protocol["every_samples"]
    columns = [(f"M={m}", m) for m in protocol["buffer_sizes"]]
    table = table_markdown(report, columns, "buffer_size", {}, command=False)
    lines = [table, "", "## Accuracy along the stream (mean over all tasks)", "",
             f"Stream: {len(ends)} tasks, {ends[0]} training samples each (the paper: 1000), "
             f"batches of 10, test accuracy every {every} samples.", "",
             "At each task's end, mean over seeds (the curve's points are in "
             f"`{os.path.basename(paths['curves_csv'])}` and the JSON):", "",
             "| method | " + " | ".join(f"{x} samples" for x in ends) + " |",
             "|---|" + "---|" * len(ends)]
    for row in rows:
        at = dict(zip(row.samples, row.curve_mean, strict=True))
        cells = [f"{at[x]:.1f}" if x in at else "-" for x in ends]
        lines.append(f"| {row_label(row.method, row.keys)} ({row.schedule}) | "
                     + " | ".join(cells) + " |")
    lines += ["", provenance_line(report["provenance"]), "", f"Plot: `{paths['png']}`", "",
              f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def figure4(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Test accuracy along disjoint MNIST every 100 samples (paper Figure 4a).

    :param args: the parsed command line.
    :param argv: the command line (for the record; ``sys.argv`` by default).
    :return: the exit status.
    """
    chosen = chosen_for(args, FIGURE4)
    chosen["methods"] = tuple(m for m in chosen["methods"] if m in METHODS)
    data_name = args.data or DISJOINT.dataset
    spt, every = chosen["samples_per_task"], chosen["every_samples"]
    data, split, stream = stream_protocol(args, data_name, spt, chosen["seeds"][0])
    shown_as, own = figure_data_label(data)
    runs = plan(args, chosen)
    configs = [{**base_config(args, data_name, spt, data), "kind": "curve",
                "every_samples": every, "settings": settings_dict(r.settings),
                "label": _job_label(r.settings), **method_code(r.settings.method)}
               for r in runs]
    log.info("figure4: %d runs on %s (%s)", len(configs), data.name, data.source)
    start = time.perf_counter()
    results = figure_sweep(args, configs)
    pairs = [(r.keys, CurveResult.from_dict(res)) for r, res in zip(runs, results, strict=True)]
    rows = curve_rows(pairs)
    ends = pairs[0][1].task_ends
    lr, n_iter = args.lr or DISJOINT.lr, args.n_iter or DISJOINT.n_iter
    report: dict[str, Any] = {
        "experiment": "figure4",
        "title": f"test accuracy along disjoint {shown_as}, every {every} samples "
                 + ("(paper Figure 4a)" if own else "(protocol of paper Figure 4a)"),
        **data_fields(data),
        "command": command(argv, prog_of(args)),
        "provenance": provenance(args.device, args.threads),
        "protocol": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items()},
            **stream, "lr": lr, "n_iter": n_iter,
            "settings_by_method": settings_by_method([c["settings"] for c in configs]),
            "method_overrides": method_overrides(configs, lr, n_iter),
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
        "rows": [r.to_dict() for r in rows],
        "wall_seconds": time.perf_counter() - start,
    }
    paths = output_paths(args.out, "figure4", "json", "csv", "md")
    series = []
    for row in rows:
        label = row_label(row.method, row.keys) + (
            f" M={row.buffer_size}" if len(chosen["buffer_sizes"]) > 1 else "")
        style = {"periodic": "line", "task_ends": "markers", "end": "end"}[row.schedule]
        series.append(Series(label, row.samples, row.curve_mean, row.curve_std, style))
    paths["png"] = plot_curves(
        series, os.path.join(args.out, "figure4.png"), vlines=ends[:-1],
        title=f"Disjoint {shown_as}: test accuracy (mean over all tasks), "
              f"{len(chosen['seeds'])} seed(s)")
    paths["curves_csv"] = os.path.join(args.out, "figure4_curves.csv")
    write_text(paths["curves_csv"], _curves_csv(pairs, len(ends)))
    write_report(paths, report, table_csv(report), _markdown(report, rows, paths))
    return show_outputs(paths, prog=prog_of(args))
