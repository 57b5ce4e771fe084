"""``python -m reproduce composition``: what each buffer holds along a disjoint MNIST stream.

Not a table of the paper: the diagnosis behind our Table 1/4 findings (why a policy
trails or leads). For each method (and variant) it records, every 400 samples, the
stored samples per task, the stored-score quantiles (GSS-Greedy) and the share of
offered samples the buffer took in, then writes ``composition.json``, ``.csv`` and ``.md``.
``--quick`` runs 200 samples per task and records every 100 (:data:`QUICK`).

The helpers below (:func:`task_shares`, :func:`at_task_ends`, and
:func:`~avalanche_gss.reproduce.runs.traces.task_end_trace` and
:func:`~avalanche_gss.reproduce.runs.traces.trace_records`, re-exported) are the same
diagnosis for other experiments' runs (``which-buffer`` traces its runs with them).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from avalanche_gss.diagnostics import BufferTrace
from avalanche_gss.reproduce.common import Choices, command, prog_of, resolve_choices, resolve_data
from avalanche_gss.reproduce.experiments.protocols import TABLE1, data_label
from avalanche_gss.reproduce.json_types import (
    Json,
    JsonObject,
    json_float,
    json_floats,
    json_int,
    json_ints,
    json_objects,
    json_strs,
)
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.reports.report import DataFacts, Report, jsonable, shared_setting
from avalanche_gss.reproduce.reports.writing import (
    data_lines,
    protocol_line,
    provenance,
    provenance_line,
)
from avalanche_gss.reproduce.runner import Experiment, JobFunction, Rendered
from avalanche_gss.reproduce.runs.identity import data_identity
from avalanche_gss.reproduce.runs.jobs import StreamSpec, build_split
from avalanche_gss.reproduce.runs.planning import (
    CodeIdentity,
    DataSource,
    Job,
    check_run_record,
    register_result_check,
)
from avalanche_gss.reproduce.runs.settings import settings_from_dict
from avalanche_gss.reproduce.runs.traces import TraceRecord, task_end_trace, trace_records
from avalanche_gss.reproduce.runs.training import VARIANT_METHODS, run, run_label
from avalanche_gss.streams import ArrayDataset, TaskSplit

__all__ = ["COLUMNS", "COMPOSITION", "Composition", "CompositionJob", "CompositionRow",
           "at_task_ends", "composition_job",
           "task_end_trace", "task_shares", "trace_records"]


def task_shares(record: TraceRecord) -> list[float]:
    """Each task's share of the stored samples in one trace record (zeros when empty).

    :param record: a :meth:`BufferTrace.snapshot` record.
    """
    counts = record["task_counts"]
    total = sum(counts)
    return [c / total if total else 0.0 for c in counts]


def at_task_ends(records: Sequence[TraceRecord], train_sizes: Sequence[int]
                 ) -> list[TraceRecord | None]:
    """For each task, the first record at or after its end (``None`` if there is none).

    Each returned record gains ``admitted_in_task``: the share of that task's samples the
    buffer took in (from the records' ``admitted_share`` since the previous task end).

    :param records: a trace's records, in stream order.
    :param train_sizes: the split's task sizes.
    """
    ends = [sum(train_sizes[: k + 1]) for k in range(len(train_sizes))]
    picked: list[TraceRecord | None] = []
    i = 0
    for end in ends:
        admitted = offered = 0.0
        found: TraceRecord | None = None
        while i < len(records) and found is None:
            rec = records[i]
            seen = rec["samples"] - (records[i - 1]["samples"] if i else 0)
            admitted += rec["admitted_share"] * seen
            offered += seen
            if rec["samples"] >= end:
                found = rec
            i += 1
        if found is not None:
            found = found.copy()
            found["admitted_in_task"] = admitted / offered if offered else 0.0
        picked.append(found)
    return picked


COLUMNS = (
    "samples: the stream's training samples seen so far (a record every {every}); stored "
    "per task: how many of the buffer's samples come from tasks 1, 2, ...; score "
    "q10/q50/q90: the 10%, 50% and 90% quantiles of the stored samples' scores (GSS-Greedy's "
    "score: the largest gradient cosine to n buffer samples, + 1; '-' for a method that "
    "scores no sample); admitted: the share of the samples offered since the previous "
    "record that the buffer took in. A 'final accuracy' row: test accuracy (%) on each task "
    "at the end of the stream, and their average.")
"""The legend of the composition table (``{every}``: samples between records)."""

EVERY = 400
"""Training samples between two records of the composition."""

CHOICES = {"methods": ("Reservoir", "GSS-Greedy"), "seeds": (0,), "buffer_sizes": (300,),
           "every": EVERY}
"""What ``composition`` runs unless the command line says otherwise (the first size only)."""

QUICK = {"samples_per_task": 200, "every": 100}
"""What ``--quick`` changes: 200 samples per task instead of Table 1's, a record every 100."""


@dataclass
class CompositionRow:
    """One run's buffer along the stream, and its final accuracy.

    :param method: the method.
    :param seed: the seed.
    :param variant: its variant (``None``: a method without variants).
    :param buffer_size: the buffer size.
    :param avg: its final average accuracy.
    :param task_accuracy: its final accuracy per task.
    :param trace: the buffer's records along the stream (:class:`BufferTrace`).
    """

    method: str
    seed: int
    variant: str | None
    buffer_size: int
    avg: float
    task_accuracy: list[float]
    trace: list[JsonObject]

    def to_dict(self) -> JsonObject:
        """The row as the report records it."""
        return {"method": self.method, "seed": self.seed, "variant": self.variant,
                "buffer_size": self.buffer_size, "avg": self.avg,
                "task_accuracy": jsonable(self.task_accuracy), "trace": jsonable(self.trace)}


def _csv(rows: Sequence[CompositionRow], n_tasks: int) -> str:
    """One line per record of every run: the buffer's composition along the stream."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["method", "variant", "seed", "buffer_size", "samples", "stored",
                     *[f"stored_T{k + 1}" for k in range(n_tasks)], "score_q10", "score_q50",
                     "score_q90", "admitted_share"])
    for r in rows:
        for rec in r.trace:
            q = rec.get("score_q10_q50_q90")  # the scores' quantiles, where it scores
            quantiles = list(q) if isinstance(q, (list, tuple)) and q else ["", "", ""]
            writer.writerow([r.method, r.variant or "", r.seed, r.buffer_size,
                             rec["samples"], rec["size"], *json_ints(rec["task_counts"]),
                             *quantiles,
                             f"{rec['admitted_share']:.4f}"])
    return buffer.getvalue()


def _markdown(report: Report, rows: Sequence[CompositionRow], label: str) -> str:
    protocol = report.protocol
    m = json_ints(protocol["buffer_sizes"])[0]
    lines = [f"# composition: buffer composition along disjoint {label} (M={m}; ours, not a "
             "table of the paper)", "", *data_lines(report.to_json())]
    line = protocol_line(protocol)
    if line:
        lines += [line, ""]
    deviations = json_strs(protocol["deviations"])
    if deviations:
        lines += ["Deviations from the paper's protocol:", ""]
        lines += [f"- {d}" for d in deviations] + [""]
    lines += ["Columns: " + COLUMNS.format(every=protocol["every"]), "",
              "| method | seed | samples | stored per task | score q10/q50/q90 | admitted |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        name = r.method + (f" ({r.variant})" if r.variant else "")
        for rec in r.trace:
            lines.append(f"| {name} | {r.seed} | {rec['samples']} | "
                         f"{rec.get('task_counts')} | {rec.get('score_q10_q50_q90', '-')} | "
                         f"{100 * json_float(rec['admitted_share']):.1f}% |")
        lines.append(f"| {name} | {r.seed} | final accuracy | "
                     f"{[round(a, 1) for a in r.task_accuracy]} | avg {r.avg:.1f} | |")
    lines += ["", provenance_line(report.provenance or {}), "",
              f"Command: `{report.command}`", ""]
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class CompositionJob(Job):
    """One traced run of ``composition`` (:func:`composition_job`).

    :param stream: its stream (Table 1's, shorter under ``--quick``).
    :param every: training samples between two records of the buffer.
    :param variant: its method's variant (``None``: a method without variants), a row key.
    """

    stream: StreamSpec
    every: int
    variant: str | None = None

    def config(self) -> JsonObject:
        """The job as its cache key holds it."""
        return {**self.base_config(), **self.stream.config(), "every": self.every,
                "row_variant": self.variant}

    @classmethod
    def from_config(cls, config: Mapping[str, Json]) -> CompositionJob:
        """The job a config describes (as a sweep hands it to a worker process).

        :param config: the job's config (:meth:`config`).
        """
        variant = config.get("row_variant")
        return cls(**Job.base_fields(config),
                   stream=StreamSpec.from_config(config),
                   every=json_int(config["every"]),
                   variant=None if variant is None else str(variant))


def composition_job(job: CompositionJob | Mapping[str, Json]) -> JsonObject:
    """One traced run (module-level, so worker processes and submitit can pickle it).

    :param job: the job, or its config as a sweep hands it to its worker.
    :return: the run's record (:meth:`~.runs.training.RunResult.to_dict`) with ``trace``,
        the buffer's records along the stream (:class:`~avalanche_gss.diagnostics.
        BufferTrace`).
    """
    if isinstance(job, CompositionJob):
        job.code.prepare()
    else:  # a worker process: the user modules its method comes from, first
        CodeIdentity.from_config(job).prepare()
        job = CompositionJob.from_config(job)
    split = build_split(job.data.load(), job.stream, job.settings.seed)
    trace = BufferTrace(None, split.task_classes, every=job.every)
    result = run(job.settings, split, plugins=[trace])
    return {**result.to_dict(), "trace": jsonable(trace.records)}


def _check_composition_result(config: Mapping[str, Json], result: Mapping[str, Json]) -> None:
    """Refuse a stored result of :func:`composition_job` that is not what it returns.

    :raises ValueError: the run's record is incomplete, or ``trace`` is no list of objects.
    """
    check_run_record(config, result)
    trace = result.get("trace")
    if not isinstance(trace, list) or not all(isinstance(r, dict) for r in trace):
        raise ValueError("'trace' is not a list of objects")


register_result_check(composition_job, _check_composition_result)


@dataclass
class CompositionPlan:
    """The runs to trace: each seed's stream, each method (and variant)'s job.

    :param chosen: the choices.
    :param data: the loaded data.
    :param splits: each seed's stream.
    :param jobs: each run's job.
    """

    chosen: Choices
    data: ArrayDataset
    splits: list[TaskSplit]
    jobs: list[CompositionJob]


class Composition(Experiment[CompositionPlan]):
    """Trace each method's buffer along Table 1's stream (each run a cached job)."""

    def plan(self, args: Options) -> CompositionPlan:
        """Each seed's stream, each method and variant's job.

        :param args: the parsed command line.
        """
        protocol = TABLE1
        data_name, data = resolve_data(args, protocol)
        chosen = resolve_choices(args, CHOICES, QUICK, ("methods", "seeds", "buffer_sizes"))
        quick = ({"samples_per_task": chosen["samples_per_task"]}
                 if "samples_per_task" in chosen else {})
        stream = StreamSpec(protocol.stream, quick)
        lr, n_iter = args.lr or protocol.lr, args.n_iter or protocol.n_iter
        source = DataSource(data_name, args.root, args.download, data_identity(data))
        splits, jobs = [], []
        for seed in chosen["seeds"]:
            splits.append(build_split(data, stream, seed))
            for method in chosen["methods"]:
                for variant in (args.variants if method in VARIANT_METHODS else ["paper"]):
                    settings = settings_from_dict({
                        "method": method, "buffer_size": chosen["buffer_sizes"][0],
                        "seed": seed, "n_iter": n_iter, "lr": lr, "device": args.device,
                        **({"variant": variant} if method in VARIANT_METHODS else {})})
                    jobs.append(CompositionJob(
                        experiment=self.name, data=source, threads=args.threads,
                        code=CodeIdentity.of_method(method), settings=settings,
                        label=run_label(settings), stream=stream, every=chosen["every"],
                        variant=variant if method in VARIANT_METHODS else None))
        return CompositionPlan(chosen, data, splits, jobs)

    def job_function(self, args: Options) -> JobFunction:
        """:func:`composition_job` (``--tensorboard`` does not apply).

        :param args: the parsed command line.
        """
        return composition_job

    def report(self, args: Options, argv: Sequence[str] | None,
               plan: CompositionPlan, results: Sequence[JsonObject]) -> Report:
        """The buffers' records and the final accuracies of the traced runs.

        :param args: the parsed command line.
        :param argv: the command line.
        :param plan: the plan.
        :param results: each job's result, in order.
        """
        rows = [CompositionRow(job.settings.method, job.settings.seed, job.variant,
                               job.settings.buffer_size, json_float(result["avg"]),
                               json_floats(result["task_accuracy"]),
                               json_objects(result["trace"]))
                for job, result in zip(plan.jobs, results, strict=True)]
        return Report("composition", None, DataFacts.of(plan.data),
                      command(argv, prog_of(args)), _protocol(args, plan), rows,
                      provenance(args.device, args.threads))

    def render(self, report: Report, plan: CompositionPlan,
               paths: Mapping[str, str]) -> Rendered:
        """The records' CSV and Markdown.

        :param report: the report.
        :param plan: the plan.
        :param paths: the output files.
        """
        rows = [r for r in report.rows if isinstance(r, CompositionRow)]
        return Rendered(_markdown(report, rows, data_label(plan.data)),
                        _csv(rows, len(plan.splits[0].train_sizes)))


def _protocol(args: Options, plan: CompositionPlan) -> JsonObject:
    """The protocol as run: the choices, the runs' settings, the first seed's stream."""
    chosen, split = plan.chosen, plan.splits[0]
    settings = [j.settings for j in plan.jobs]
    every = chosen["every"]
    quick = ([f"--quick: {chosen['samples_per_task']} samples per task, a record every "
              f"{every}"] if "samples_per_task" in chosen else [])
    return {
        "methods": list(chosen["methods"]), "variants": list(args.variants),
        "seeds": list(chosen["seeds"]), "buffer_sizes": [chosen["buffer_sizes"][0]],
        "lr": shared_setting(settings, "lr"), "n_iter": shared_setting(settings, "n_iter"),
        "batch_size": shared_setting(settings, "batch_size"),
        "replay_batch_size": shared_setting(settings, "replay_batch_size"),
        "every": every, "quick": args.quick,
        "stream": {k: v for k, v in split.protocol.items() if k != "deviations"},
        "deviations": [*split.protocol.get("deviations", []), *quick],
        "columns": COLUMNS.format(every=every)}


COMPOSITION = Composition("composition", "")
"""The ``composition`` experiment."""
