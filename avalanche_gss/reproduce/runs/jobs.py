"""The job a table's sweep runs, in a module that worker processes can import.

``python -m reproduce`` runs as ``__main__``; a spawned worker process or a submitit job
cannot import a function from there, so the job functions live in importable modules
(this one, and :func:`avalanche_gss.reproduce.experiments.figures.figure_job`).
"""

from __future__ import annotations

import dataclasses
import logging
from fractions import Fraction
from typing import Any

from avalanche.core import SupervisedPlugin

from avalanche_gss.streams import ArrayDataset, TaskSplit
from avalanche_gss.reproduce.runs.budget import PassCounter, kept_samples, rehearsal_passes
from avalanche_gss.reproduce.runs.training import BUFFER_METHODS
from avalanche_gss.reproduce.runs.training import run as run_one
from avalanche_gss.metrics import buffer_metrics, class_task_map
from avalanche_gss.reproduce.common import load_checked, prepare_job, settings_from_dict
from avalanche_gss.reproduce.experiments.composition import task_end_trace, trace_records
from avalanche_gss.reproduce.reports.event_logs import RESULT_KEY, ScalarRecorder
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
from avalanche_gss.reproduce.runs.sweep import job_name


def build_split(data: ArrayDataset, config: dict[str, Any], seed: int) -> TaskSplit:
    """The stream a job's config names, for one seed.

    :param data: the dataset.
    :param config: a job's ``experiment`` or ``protocol`` (whose stream and counts),
        ``variant`` (its row keys) and, optionally, ``stream`` and ``stream_options`` (the
        registered stream built in place of the protocol's own, and its options; see
        :func:`run_job`).
    :param seed: the run's seed.
    """
    protocol = PROTOCOLS[config["protocol"] if "protocol" in config else config["experiment"]]
    return protocol.stream(data, seed, config["variant"], stream=config.get("stream"),
                           options=config.get("stream_options"))


def stream_batches(split: TaskSplit, batch_size: int) -> list[int]:
    """The sizes of the batches a stream reveals: each task cut into ``batch_size``, in order."""
    return [min(batch_size, size - i) for size in split.train_sizes
            for i in range(0, size, batch_size)]


def matched_split(split: TaskSplit, batch_size: int, c: Fraction) -> TaskSplit:
    """``split`` with only the batches a learner of relative cost ``c`` trains on.

    :func:`~avalanche_gss.reproduce.runs.budget.kept_samples`: the others pass unseen by the model and
    the buffer; the test sets stay whole.
    """
    keep = kept_samples(list(split.train_sizes), batch_size, c)
    train = tuple((x[k], y[k]) for (x, y), k in zip(split.train, keep, strict=True))
    return dataclasses.replace(split, train=train,
                               protocol={**split.protocol, "relative_cost": str(c)})


class CountPasses(SupervisedPlugin):
    """Count the model's per-sample passes over a whole ``train`` call (a PassCounter)."""

    def __init__(self) -> None:
        super().__init__()
        self.counter: PassCounter | None = None
        self.forward = self.backward = 0

    def before_training(self, strategy: Any, **kwargs: Any) -> None:
        if self.counter is None:
            self.counter = PassCounter(strategy.model).__enter__()

    def after_training(self, strategy: Any, **kwargs: Any) -> None:
        if self.counter is not None:
            self.counter.__exit__(None, None, None)
            self.forward, self.backward = self.counter.forward, self.counter.backward
            self.counter = None


def run_job(config: dict[str, Any], *, logged: bool = False) -> dict[str, Any]:
    """One run of a table's sweep.

    :param config: ``experiment``, ``data``, ``root``, ``download``, ``variant`` (the
        stream's row keys), ``settings`` (a :class:`RunSettings` as a dict) and, optionally,
        ``label`` (the run's name in its log line, unique in its sweep),
        ``protocol`` (whose stream to build, when
        it is not the experiment's own), ``stream`` and ``stream_options`` (the stream of
        :data:`avalanche_gss.streams.REGISTRY` to build with the protocol's counts, and its
        options: :func:`build_split`) and ``trace`` (record
        the buffer's composition at every task end, into ``extras["trace"]``), ``imports``
        (the user modules that register its method, imported first) and the code hashes
        it was keyed by (:func:`~avalanche_gss.reproduce.common.prepare_job`),
        ``count_passes`` (count the model's passes, :class:`CountPasses`, into
        ``extras["passes"]`` with Reservoir's closed form on the same stream and settings,
        :func:`~avalanche_gss.reproduce.runs.budget.rehearsal_passes`, and the stream's batch count) and
        ``matched`` (train on the batches a learner of relative cost ``matched["C"]``, an
        exact fraction string, trains on: :func:`matched_split`).
    :param logged: a buffer method's run also records what ``--tensorboard`` logs (the
        buffer metrics, :func:`~avalanche_gss.metrics.buffer_metrics`, every 100 batches,
        and the accuracy), into the result's ``tensorboard`` entry
        (:class:`~avalanche_gss.reproduce.reports.event_logs.ScalarRecorder`); the run itself, and
        the rest of its result, are those of the run without it.
    :return: the :class:`~avalanche_gss.reproduce.runs.training.RunResult` as a dict.
    """
    if not logging.getLogger().handlers:  # a worker process: log its runs as the CLI does
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                            datefmt="%H:%M:%S")
    prepare_job(config)
    data = load_checked(config)
    settings = settings_from_dict(config["settings"])
    split = build_split(data, config, settings.seed)
    if config.get("matched"):
        split = matched_split(split, settings.batch_size, Fraction(config["matched"]["C"]))
    plugins: list[Any] = []
    counter = None
    if config.get("count_passes"):
        counter = CountPasses()
        plugins.append(counter)
    trace = None
    if config.get("trace"):
        trace = task_end_trace(split)
        plugins.append(trace)
    metrics: list[Any] = []
    loggers: list[Any] = []
    recorder = None
    if logged and settings.method in BUFFER_METHODS:
        task_of_class = class_task_map(split.task_classes) if split.is_class_disjoint else None
        metrics = buffer_metrics(every=100, task_of_class=task_of_class)
        recorder = ScalarRecorder()
        loggers = [recorder]
    result = run_one(settings, split, plugins=plugins, metrics=metrics, loggers=loggers,
                     label=job_name(config))
    if counter is not None:
        batches = stream_batches(split, settings.batch_size)
        base = rehearsal_passes(batches, n_iter=settings.n_iter,
                                replay_batch_size=settings.replay_batch_size,
                                buffer_size=settings.buffer_size)
        result.extras["passes"] = {"forward": counter.forward, "backward": counter.backward,
                                   "reservoir_forward": base.forward,
                                   "reservoir_backward": base.backward,
                                   "batches": len(batches)}
    if trace is not None:
        result.extras["trace"] = trace_records(trace)
        result.extras["train_sizes"] = list(split.train_sizes)
    if recorder is None:
        return result.to_dict()
    return {**result.to_dict(), RESULT_KEY: recorder.scalars}


def run_logged_job(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`run_job` with ``logged``: the job of a sweep under ``--tensorboard``.

    The same config, so the same cache key, as the run without logs: where the logs go
    is no part of a run.

    :param config: the job's config (:func:`run_job`).
    :return: the run's result, with its ``tensorboard`` scalars for a buffer method.
    """
    return run_job(config, logged=True)
