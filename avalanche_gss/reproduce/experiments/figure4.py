"""``python -m reproduce figure4``: test accuracy along disjoint MNIST (paper Figure 4a).

Test accuracy every 100 training samples on disjoint MNIST, M = 300, for GSS-Greedy,
GSS-IQP, GEM, iCaRL (task ends), Single and the i.i.d. baselines (end).
"""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from avalanche_gss.reproduce.common import Choices, command, prog_of, settings_for
from avalanche_gss.reproduce.experiments.figure_runs import (
    DISJOINT,
    FIGURE4,
    FigureJob,
    chosen_for,
    figure_data_label,
    figure_job,
    figure_jobs,
    flavours,
    row_label,
    stream_protocol,
)
from avalanche_gss.reproduce.json_types import JsonObject, json_ints, json_object
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.reports.plotting import Series, plot_curves
from avalanche_gss.reproduce.reports.report import (
    DataFacts,
    Report,
    SettingsFacts,
    jsonable,
    shared_setting,
)
from avalanche_gss.reproduce.reports.rows import Row, RowKeys, group_rows
from avalanche_gss.reproduce.reports.writing import (
    provenance,
    provenance_line,
    table_csv,
    table_markdown,
    write_text,
)
from avalanche_gss.reproduce.runner import Experiment, JobFunction, Rendered
from avalanche_gss.reproduce.runs.evaluation import CurveResult, mean_curve
from avalanche_gss.reproduce.runs.planning import PlannedRun
from avalanche_gss.reproduce.runs.training import (
    BUFFER_METHODS,
    METHODS,
    TASK_AWARE,
    RunSettings,
    run_label,
)
from avalanche_gss.streams import ArrayDataset

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
    curve_task_accuracy: list[list[list[float]]] = field(default_factory=list)
    eval_seconds: list[float] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        """:meth:`Row.to_dict`, then the curves."""
        return {**super().to_dict(), "schedule": self.schedule, "samples": self.samples,
                "curve_mean": self.curve_mean, "curve_std": self.curve_std,
                "curve_seen_mean": self.curve_seen_mean, "curve_avg": self.curve_avg,
                "curve_seen_avg": self.curve_seen_avg,
                "curve_task_accuracy": self.curve_task_accuracy,
                "eval_seconds": self.eval_seconds}


def curve_rows(pairs: Sequence[tuple[RowKeys, CurveResult]]) -> list[CurveRow]:
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


def plan(args: Options, chosen: Choices) -> list[tuple[RowKeys, RunSettings]]:
    """Every method (and variant) x buffer size x seed, on Table 1's protocol.

    :return: each run's row keys and settings.
    """
    runs: list[tuple[RowKeys, RunSettings]] = []
    for seed in chosen["seeds"]:
        for method in chosen["methods"]:
            for flavour in flavours(args, method):
                runs += [(dict(flavour), settings_for(args, DISJOINT, method, buffer_size=m,
                                                      seed=seed, **flavour))
                         for m in chosen["buffer_sizes"]]
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


def _curves_csv(pairs: Sequence[tuple[RowKeys, CurveResult]], n_tasks: int) -> str:
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


