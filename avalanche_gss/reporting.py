"""Turn runs into the paper-style outputs of ``python -m reproduce`` (Contract 1).

``rows_from_runs`` groups runs that differ only by seed into one row; ``write_outputs``
writes ``<experiment>.json``, ``.csv`` and ``.md`` (ours beside the paper's number in
every cell the paper has).
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from collections.abc import Sequence
from typing import Any

from avalanche_gss.experiments import RunResult

__all__ = ["rows_from_runs", "write_outputs", "format_cell"]


def _std(values: Sequence[float]) -> float:
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def rows_from_runs(runs: Sequence[tuple[dict[str, Any], RunResult]]) -> list[dict[str, Any]]:
    """Group runs into Contract 1 rows, one per (method, buffer size, extra keys).

    :param runs: ``(row_keys, result)`` pairs; ``row_keys`` holds the keys that tell a
        row from its siblings beyond method and buffer size (e.g. ``{"sequence": 2}``).
    :return: rows with ``method``, ``buffer_size``, the extra keys, ``seeds``,
        ``task_accuracy`` (one list per seed), ``avg``, ``avg_mean``, ``avg_std``
        (population std over seeds), ``train_seconds``.
    """
    groups: dict[tuple[Any, ...], list[tuple[dict[str, Any], RunResult]]] = {}
    for keys, result in runs:
        ident = (result.settings.method, result.settings.buffer_size, *sorted(keys.items()))
        groups.setdefault(ident, []).append((keys, result))
    rows = []
    for members in groups.values():
        members.sort(key=lambda m: m[1].settings.seed)
        first_keys, first = members[0]
        avgs = [r.avg for _, r in members]
        row: dict[str, Any] = {
            "method": first.settings.method,
            "buffer_size": first.settings.buffer_size,
            **first_keys,
            "seeds": [r.settings.seed for _, r in members],
            "task_accuracy": [r.task_accuracy for _, r in members],
            "avg": avgs,
            "avg_mean": statistics.fmean(avgs),
            "avg_std": _std(avgs),
            "train_seconds": [r.train_seconds for _, r in members],
        }
        extras = [r.extras for _, r in members if r.extras]
        if extras:
            row["extras"] = extras
        rows.append(row)
    return rows


def format_cell(mean: float, std: float | None) -> str:
    """``"82.6 ± 2.9"`` (or just the mean when there is no deviation)."""
    if std is None or math.isnan(std):
        return f"{mean:.1f}"
    return f"{mean:.1f} ± {std:.1f}"


def _markdown(report: dict[str, Any], columns: list[tuple[str, Any]], row_key: str,
              paper: dict[tuple[str, Any], tuple[float, float | None]],
              paper_avg: dict[str, tuple[float, float | None]] | None = None) -> str:
    """A method × column table; each cell "ours (paper: x)"."""
    def label(row: dict[str, Any]) -> str:
        tags = [str(row[k]) for k in ("variant", "update") if k in row]
        return row["method"] + (f" ({', '.join(tags)})" if tags else "")

    methods = list(dict.fromkeys(label(r) for r in report["rows"]))
    lines = [
        f"# {report['experiment']}: {report['title']}",
        "",
        f"Data: {report['data_source']}",
        "",
        "Each cell: our mean ± std over seeds (the paper's number in parentheses)."
        + (" (paper): the method as the paper writes it; (authors): as the authors' code "
           "does it (GSS-Greedy: batch-level gate, mini-batch buffer gradients, min-max draw; "
           "GSS-Clust: threshold growth 1.01 instead of doubling; FSS-Clust: logits and "
           "squared distances instead of the penultimate layer)."
           if any("variant" in r for r in report["rows"]) else ""),
        "",
        "| method | " + " | ".join(label for label, _ in columns)
        + (" | Avg |" if paper_avg is not None else " |"),
        "|---|" + "---|" * (len(columns) + (paper_avg is not None)),
    ]
    for method in methods:
        cells = []
        for _, value in columns:
            match = [r for r in report["rows"] if label(r) == method and r.get(row_key) == value]
            ours = format_cell(match[0]["avg_mean"], match[0]["avg_std"]) if match else "-"
            ref = paper.get((method, value)) or paper.get(
                (match[0]["method"] if match else method, value))
            cells.append(ours + (f" ({format_cell(*ref)})" if ref else ""))
        if paper_avg is not None:  # mean over the columns; std across the columns' means
            means = [r["avg_mean"] for r in report["rows"] if label(r) == method]
            ours = format_cell(statistics.fmean(means), _std(means)) if means else "-"
            ref = paper_avg.get(method.split(" (")[0])
            cells.append(ours + (f" ({format_cell(*ref)})" if ref else ""))
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    notes = report["protocol"].get("deviations", [])
    if report["protocol"].get("task_aware"):
        notes = [*notes, "Task-aware methods (given task boundaries): "
                 + ", ".join(report["protocol"]["task_aware"]) + "."]
    if notes:
        lines += ["", "Deviations from the paper's protocol:", ""] + [f"- {n}" for n in notes]
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def write_outputs(report: dict[str, Any], out_dir: str, *, columns: list[tuple[str, Any]],
                  row_key: str, paper: dict[tuple[str, Any], tuple[float, float | None]],
                  paper_avg: dict[str, tuple[float, float | None]] | None = None
                  ) -> dict[str, str]:
    """Write ``<experiment>.json``, ``.csv`` and ``.md`` into ``out_dir``.

    :param report: Contract 1's JSON object (plus ``title`` and ``command``).
    :param out_dir: destination folder (created if missing).
    :param columns: the markdown table's columns as ``(label, value of row_key)``.
    :param row_key: the row key the columns range over (``"buffer_size"``, ``"sequence"``).
    :param paper: the paper's cells, keyed ``(method, column value)``.
    :param paper_avg: when given, an ``Avg`` column (mean over the columns, std across
        them) with the paper's values by method.
    :return: the paths written, by extension.
    """
    os.makedirs(out_dir, exist_ok=True)
    name = report["experiment"]
    paths = {ext: os.path.join(out_dir, f"{name}.{ext}") for ext in ("json", "csv", "md")}
    with open(paths["json"], "w") as f:
        json.dump(report, f, indent=1)
    n_tasks = max((len(a) for r in report["rows"] for a in r["task_accuracy"]), default=0)
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.writer(f)
        extra = [k for k in ("sequence", "variant", "n", "batch_size", "update")
                 if any(k in r for r in report["rows"])]
        writer.writerow(["method", "buffer_size", *extra, "seed", "avg",
                         *[f"T{k + 1}" for k in range(n_tasks)], "train_seconds"])
        for r in report["rows"]:
            for seed, accs, avg, secs in zip(r["seeds"], r["task_accuracy"], r["avg"],
                                             r["train_seconds"], strict=True):
                writer.writerow([r["method"], r["buffer_size"], *[r.get(k) for k in extra], seed,
                                 f"{avg:.2f}", *[f"{a:.2f}" for a in accs], f"{secs:.2f}"])
    with open(paths["md"], "w") as f:
        f.write(_markdown(report, columns, row_key, paper, paper_avg))
    return paths
