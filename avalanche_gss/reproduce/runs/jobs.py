"""The job a table's sweep runs, in a module that worker processes can import.

``python -m reproduce`` runs as ``__main__``; a spawned worker process or a submitit job
cannot import a function from there, so the job functions live in importable modules
(this one, and :func:`avalanche_gss.reproduce.experiments.figures.figure_job`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import cast

from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics, loss_metrics
from avalanche.training.templates import SupervisedTemplate

from avalanche_gss.metrics import buffer_metrics, class_task_map
from avalanche_gss.reproduce.json_types import Json, JsonObject, Scalar, json_int
from avalanche_gss.reproduce.runs.budget import PassCounter, kept_samples, rehearsal_passes
from avalanche_gss.reproduce.runs.evaluation import (
    PeriodicEvalPlugin,
    SeenTasksAccuracy,
    seen_tasks,
    task_end_samples,
)
from avalanche_gss.reproduce.runs.planning import (
    CodeIdentity,
    Job,
    check_run_record,
    register_result_check,
)
from avalanche_gss.reproduce.runs.protocol_streams import ProtocolStream
from avalanche_gss.reproduce.runs.recording import RESULT_KEY, ScalarRecorder
from avalanche_gss.reproduce.runs.traces import task_end_trace, trace_records
from avalanche_gss.reproduce.runs.training import BUFFER_METHODS, RunResult
from avalanche_gss.reproduce.runs.training import run as run_one
from avalanche_gss.streams import ArrayDataset, TaskSplit, online_benchmark


@dataclass(frozen=True)
class StreamSpec:
    """The stream a job trains on, whole: the engine looks nothing up by an experiment's name.

    :param counts: the protocol's stream and its counts
        (:class:`~avalanche_gss.reproduce.runs.protocol_streams.ProtocolStream`), resolved
        when the experiment plans the job.
    :param variant: the stream's keys (its row keys, ``samples_per_task`` under
        ``--quick``), as the protocol's stream takes them.
    :param stream: the stream of :data:`avalanche_gss.streams.REGISTRY` to build with the
        counts in place of ``counts.name`` (which-buffer's streams); ``None``: that one.
    :param stream_options: that stream's options beyond the counts and ``variant``.
    :param trace: record the buffer's composition at every task end.
    """

    counts: ProtocolStream
    variant: Mapping[str, Scalar] = field(default_factory=dict)
    stream: str | None = None
    stream_options: Mapping[str, Scalar] | None = None
    trace: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Json]) -> StreamSpec:
        """The stream a job's config names (:meth:`config`'s inverse).

        :param config: the job's config.
        :raises ValueError: the config holds no ``counts`` object.
        """
        variant = config.get("variant") or {}
        options = config.get("stream_options")
        counts = config.get("counts")
        if not isinstance(counts, dict):
            raise ValueError(f"a job's config needs its stream's 'counts' (an object), got "
                             f"{counts!r}")
        assert isinstance(variant, dict) and (options is None or isinstance(options, dict))
        return cls(counts=ProtocolStream.from_config(counts),
                   variant=cast(dict[str, Scalar], variant),
                   stream=None if config.get("stream") is None else str(config["stream"]),
                   stream_options=cast("dict[str, Scalar] | None", options),
                   trace=bool(config.get("trace")))

    def config(self) -> JsonObject:
        """The stream's part of a job's config (only the keys it has)."""
        config: JsonObject = {"counts": self.counts.config(), "variant": dict(self.variant)}
        if self.stream is not None:
            config["stream"] = self.stream
        if self.stream_options is not None:
            config["stream_options"] = dict(self.stream_options)
        if self.trace:
            config["trace"] = True
        return config


@dataclass(frozen=True)
class Matched:
    """A compute-matched run: it trains on the batches a learner of cost ``C`` affords.

    :param c: the relative cost ``C``, an exact fraction.
    :param kept_batches: the batches it trains on.
    :param batches: the stream's batches.
    """

    c: Fraction
    kept_batches: int
    batches: int

    def config(self) -> JsonObject:
        """``{"C": "3/2", "kept_batches": ..., "batches": ...}`` as a job's config holds it."""
        return {"C": str(self.c), "kept_batches": self.kept_batches, "batches": self.batches}


