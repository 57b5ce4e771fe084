"""``which-buffer``'s composition report: what each policy's buffer holds at task ends.

Traced during the comparison's own runs, on the streams of
:data:`~avalanche_gss.reproduce.experiments.policies.COMPOSITION_STREAMS`.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Mapping, Sequence
from typing import Protocol, TypedDict, cast

from avalanche_gss.reproduce.experiments.composition import at_task_ends, task_shares
from avalanche_gss.reproduce.experiments.policies import COMPOSITION_STREAMS, STREAMS
from avalanche_gss.reproduce.experiments.which_buffer_matched import JobResult
from avalanche_gss.reproduce.experiments.which_buffer_records import (
    HeadRecord,
    Json,
    ReportRecord,
    StreamRecord,
)
from avalanche_gss.reproduce.experiments.which_buffer_report import NAME, STEM, protocol_lines
from avalanche_gss.reproduce.json_types import (
    json_float,
    json_floats,
    json_ints,
    json_object,
)
from avalanche_gss.reproduce.reports.writing import (
    data_lines,
    output_paths,
    provenance_line,
    write_report,
)
from avalanche_gss.reproduce.runs.traces import TraceRecord
from avalanche_gss.reproduce.runs.training import RunSettings

SHARES = ("task_end_shares[k][t]: share of the stored samples from task t+1 right after "
          "task k+1 ends; task_end_admitted[k]: share of task k+1's samples the buffer took "
          "in")
"""What the composition report's shares are."""


class TracedRun(TypedDict):
    """A traced run, as ``which_buffer_composition.json`` records it.

    :param task_end_shares: per task end, each task's share of the stored samples
        (``None``: no record at that task end).
    :param task_end_admitted: per task end, the share of that task's samples the buffer
        took in.
    :param trace: the run's trace records.
    """

    policy: str
    method: str
    stream: str
    buffer_size: int
    seed: int
    train_sizes: list[int]
    task_accuracy: list[float]
    avg: float
    task_end_shares: list[list[float] | None]
    task_end_admitted: list[float | None]
    trace: list[dict[str, Json]]


class CompositionProtocol(TypedDict):
    """The comparison's policies, seeds and buffer sizes."""

    policies: list[str]
    seeds: list[int]
    buffer_sizes: list[int]


class CompositionRecord(HeadRecord):
    """``which_buffer_composition.json``: the traced runs, with the comparison's data."""

    provenance: dict[str, Json]
    protocol: CompositionProtocol
    streams: list[str]
    shares: str
    rows: list[TracedRun]


def traced_streams(streams: Sequence[str]) -> tuple[str, ...]:
    """The streams whose runs record the buffer's composition (:data:`COMPOSITION_STREAMS`).

    Each entry names a stream or a family; a family stands for its first stream chosen.

    :param streams: the chosen streams, in order.
    """
    traced = []
    for wanted in COMPOSITION_STREAMS:
        match = [s for s in streams if s == wanted or STREAMS[s].family == wanted]
        if match and match[0] not in traced:
            traced.append(match[0])
    return tuple(traced)


def _composition_csv(rows: Sequence[TracedRun]) -> str:
    """One line per traced run and task end: each task's share of the stored samples."""
    n_tasks = max((len(r["train_sizes"]) for r in rows), default=0)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["policy", "method", "stream", "buffer_size", "seed", "after_task",
                     *[f"share_T{k + 1}" for k in range(n_tasks)], "admitted_in_task"])
    for r in rows:
        for k, (shares, took) in enumerate(zip(r["task_end_shares"], r["task_end_admitted"],
                                               strict=True)):
            if shares is None or took is None:
                continue
            writer.writerow([r["policy"], r["method"], r["stream"], r["buffer_size"], r["seed"],
                             k + 1, *[f"{v:.4f}" for v in shares], f"{took:.4f}"])
    return buffer.getvalue()


class _Run(Protocol):
    """What the composition reads of a run of the comparison (its settings and row keys)."""

    @property
    def settings(self) -> RunSettings: ...

    @property
    def keys(self) -> Mapping[str, str]: ...


def traced_runs(runs: Sequence[_Run], results: Sequence[JobResult],
                shown: Sequence[str]) -> list[TracedRun]:
    """The runs on the streams ``shown`` that recorded a trace, with their task ends.

    :param runs: the comparison's runs (row keys ``policy`` and ``stream``).
    :param results: their results, in the same order (traced ones hold ``trace``).
    :param shown: the streams the report shows (:func:`traced_streams`).
    """
    rows = []
    for r, result in zip(runs, results, strict=True):
        extras = json_object(result["extras"])
        trace = cast("list[TraceRecord] | None", extras.get("trace"))
        if trace is None or r.keys["stream"] not in shown:
            continue
        sizes = json_ints(extras["train_sizes"])
        ends = at_task_ends(trace, sizes)
        rows.append(TracedRun(
            policy=r.keys["policy"], method=r.settings.method, stream=r.keys["stream"],
            buffer_size=r.settings.buffer_size, seed=r.settings.seed, train_sizes=sizes,
            task_accuracy=json_floats(result["task_accuracy"]),
            avg=json_float(result["avg"]),
            task_end_shares=[task_shares(e) if e else None for e in ends],
            task_end_admitted=[e["admitted_in_task"] if e else None for e in ends],
            trace=cast("list[dict[str, Json]]", trace)))
    return rows


