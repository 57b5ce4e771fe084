"""What every experiment's sweep shares: its jobs' cache keys, the sweep, the checks.

A job's config is its cache key (:func:`~avalanche_gss.reproduce.runs.sweep.config_key`): it holds the
hash of the package's code (:func:`~avalanche_gss.reproduce.common.code_identity`), so any
change of the code is a new run and the same code finds its results again.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from avalanche_gss.reproduce.runs.training import RunResult, RunSettings, training_problem
from avalanche_gss.models import make_model
from avalanche_gss.reproduce.common import code_identity
from avalanche_gss.reproduce.cli import prog_of
from avalanche_gss.reproduce.runs.slurm import JOB_OPTIONS, SchedulerUnavailable
from avalanche_gss.reproduce.runs.sweep import run_sweep


@dataclass(frozen=True)
class Run:
    """One run an experiment plans.

    :param settings: the run's settings.
    :param keys: its row keys: what tells its row from the others beyond method and buffer
        size (:func:`~avalanche_gss.reproduce.reports.rows.group_rows`).
    :param job: what its job needs beyond the settings (its stream: ``variant``,
        ``protocol``, ``blur``, ``trace``...), part of its cache key.
    """

    settings: RunSettings
    keys: dict[str, Any] = field(default_factory=dict)
    job: dict[str, Any] = field(default_factory=dict)


def job_config(args: argparse.Namespace, experiment: str, data_name: str,
               identity: dict[str, str], **fields: Any) -> dict[str, Any]:
    """A job's config: the code, the experiment, the data and their identity, ``fields``.

    :param args: the parsed command line (``root``, ``download``, ``threads``).
    :param experiment: the experiment's name.
    :param data_name: the data as the job loads them (a name or an ``.npz`` path).
    :param identity: the data's identity (:func:`~avalanche_gss.reproduce.common.data_identity`).
    :param fields: what else tells this job from another (its stream, its settings...).
    """
    return {**code_identity(), "experiment": experiment, "data": data_name,
            "root": args.root, "download": args.download, **identity,
            "threads": args.threads, **fields}


def sweep(args: argparse.Namespace, experiment: str, configs: list[dict[str, Any]],
          job: Callable[[dict[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """Run (or find in the cache) every job; their results, in order.

    :param args: the parsed command line (``cache``, ``out``, ``workers``, ``launcher``,
        ``cluster``, ``threads`` and the cluster jobs' options, ``runs_per_job``...).
    :param experiment: the experiment's name (its cache folder under ``--out``).
    :param configs: the jobs.
    :param job: the module-level function that runs one job.
    :raises SystemExit: SLURM does not answer (one line).
    """
    cache_dir = args.cache or os.path.join(args.out, "cache", experiment)
    options = {key: getattr(args, key, None) for key in JOB_OPTIONS}
    try:
        return run_sweep(configs, job, cache_dir=cache_dir, workers=args.workers,
                         launcher=args.launcher, cluster=args.cluster, threads=args.threads,
                         submitit_params=options, runs_per_job=getattr(args, "runs_per_job", 1))
    except SchedulerUnavailable as err:  # one line, as the command line's own errors
        raise SystemExit(f"{prog_of(args)}: error: {err}") from None


def run_result(settings: RunSettings, result: dict[str, Any],
               drop: Sequence[str] = ()) -> RunResult:
    """A job's result as a :class:`RunResult` of ``settings``, without the extras ``drop``."""
    extras = {k: v for k, v in result["extras"].items() if k not in drop}
    return RunResult(settings=settings, task_accuracy=result["task_accuracy"],
                     avg=result["avg"], train_seconds=result["train_seconds"], extras=extras)


def _models(data: Any, names: Sequence[str]) -> dict[str, torch.nn.Module]:
    """Each named model as a run builds it for ``data`` (the global random state untouched)."""
    models = {}
    for name in names:
        with torch.random.fork_rng(devices=[]):
            models[name] = make_model(name, data.input_shape, data.num_classes)
    return models


def training_problems(data: Any, settings: Sequence[RunSettings]) -> list[str | None]:
    """What keeps each run from training its model, known before any run starts.

    The library is asked (:func:`~avalanche_gss.reproduce.runs.training.training_problem`), once per
    method, options and model, with the model built for ``data``: a buffer that reads its
    gradients off the training step (CB-GSS with ``score_from="step"``) cannot train a
    model whose BatchNorm runs in train mode (the ResNet-18).

    :param data: the loaded data (an ``ArrayDataset``).
    :param settings: every run's settings.
    :return: per run, in order, one line naming its method and what stops it, or ``None``.
    """
    models = _models(data, list(dict.fromkeys(s.model for s in settings)))
    asked: dict[str, str | None] = {}
    problems = []
    for s in settings:
        key = repr((s.method, sorted(s.options.items()), s.model, s.update))
        if key not in asked:
            asked[key] = training_problem(s, models[s.model])
        problems.append(asked[key])
    return problems


def check_model(data: Any, settings: Sequence[RunSettings]) -> None:
    """Refuse, before any run, a model that a run cannot train.

    A buffer of one sample replays batches of one; a network whose BatchNorm then sees one
    value per channel (e.g. ResNet-18 on 8x8 images) would fail in every run. A method
    that cannot train the model at all (:func:`training_problems`) is refused too.

    :param data: the loaded data (an ``ArrayDataset``).
    :param settings: every run's settings.
    :raises ValueError: naming the model, and the batch or the method it fails on.
    """
    smallest: dict[str, int] = {}
    for s in settings:
        batch = min(s.batch_size, s.replay_batch_size, s.buffer_size)
        smallest[s.model] = min(batch, smallest.get(s.model, batch))
    for name, model in _models(data, list(smallest)).items():
        batch = smallest[name]
        model.train()
        try:
            model(data.x_train[:batch])
        except (RuntimeError, ValueError) as err:
            raise ValueError(
                f"the {name} model cannot train on a batch of {batch} sample(s) of shape "
                f"{tuple(data.input_shape)} ({' '.join(str(err).split())}); use larger "
                "inputs or buffer sizes") from None
    for s, problem in zip(settings, training_problems(data, settings), strict=True):
        if problem is not None:
            raise ValueError(f"the {s.model} model cannot be trained by {s.method} with "
                             f"{s.options}: {problem}")


def check_buffer_sizes(sizes: Sequence[int] | None, data: Any, name: str) -> None:
    """Refuse, before any run, a buffer size (``--buffer-sizes``) above the data's training set.

    :param sizes: the buffer sizes the command line gives (``None``: the experiment's own).
    :param data: the loaded data (an ``ArrayDataset``).
    :param name: the data as the command line names them.
    :raises ValueError: naming the first size too large and the bound.
    """
    samples = len(data.y_train)
    too_large = [m for m in sizes or () if m > samples]
    if too_large:
        raise ValueError(f"{too_large[0]} is more than the {samples} training samples of "
                         f"{name}; give at most {samples}")