@dataclass(frozen=True, kw_only=True)
class RunJob(Job):
    """One run of a table's (or ``which-buffer``'s) sweep (:func:`run_job`).

    :param stream: its stream.
    :param count_passes: count the model's passes (:class:`CountPasses`) into
        ``extras["passes"]``, with Reservoir's closed form on the same stream and settings
        (:func:`~avalanche_gss.reproduce.runs.budget.rehearsal_passes`) and the stream's batch
        count.
    :param matched: train on the batches of a learner of relative cost ``matched.c`` only
        (:func:`matched_split`); ``None``: on every batch.
    """

    stream: StreamSpec
    count_passes: bool = False
    matched: Matched | None = None

    def config(self) -> JsonObject:
        """The job as its cache key holds it."""
        config = {**self.base_config(), **self.stream.config()}
        if self.count_passes:
            config["count_passes"] = True
        if self.matched is not None:
            config["matched"] = self.matched.config()
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Json]) -> RunJob:
        """The job a config describes (as a sweep hands it to a worker process).

        :param config: the job's config (:meth:`config`, or a config built as one).
        """
        matched = config.get("matched")
        return cls(**Job.base_fields(config),
                   stream=StreamSpec.from_config(config),
                   count_passes=bool(config.get("count_passes")),
                   matched=None if not isinstance(matched, dict) else Matched(
                       Fraction(str(matched["C"])), json_int(matched["kept_batches"]),
                       json_int(matched["batches"])))


def build_split(data: ArrayDataset, stream: StreamSpec | Mapping[str, Json], seed: int
                ) -> TaskSplit:
    """The stream a job names, for one seed.

    :param data: the dataset.
    :param stream: the job's stream (or a config holding its ``counts`` and ``variant``, and
        optional ``stream`` and ``stream_options``: the registered stream built in place of
        the counts' own, and its options).
    :param seed: the run's seed.
    """
    if not isinstance(stream, StreamSpec):
        stream = StreamSpec.from_config(stream)
    options = None if stream.stream_options is None else dict(stream.stream_options)
    return stream.counts(data, seed, dict(stream.variant), stream=stream.stream,
                         options=options)


def stream_batches(split: TaskSplit, batch_size: int) -> list[int]:
    """The sizes of the batches a stream reveals: each task cut into ``batch_size``, in order."""
    return [min(batch_size, size - i) for size in split.train_sizes
            for i in range(0, size, batch_size)]


def matched_split(split: TaskSplit, batch_size: int, c: Fraction) -> TaskSplit:
    """``split`` with only the batches a learner of relative cost ``c`` trains on.

    :func:`~avalanche_gss.reproduce.runs.budget.kept_samples`: the others pass unseen by the
    model and the buffer; the test sets stay whole.
    """
    keep = kept_samples(list(split.train_sizes), batch_size, c)
    train = tuple((x[k], y[k]) for (x, y), k in zip(split.train, keep, strict=True))
    return dataclasses.replace(split, train=train,
                               protocol={**split.protocol, "relative_cost": str(c)})


class CountPasses(SupervisedPlugin):
    """Count the model's per-sample passes over a whole ``train`` call (a PassCounter).

    The passes of an experience are counted up to this plugin's ``after_training_exp``
    (the buffer's update, by a plugin before it, included); those made after it and
    before the next experience are no training passes (``--tensorboard``'s evaluations at
    the task ends and its buffer metrics) and are not counted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.counter: PassCounter | None = None
        self.forward = self.backward = 0
        self._trained: tuple[int, int] | None = None  # the counts at the experience's end

    def after_training_exp(self, strategy: SupervisedTemplate, **kwargs: object) -> None:
        if self.counter is not None:
            self._trained = (self.counter.forward, self.counter.backward)

    def before_training_exp(self, strategy: SupervisedTemplate, **kwargs: object) -> None:
        self._drop_untrained()

    def _drop_untrained(self) -> None:
        """Put the counts back to the last experience's end."""
        if self.counter is not None and self._trained is not None:
            self.counter.forward, self.counter.backward = self._trained
        self._trained = None

    def before_training(self, strategy: SupervisedTemplate, **kwargs: object) -> None:
        if self.counter is None:
            self.counter = PassCounter(strategy.model).__enter__()

    def after_training(self, strategy: SupervisedTemplate, **kwargs: object) -> None:
        self._drop_untrained()
        if self.counter is not None:
            self.counter.__exit__(None, None, None)
            self.forward, self.backward = self.counter.forward, self.counter.backward
            self.counter = None