def _cells(runs: Sequence[TracedRun], n_tasks: int) -> list[str]:
    """One policy's row: its mean shares at each task end, then its accuracy per task."""
    cells = []
    for k in range(n_tasks):
        shares = [s for r in runs if (s := r["task_end_shares"][k]) is not None]
        took = [t for r in runs if (t := r["task_end_admitted"][k]) is not None]
        if not shares:
            cells.append("-")
            continue
        mean = [100 * statistics.fmean(v) for v in zip(*shares, strict=True)]
        cells.append("/".join(f"{v:.0f}" for v in mean)
                     + f" ({100 * statistics.fmean(took):.0f}% in)")
    acc = [statistics.fmean(v) for v in zip(*(r["task_accuracy"] for r in runs), strict=True)]
    cells.append(" / ".join(f"{a:.1f}" for a in acc))
    return cells


def _table(rows: Sequence[TracedRun], policies: Sequence[str], stream: str, m: int
           ) -> list[str]:
    """The section of one stream and buffer size (none when it has no traced run)."""
    mine = [r for r in rows if r["stream"] == stream and r["buffer_size"] == m]
    if not mine:
        return []
    n_tasks = len(mine[0]["train_sizes"])
    lines = [f"## {stream}, M = {m} (tasks of "
             f"{'/'.join(map(str, mine[0]['train_sizes']))} samples)", "",
             "| policy | " + " | ".join(f"after T{k + 1}" for k in range(n_tasks))
             + " | final accuracy per task |",
             "|---|" + "---|" * (n_tasks + 1)]
    for p in policies:
        runs_p = [r for r in mine if r["policy"] == p]
        if runs_p:
            lines.append(f"| {p} | " + " | ".join(_cells(runs_p, n_tasks)) + " |")
    return [*lines, ""]


def _markdown(report: ReportRecord, rows: Sequence[TracedRun], traced: Sequence[str]) -> str:
    """The composition report's Markdown: the protocol, a table per stream and size."""
    seeds = report["protocol"]["seeds"]
    shown = report.copy()
    shown["protocol"] = report["protocol"].copy()
    shown["protocol"]["streams"] = [s for s in report["protocol"]["streams"]
                                    if s["name"] in traced]
    lines = [f"# {NAME}: what each policy's buffer holds at every task end", "",
             *data_lines(dict(report)), *protocol_lines(shown), "",
             "Columns: after Tk: right after task k ends; final accuracy per task: test "
             "accuracy (%) on each task at the end of the stream. Each cell: the share (%) of "
             "the stored samples from tasks 1, 2, ... right "
             "after that task ends, and in parentheses the share of that task's samples the "
             "buffer took in; "
             + (f"mean over {len(seeds)} seeds" if len(seeds) > 1 else "one seed")
             + ". Traced in the runs of the main table (stream protocol and settings "
             "alike).", ""]
    if not rows:
        lines += [f"No stream to trace: {NAME} traces the disjoint stream (the digits' or "
                  "CIFAR-10's) and the first imbalanced sequence it runs.", ""]
    for stream in traced:
        for m in report["protocol"]["buffer_sizes"]:
            lines += _table(rows, report["protocol"]["policies"], stream, m)
    lines += [provenance_line(report["provenance"]), "", f"Command: `{report['command']}`",
              ""]
    return "\n".join(lines)


def write_composition(report: ReportRecord, runs: Sequence[_Run],
                      results: Sequence[JobResult], out: str) -> dict[str, str]:
    """Write ``which_buffer_composition.json``, ``.csv`` and ``.md`` from the traced runs.

    :param report: the comparison's JSON report.
    :param runs: its runs (row keys ``policy`` and ``stream``).
    :param results: their results, in the same order (traced ones hold ``trace``).
    :param out: the output folder.
    :return: the paths written, keyed ``composition_json``, ``_csv``, ``_md``.
    """
    streams: list[StreamRecord] = report["protocol"]["streams"]
    shown = traced_streams([s["name"] for s in streams])
    rows = traced_runs(runs, results, shown)
    traced = [s for s in shown if any(r["stream"] == s for r in rows)]
    protocol = report["protocol"]
    comp = CompositionRecord(
        experiment=f"{NAME}-composition",
        title=f"buffer composition at each task end ({', '.join(traced) or 'none'})",
        dataset=report["dataset"], data_source=report["data_source"],
        data_sha256=report["data_sha256"], data_verified_as=report["data_verified_as"],
        data_verification=report["data_verification"], command=report["command"],
        provenance=report["provenance"],
        protocol=CompositionProtocol(policies=protocol["policies"], seeds=protocol["seeds"],
                                     buffer_sizes=protocol["buffer_sizes"]),
        streams=traced, shares=SHARES, rows=rows)
    paths = output_paths(out, f"{STEM}_composition", "json", "csv", "md")
    write_report(paths, dict(comp), _composition_csv(rows), _markdown(report, rows, traced))
    return {f"composition_{ext}": path for ext, path in paths.items()}
