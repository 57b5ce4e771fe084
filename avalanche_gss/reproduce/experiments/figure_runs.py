"""What the figures of ``python -m reproduce`` share: their settings, their job, their data.

Each figure's runs go through :func:`~avalanche_gss.reproduce.runs.sweep.run_sweep` with
:func:`figure_job`, so a stopped sweep resumes from ``--cache``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from avalanche_gss.reproduce.common import Choices, prog_of, resolve_choices, resolve_data
from avalanche_gss.reproduce.experiments.protocols import (
    PAPER_DATA,
    TABLE1,
    data_label,
    disjoint_stream,
)
from avalanche_gss.reproduce.json_types import Json, JsonObject, json_int, json_ints
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.reports.rows import RowKeys
from avalanche_gss.reproduce.runs.evaluation import CurveResult, run_curve
from avalanche_gss.reproduce.runs.identity import data_identity
from avalanche_gss.reproduce.runs.planning import (
    CodeIdentity,
    Job,
    check_run_record,
    job_base,
    register_result_check,
)
from avalanche_gss.reproduce.runs.training import VARIANT_METHODS, VARIANTS, RunSettings
from avalanche_gss.reproduce.runs.training import run as run_one
from avalanche_gss.streams import ArrayDataset, TaskSplit

FIGURE2: dict[str, object] = {
    "dim": 200, "ks": (5, 10, 20), "n_sets": 200, "n_samples": 1_000_000,
    "correlation_range": (0.0, 0.9), "jitter": 0.5, "seeds": (0,),
    "quick": {"ks": (5, 10), "n_sets": 60, "n_samples": 50_000},
}
"""Figure 2: vectors per set ``k`` (the buffer size of Eq. 4), sets, Monte Carlo draws."""

FIGURE4: dict[str, object] = {
    "methods": ("GSS-Greedy", "GSS-IQP", "GEM", "iCaRL", "Single", "iid-online",
                "iid-offline"),
    "buffer_sizes": (300,), "seeds": (0, 1, 2), "samples_per_task": 1000,
    "every_samples": 100,
    "quick": {"seeds": (0,), "samples_per_task": 100, "every_samples": 50},
}
"""Figure 4 (disjoint MNIST, 1k samples per task, accuracy every 100 samples; ``--quick``:
100 samples per task, accuracy every 50)."""

FIGURE5: dict[str, object] = {
    "methods": ("GSS-Greedy",), "buffer_sizes": (300,), "seeds": (0, 1, 2),
    "samples_per_task": 1000, "n_values": (1, 2, 5, 10, 20, 50),
    "batch_sizes": (1, 5, 10, 20, 50, 100), "n": 10, "batch_size": 10,
    "quick": {"seeds": (0,), "samples_per_task": 100, "n_values": (1, 10, 50),
              "batch_sizes": (1, 10, 50)},
}
"""Figure 5: ``n`` at batch size 10, batch size at ``n = 10`` (replay batches stay 10;
``--quick``: 100 samples per task, three values of each)."""

PAPER_FIGURE5_N = {1: 67.3}
"""The only number the paper's text gives for Figure 5 (GSS-Greedy, ``n = 1``)."""

DISJOINT = TABLE1  # lr, n_iter of the disjoint MNIST experiments


@dataclass(frozen=True, kw_only=True)
class FigureJob(Job):
    """One run of a figure (:func:`figure_job`): its whole-stream result or its curve.

    :param samples_per_task: the disjoint stream's training samples per task.
    :param kind: ``"curve"``: :func:`~avalanche_gss.reproduce.runs.evaluation.run_curve`
        every :attr:`every_samples`; ``"final"``:
        :func:`~avalanche_gss.reproduce.runs.training.run`.
    :param every_samples: a curve's samples between two evaluations.
    """

    samples_per_task: int
    kind: Literal["curve", "final"]
    every_samples: int | None = None

    def config(self) -> JsonObject:
        """The job as its cache key holds it."""
        config = {**self.base_config(), "samples_per_task": self.samples_per_task,
                  "kind": self.kind}
        if self.every_samples is not None:
            config["every_samples"] = self.every_samples
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Json]) -> FigureJob:
        """The job a config describes (as a sweep hands it to a worker process).

        :param config: the job's config (:meth:`config`).
        """
        kind = str(config["kind"])
        if kind not in ("curve", "final"):
            raise ValueError(f"unknown figure job kind {kind!r}; choose curve or final")
        every = config.get("every_samples")
        return cls(**Job.base_fields(config),
                   samples_per_task=json_int(config["samples_per_task"]),
                   kind="curve" if kind == "curve" else "final",
                   every_samples=None if every is None else json_int(every))