def run_job(job: RunJob | Mapping[str, Json], *, logged: bool = False) -> JsonObject:
    """One run of a table's sweep.

    :param job: the job, or its config as a sweep hands it to its worker
        (:meth:`RunJob.from_config`).
    :param logged: a buffer method's run also records what ``--tensorboard`` logs (the
        buffer metrics, :func:`~avalanche_gss.metrics.buffer_metrics`, every 100 batches
        and at each task end; the training loss and accuracy of every batch; each task's
        test accuracy and loss, the whole test stream's and the average over the tasks
        seen, at each task end), into the result's ``tensorboard`` entry
        (:class:`~avalanche_gss.reproduce.runs.recording.ScalarRecorder`); the run
        itself, and the rest of its result, are those of the run without it (the time of
        the evaluations at the task ends is no part of ``train_seconds``).
    :return: the :class:`~avalanche_gss.reproduce.runs.training.RunResult` as a dict.
    """
    if not logging.getLogger().handlers:  # a worker process: log its runs as the CLI does
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                            datefmt="%H:%M:%S")
    if isinstance(job, RunJob):
        job.code.prepare()
    else:  # its modules first: they register its method
        CodeIdentity.from_config(job).prepare()
        job = RunJob.from_config(job)
    settings = job.settings
    split = build_split(job.data.load(), job.stream, settings.seed)
    if job.matched is not None:
        split = matched_split(split, settings.batch_size, job.matched.c)
    plugins = _Plugins(job, split, logged)
    result = run_one(settings, split, plugins=plugins.plugins, metrics=plugins.metrics,
                     loggers=plugins.loggers, label=job.label)
    if plugins.probe is not None:  # its evaluations are not training
        result = dataclasses.replace(
            result, train_seconds=result.train_seconds - plugins.probe.eval_seconds)
    return plugins.record(result, split)


class _Plugins:
    """What a job adds to its run: pass counter, composition trace, TensorBoard recorder."""

    def __init__(self, job: RunJob, split: TaskSplit, logged: bool) -> None:
        self.settings = job.settings
        self.plugins: list[SupervisedPlugin] = []
        self.counter = CountPasses() if job.count_passes else None
        self.trace = task_end_trace(split) if job.stream.trace else None
        self.plugins += [p for p in (self.counter, self.trace) if p is not None]
        self.metrics: Sequence[object] = []
        self.loggers: Sequence[object] = []
        self.recorder = None
        self.probe: PeriodicEvalPlugin | None = None
        if logged and self.settings.method in BUFFER_METHODS:
            task_of_class = (class_task_map(split.task_classes) if split.is_class_disjoint
                             else None)
            # Avalanche's usual curves, at the task ends of the task-free stream: the test
            # stream is evaluated there (the last one is the run's final evaluation)
            ends = task_end_samples(split)
            test_stream = online_benchmark(split, batch_size=self.settings.batch_size).test_stream
            probe = PeriodicEvalPlugin(test_stream, every_samples=None, at_samples=ends[:-1],
                                       per_experience=True)
            self.probe = probe
            self.plugins.append(probe)
            self.metrics = [
                *buffer_metrics(every=100, task_of_class=task_of_class, at_samples=ends),
                *accuracy_metrics(epoch=True, stream=True),
                *loss_metrics(epoch=True, experience=True, stream=True),
                SeenTasksAccuracy(lambda: seen_tasks(probe.samples, ends)),
            ]
            self.recorder = ScalarRecorder()
            self.loggers = [self.recorder]

    def record(self, result: RunResult, split: TaskSplit) -> JsonObject:
        """The run's result with what the plugins recorded."""
        settings = self.settings
        if self.counter is not None:
            batches = stream_batches(split, settings.batch_size)
            base = rehearsal_passes(batches, n_iter=settings.n_iter,
                                    replay_batch_size=settings.replay_batch_size,
                                    buffer_size=settings.buffer_size)
            result.extras["passes"] = {"forward": self.counter.forward,
                                       "backward": self.counter.backward,
                                       "reservoir_forward": base.forward,
                                       "reservoir_backward": base.backward,
                                       "batches": len(batches)}
        if self.trace is not None:
            result.extras["trace"] = trace_records(self.trace)
            result.extras["train_sizes"] = list(split.train_sizes)
        if self.recorder is None:
            return result.to_dict()
        return {**result.to_dict(), RESULT_KEY: self.recorder.scalars}


def run_logged_job(config: Mapping[str, Json]) -> JsonObject:
    """:func:`run_job` with ``logged``: the job of a sweep under ``--tensorboard``.

    The same config, so the same cache key, as the run without logs: where the logs go
    is no part of a run.

    :param config: the job's config (:func:`run_job`).
    :return: the run's result, with its ``tensorboard`` scalars for a buffer method.
    """
    return run_job(config, logged=True)


register_result_check(run_job, check_run_record)
register_result_check(run_logged_job, check_run_record)
