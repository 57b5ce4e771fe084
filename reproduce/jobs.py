"""The job a table's sweep runs, in a module that worker processes can import.

``python -m reproduce`` runs as ``__main__``; a spawned worker process or a submitit job
cannot import a function from there, so the job functions live in importable modules
(this one, and :func:`reproduce.figures.figure_job`).
"""

from __future__ import annotations

import logging
from typing import Any

from avalanche_gss.experiments import BUFFER_METHODS, RunSettings
from avalanche_gss.experiments import run as run_one
from avalanche_gss.metrics import buffer_metrics, class_task_map
from reproduce.common import load_checked
from reproduce.protocols import PROTOCOLS


def run_job(config: dict[str, Any]) -> dict[str, Any]:
    """One run of a table's sweep.

    :param config: ``experiment``, ``data``, ``root``, ``download``, ``variant`` (the
        stream's row keys), ``settings`` (a :class:`RunSettings` as a dict) and, optionally,
        ``tensorboard`` (the run's log folder).
    :return: the :class:`~avalanche_gss.experiments.RunResult` as a dict.
    """
    if not logging.getLogger().handlers:  # a worker process: log its runs as the CLI does
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                            datefmt="%H:%M:%S")
    data = load_checked(config)
    settings = RunSettings(**config["settings"])
    split = PROTOCOLS[config["experiment"]].stream(data, settings.seed, config["variant"])
    metrics: list[Any] = []
    loggers: list[Any] = []
    if config.get("tensorboard") and settings.method in BUFFER_METHODS:
        from avalanche.logging import TensorboardLogger

        task_of_class = class_task_map(split.task_classes) if split.is_class_disjoint else None
        metrics = buffer_metrics(every=100, task_of_class=task_of_class)
        loggers = [TensorboardLogger(config["tensorboard"])]
    return run_one(settings, split, metrics=metrics, loggers=loggers).to_dict()
