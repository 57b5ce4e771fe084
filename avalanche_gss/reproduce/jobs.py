"""The job a table's sweep runs, in a module that worker processes can import.

``python -m reproduce`` runs as ``__main__``; a spawned worker process or a submitit job
cannot import a function from there, so the job functions live in importable modules
(this one, and :func:`avalanche_gss.reproduce.figures.figure_job`).
"""

from __future__ import annotations

import logging
from typing import Any

from avalanche_gss.benchmarks import ArrayDataset, TaskSplit, blurry_tasks
from avalanche_gss.experiments import BUFFER_METHODS
from avalanche_gss.experiments import run as run_one
from avalanche_gss.metrics import buffer_metrics, class_task_map
from avalanche_gss.reproduce.common import load_checked, prepare_job, settings_from_dict
from avalanche_gss.reproduce.composition import task_end_trace, trace_records
from avalanche_gss.reproduce.protocols import PROTOCOLS


def build_split(data: ArrayDataset, config: dict[str, Any], seed: int) -> TaskSplit:
    """The stream a job's config names, for one seed.

    :param data: the dataset.
    :param config: a job's ``experiment`` or ``protocol`` (whose stream builder),
        ``variant`` (its row keys) and optional ``blur`` (see :func:`run_job`).
    :param seed: the run's seed.
    """
    protocol = PROTOCOLS[config["protocol"] if "protocol" in config else config["experiment"]]
    split = protocol.stream(data, seed, config["variant"])
    if config.get("blur") is not None:
        split = blurry_tasks(split, keep=config["blur"], seed=seed)
    return split


def run_job(config: dict[str, Any]) -> dict[str, Any]:
    """One run of a table's sweep.

    :param config: ``experiment``, ``data``, ``root``, ``download``, ``variant`` (the
        stream's row keys), ``settings`` (a :class:`RunSettings` as a dict) and, optionally,
        ``tensorboard`` (the run's log folder), ``protocol`` (whose stream to build, when
        it is not the experiment's own), ``blur`` (each task keeps that share of its
        samples, :func:`~avalanche_gss.benchmarks.blurry_tasks`) and ``trace`` (record
        the buffer's composition at every task end, into ``extras["trace"]``), ``imports``
        (the user modules that register its method, imported first) and the code hashes
        it was keyed by (:func:`~avalanche_gss.reproduce.common.prepare_job`).
    :return: the :class:`~avalanche_gss.experiments.RunResult` as a dict.
    """
    if not logging.getLogger().handlers:  # a worker process: log its runs as the CLI does
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                            datefmt="%H:%M:%S")
    prepare_job(config)
    data = load_checked(config)
    settings = settings_from_dict(config["settings"])
    split = build_split(data, config, settings.seed)
    plugins: list[Any] = []
    trace = None
    if config.get("trace"):
        trace = task_end_trace(split)
        plugins.append(trace)
    metrics: list[Any] = []
    loggers: list[Any] = []
    if config.get("tensorboard") and settings.method in BUFFER_METHODS:
        from avalanche.logging import TensorboardLogger

        task_of_class = class_task_map(split.task_classes) if split.is_class_disjoint else None
        metrics = buffer_metrics(every=100, task_of_class=task_of_class)
        loggers = [TensorboardLogger(config["tensorboard"])]
    result = run_one(settings, split, plugins=plugins, metrics=metrics, loggers=loggers)
    if trace is not None:
        result.extras["trace"] = trace_records(trace)
        result.extras["train_sizes"] = list(split.train_sizes)
    return result.to_dict()