def _markdown(report: JsonObject, rows: Sequence[CurveRow], paths: Mapping[str, str]) -> str:
    """The final accuracies' table, then the accuracy at each task end, from the rows."""
    protocol = report["protocol"]
    assert isinstance(protocol, dict)
    ends, every = json_ints(protocol["task_ends"]), protocol["every_samples"]
    columns = [(f"M={m}", m) for m in json_ints(protocol["buffer_sizes"])]
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
    lines += ["", provenance_line(json_object(report["provenance"])), "",
              f"Plot: `{paths['png']}`", "", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


CURVE_NOTE = ("curve_mean / curve_avg: test accuracy averaged over ALL tasks (unseen tasks "
              "count, at ~0%), as the authors' main.py and GEM evaluate every task at every "
              "point; curve_seen_mean / curve_seen_avg: over the tasks seen so far")
"""What the protocol says the curves are."""

SCHEDULE_NOTE = ("periodic: every every_samples stream samples and at task ends (GEM: inside "
                 "its task-level experiences); task_ends: iCaRL (nearest-mean classifier); "
                 "end: i.i.d. baselines")
"""What the protocol says the evaluation schedules are."""


@dataclass
class Figure4Plan:
    """Figure 4's plan: choices, data, runs.

    :param chosen: the choices.
    :param data: the loaded data.
    :param stream: the first seed's stream protocol and deviations.
    :param runs: the runs, each with its job.
    :param curves: each run's row keys and curve, once swept.
    """

    chosen: Choices
    data: ArrayDataset
    stream: JsonObject
    runs: list[PlannedRun[FigureJob]]
    curves: list[tuple[RowKeys, CurveResult]] = field(default_factory=list)

    @property
    def jobs(self) -> list[FigureJob]:
        """The runs' jobs, in order."""
        return [r.job for r in self.runs]


class Figure4(Experiment[Figure4Plan]):
    """Test accuracy along disjoint MNIST every 100 samples (paper Figure 4a)."""

    def job_function(self, args: Options) -> JobFunction:
        """:func:`~.figure_runs.figure_job`, the figures' job.

        :param args: the parsed command line.
        """
        return figure_job

    def plan(self, args: Options) -> Figure4Plan:
        """Every method x buffer size x seed, each a curve.

        :param args: the parsed command line.
        """
        chosen = chosen_for(args, FIGURE4)
        chosen["methods"] = tuple(m for m in chosen["methods"] if m in METHODS)
        data_name = args.data or DISJOINT.dataset
        spt, every = chosen["samples_per_task"], chosen["every_samples"]
        data, _, stream = stream_protocol(args, data_name, spt, chosen["seeds"][0])
        pairs = plan(args, chosen)
        jobs = figure_jobs(args, data_name, data, spt, [s for _, s in pairs], _job_label,
                           every_samples=every)
        log.info("figure4: %d runs on %s (%s)", len(jobs), data.name, data.source)
        runs = [PlannedRun(s, keys, job) for (keys, s), job in zip(pairs, jobs, strict=True)]
        return Figure4Plan(chosen, data, stream, runs)

    def after_sweep(self, args: Options, plan: Figure4Plan,
                    results: Sequence[JsonObject]) -> None:
        """Read each run's curve into the plan.

        :param args: the parsed command line.
        :param plan: the plan.
        :param results: the runs' curves.
        """
        plan.curves = [(r.keys, CurveResult.from_dict(res))
                       for r, res in zip(plan.runs, results, strict=True)]

    def report(self, args: Options, argv: Sequence[str] | None,
               plan: Figure4Plan, results: Sequence[JsonObject]) -> Report:
        """The final accuracies' rows, each with its seeds' curves.

        :param args: the parsed command line.
        :param argv: the command line.
        :param plan: the plan (its curves read).
        :param results: the runs' curves.
        """
        pairs = plan.curves
        shown_as, own = figure_data_label(plan.data)
        every = plan.chosen["every_samples"]
        lr, n_iter = args.lr or DISJOINT.lr, args.n_iter or DISJOINT.n_iter
        settings = [r.settings for r in plan.runs]
        facts = SettingsFacts.of(settings)
        protocol: JsonObject = {
            **{k: jsonable(v) for k, v in plan.chosen.items()},
            **plan.stream, "lr": lr, "n_iter": n_iter,
            "settings_by_method": dict(facts.by_method),
            "method_overrides": facts.overrides(lr, n_iter),
            "batch_size": shared_setting(settings, "batch_size"),
            "replay_batch_size": shared_setting(settings, "replay_batch_size"),
            "task_aware": [m for m in plan.chosen["methods"] if m in TASK_AWARE],
            "task_ends": list(pairs[0][1].task_ends), "quick": args.quick,
            "curve": CURVE_NOTE, "schedules": SCHEDULE_NOTE,
        }
        title = (f"test accuracy along disjoint {shown_as}, every {every} samples "
                 + ("(paper Figure 4a)" if own else "(protocol of paper Figure 4a)"))
        return Report(self.name, title, DataFacts.of(plan.data), command(argv, prog_of(args)),
                      protocol, curve_rows(pairs), provenance(args.device, args.threads))

    def render(self, report: Report, plan: Figure4Plan, paths: Mapping[str, str]) -> Rendered:
        """The curves' plot and CSV, the table of final accuracies, the task ends.

        :param report: the report.
        :param plan: the plan.
        :param paths: the output files.
        """
        out = os.path.dirname(paths["md"])
        rows = [r for r in report.rows if isinstance(r, CurveRow)]
        ends = json_ints(report.protocol["task_ends"])
        sizes = plan.chosen["buffer_sizes"]
        series = [Series(row_label(row.method, row.keys)
                         + (f" M={row.buffer_size}" if len(sizes) > 1 else ""),
                         row.samples, row.curve_mean, row.curve_std,
                         {"periodic": "line", "task_ends": "markers", "end": "end"}[row.schedule])
                  for row in rows]
        shown_as = figure_data_label(plan.data)[0]
        files = {"png": plot_curves(
            series, os.path.join(out, "figure4.png"), vlines=ends[:-1],
            title=f"Disjoint {shown_as}: test accuracy (mean over all tasks), "
                  f"{len(plan.chosen['seeds'])} seed(s)")}
        files["curves_csv"] = os.path.join(out, "figure4_curves.csv")
        write_text(files["curves_csv"], _curves_csv(plan.curves, len(ends)))
        view = report.to_json()
        return Rendered(_markdown(view, rows, {**paths, **files}), table_csv(view), files)


FIGURE4_EXPERIMENT = Figure4("figure4", "")
"""The ``figure4`` experiment."""