def figure_job(job: FigureJob | Mapping[str, Json]) -> JsonObject:
    """One run of a figure (module-level, so worker processes and submitit can pickle it).

    :param job: the job, or its config as a sweep hands it to its worker
        (:meth:`FigureJob.from_config`).
    :return: the :class:`CurveResult` or :class:`RunResult` as a dict.
    """
    if isinstance(job, FigureJob):
        job.code.prepare()
    else:  # a worker process: the user modules its method comes from, first
        CodeIdentity.from_config(job).prepare()
        job = FigureJob.from_config(job)
    settings = job.settings
    split = disjoint_stream(job.samples_per_task)(job.data.load(), settings.seed, {})
    if job.kind == "curve":
        assert job.every_samples is not None
        return run_curve(settings, split, every_samples=job.every_samples,
                         label=job.label).to_dict()
    return run_one(settings, split, label=job.label).to_dict()


def _check_figure_result(config: Mapping[str, Json], result: Mapping[str, Json]) -> None:
    """Refuse a stored result of :func:`figure_job` that is not what it returns.

    A ``curve`` job's: a :class:`~avalanche_gss.reproduce.runs.evaluation.CurveRecord`
    whose ``result`` is a run's record and whose points are as many as its accuracies;
    a ``final`` job's: a run's record (:func:`~.planning.check_run_record`).

    :raises ValueError: the first thing missing or of another type, in one line.
    """
    if config.get("kind") != "curve":
        check_run_record(config, result)
        return
    run = result.get("result")
    if not isinstance(run, dict):
        raise ValueError("'result' is " + ("missing" if "result" not in result
                                           else "not an object"))
    check_run_record(config, run)
    for key in ("samples", "task_ends"):
        value = result.get(key)
        if not isinstance(value, list) or not all(type(v) is int for v in value):
            raise ValueError(f"{key!r} is not a list of integers")
    points = result.get("task_accuracy")
    if not isinstance(points, list) or len(points) != len(json_ints(result["samples"])) \
            or not all(isinstance(p, list) and all(_is_number(v) for v in p) for p in points):
        raise ValueError("'task_accuracy' is not a list of numbers per point of 'samples'")
    if not isinstance(result.get("schedule"), str):
        raise ValueError("'schedule' is not a string")
    if not _is_number(result.get("eval_seconds")):
        raise ValueError("'eval_seconds' is not a number")
    CurveResult.from_dict(result)  # its settings: TypeError or ValueError if not a run's


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


register_result_check(figure_job, _check_figure_result)


def chosen_for(args: Options, spec: Mapping[str, object]) -> Choices:
    """The spec's settings, its ``quick`` ones under ``--quick``, then the command line's."""
    return resolve_choices(args, {k: v for k, v in spec.items() if k != "quick"},
                           cast(Mapping[str, object], spec["quick"]),
                           ("methods", "seeds", "buffer_sizes"))


def figure_jobs(args: Options, data_name: str, data: ArrayDataset,
                samples_per_task: int, settings: Sequence[RunSettings],
                label: Callable[[RunSettings], str], every_samples: int | None = None
                ) -> list[FigureJob]:
    """A figure's job for each run's settings (a curve's where ``every_samples`` is given).

    :param args: the parsed command line.
    :param data_name: the data as the command line names them.
    :param data: the loaded data.
    :param samples_per_task: the stream's training samples per task.
    :param settings: each run's settings.
    :param label: each run's name in log and failure lines.
    :param every_samples: a curve's samples between two evaluations (``None``: each run's
        final accuracy).
    """
    base = job_base(args, args.experiment, data_name, data_identity(data))
    return [FigureJob(**base, code=CodeIdentity.of_method(s.method),
                      settings=s, label=label(s), samples_per_task=samples_per_task,
                      kind="final" if every_samples is None else "curve",
                      every_samples=every_samples)
            for s in settings]


def figure_data_label(data: ArrayDataset) -> tuple[str, bool]:
    """How the data are named in titles; whether they were verified to be MNIST (or subset)."""
    return data_label(data), data.verified_as in PAPER_DATA["mnist"]


def stream_protocol(args: Options, data_name: str, samples_per_task: int,
                    seed: int) -> tuple[ArrayDataset, TaskSplit, JsonObject]:
    """The data (checked for the disjoint protocol), the first seed's stream, its protocol.

    :raises SystemExit: one line naming the data, when they do not fit the protocol.
    """
    _, data = resolve_data(args, DISJOINT)  # one-line errors for data that cannot load
    try:
        DISJOINT.check(data)
    except ValueError as err:
        raise SystemExit(f"{prog_of(args)}: error: --data {data_name}: {err}") from None
    split = disjoint_stream(samples_per_task)(data, seed, {})
    stream = {k: v for k, v in split.protocol.items() if k != "deviations"}
    return data, split, {"stream": stream, "deviations": split.protocol.get("deviations", [])}


def row_label(method: str, keys: RowKeys) -> str:
    """A row's method, with its variant in parentheses where it has one."""
    return method + (f" ({keys['variant']})" if "variant" in keys else "")


def flavours(args: Options, method: str) -> list[RowKeys]:
    """A method with variants once per ``--variants`` entry; other methods once."""
    if method in VARIANT_METHODS:
        return [{"variant": v} for v in (getattr(args, "variants", None) or VARIANTS)]
    return [{}]
