"""What every experiment's sweep shares: its jobs' cache keys, the sweep, the checks.

A job's config is its cache key (:func:`~avalanche_gss.reproduce.runs.sweep.config_key`): it
holds the hash of the package's code (:func:`.identity.code_identity`), so any
change of the code is a new run and the same code finds its results again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeAlias, TypedDict, TypeVar, cast

import torch

from avalanche_gss.models import make_model
from avalanche_gss.reproduce.json_types import (
    Json,
    JsonObject,
    Scalar,
    json_float,
    json_floats,
    json_int,
    json_object,
)
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.program import prog_of
from avalanche_gss.reproduce.runs.cache import ResultCheck
from avalanche_gss.reproduce.runs.identity import (
    code_identity,
    load_checked,
    method_code,
    prepare_job,
)
from avalanche_gss.reproduce.runs.settings import settings_from_dict
from avalanche_gss.reproduce.runs.slurm import JobOptions, SchedulerUnavailable
from avalanche_gss.reproduce.runs.sweep import job_name, run_sweep
from avalanche_gss.reproduce.runs.training import (
    RunResult,
    RunSettings,
    settings_dict,
    training_problem,
)
from avalanche_gss.streams import ArrayDataset

RowKeys: TypeAlias = Mapping[str, Scalar]
"""What tells a run's row from its siblings beyond method and buffer size (``{"sequence": 2}``)."""


@dataclass(frozen=True)
class CodeIdentity:
    """The code a job runs, as its cache key names it (:func:`.identity.code_identity`).

    :param version: the package's version (``code``).
    :param sha256: the hash of the package's source (``code_sha256``; ``None``: a config
        made without it, not checked).
    :param numerics: torch's version and the CPU capability (``torch``,
        ``cpu_capability``: :func:`~avalanche_gss.provenance.numerics_identity`).
    :param user_code: the hash of each module of one's own code (``None``: none).
    :param imports: the modules a worker process imports first (``None``: none).
    """

    version: str | None
    sha256: str | None
    numerics: Mapping[str, str] = field(default_factory=dict)
    user_code: Mapping[str, str] | None = None
    imports: tuple[str, ...] | None = None

    @classmethod
    def of_method(cls, method: str) -> CodeIdentity:
        """The code of this process, and of ``method``'s modules where it is of one's own.

        :param method: the run's method (:func:`.identity.method_code`).
        """
        return cls.from_config({**code_identity(), **method_code(method)})

    @classmethod
    def from_config(cls, config: Mapping[str, Json]) -> CodeIdentity:
        """The identity a job's config holds (:meth:`config`'s inverse).

        :param config: the job's config.
        """
        user_code, imports = config.get("user_code"), config.get("imports")
        return cls(version=_optional_str(config.get("code")),
                   sha256=_optional_str(config.get("code_sha256")),
                   numerics={k: str(config[k]) for k in NUMERICS if k in config},
                   user_code=(None if not isinstance(user_code, dict) else
                              {str(k): str(v) for k, v in user_code.items()}),
                   imports=(None if not isinstance(imports, list) else
                            tuple(str(i) for i in imports)))

    def config(self) -> JsonObject:
        """The identity's part of a job's config: the keys a cache key holds today."""
        config: JsonObject = {}
        if self.version is not None:
            config["code"] = self.version
        if self.sha256 is not None:
            config["code_sha256"] = self.sha256
        config.update(self.numerics)
        if self.user_code is not None:
            config["user_code"] = dict(self.user_code)
        if self.imports is not None:
            config["imports"] = list(self.imports)
        return config

    def prepare(self) -> None:
        """Import the job's modules; check that this process runs the code it names.

        :raises ValueError: as :func:`.identity.prepare_job`.
        """
        prepare_job(self.config())


NUMERICS = ("torch", "cpu_capability")
"""The keys of :func:`~avalanche_gss.provenance.numerics_identity` in a job's config."""


def _optional_str(value: Json) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class DataSource:
    """The data a job loads, and what identifies them.

    :param name: a dataset's name or an ``.npz`` path (``data``).
    :param root: the torchvision folder (``root``).
    :param download: let torchvision download them (``download``).
    :param identity: their content hash and resolved source (``data_sha256``,
        ``data_source``: :func:`.identity.data_identity`); empty: not checked.
    """

    name: str
    root: str | None
    download: bool
    identity: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Mapping[str, Json]) -> DataSource:
        """The data a job's config names (:meth:`config`'s inverse).

        :param config: the job's config.
        """
        return cls(name=str(config["data"]), root=_optional_str(config.get("root")),
                   download=bool(config.get("download", False)),
                   identity={k: str(config[k]) for k in ("data_sha256", "data_source")
                             if k in config})

    def config(self) -> JsonObject:
        """The data's part of a job's config."""
        return {"data": self.name, "root": self.root, "download": self.download,
                **self.identity}

    def load(self) -> ArrayDataset:
        """Load the data, checked to be those the identity names (:func:`.load_checked`)."""
        return load_checked(self.config())


@dataclass(frozen=True, kw_only=True)
class Job:
    """What every job of a sweep holds: its experiment, data, code, threads and settings.

    :param experiment: the experiment's name.
    :param data: the data it loads.
    :param code: the code it runs.
    :param threads: the torch threads of a run (part of its identity).
    :param settings: the run's settings.
    :param label: its name in log and failure lines, unique in its sweep (no part of its
        result).
    """

    experiment: str
    data: DataSource
    code: CodeIdentity
    threads: int
    settings: RunSettings
    label: str | None = None

    def base_config(self) -> JsonObject:
        """The shared part of :meth:`config`."""
        config: JsonObject = {**self.code.config(), "experiment": self.experiment,
                              **self.data.config(), "threads": self.threads,
                              "settings": cast(JsonObject, settings_dict(self.settings))}
        if self.label is not None:
            config["label"] = self.label
        return config

    def config(self) -> JsonObject:
        """The job as its cache key holds it (JSON; :func:`~.runs.sweep.config_key`)."""
        return self.base_config()

    @staticmethod
    def base_fields(config: Mapping[str, Json]) -> JobFields:
        """The shared fields of a job its config describes (:meth:`base_config`'s inverse).

        A subclass's ``from_config`` passes them on: ``cls(**Job.base_fields(config), ...)``.

        :param config: the job's config.
        """
        return JobFields(experiment=str(config["experiment"]),
                         data=DataSource.from_config(config),
                         code=CodeIdentity.from_config(config),
                         threads=json_int(config.get("threads", 1)),
                         settings=settings_from_dict(json_object(config["settings"])),
                         label=job_name(config))


class JobFields(TypedDict):
    """:class:`Job`'s fields, as :meth:`Job.base_fields` reads them from a config."""

    experiment: str
    data: DataSource
    code: CodeIdentity
    threads: int
    settings: RunSettings
    label: str | None


J = TypeVar("J")


@dataclass(frozen=True)
class PlannedRun(Generic[J]):
    """One run an experiment plans: the settings its row counts it by, its keys, its job.

    :param settings: the settings its row records (a run without a buffer is one job for
        every buffer size: its job holds the first, its row each).
    :param keys: its row keys (:func:`~avalanche_gss.reproduce.reports.rows.group_rows`).
    :param job: the job that runs it (or, before the data are known, its stream).
    """

    settings: RunSettings
    keys: RowKeys
    job: J


class JobBase(TypedDict):
    """The fields every :class:`Job` of one sweep shares (:func:`job_base`)."""

    experiment: str
    threads: int
    data: DataSource


def job_base(args: Options, experiment: str, data_name: str,
             identity: Mapping[str, str]) -> JobBase:
    """The fields every :class:`Job` of one sweep shares (pass them as keywords).

    :param args: the parsed command line (``root``, ``download``, ``threads``).
    :param experiment: the experiment's name.
    :param data_name: the data as the job loads them (a name or an ``.npz`` path).
    :param identity: the data's identity (:func:`.identity.data_identity`).
    """
    return JobBase(experiment=experiment, threads=int(args.threads),
                   data=DataSource(data_name, args.root, args.download, dict(identity)))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(value: object, depth: int = 1) -> bool:
    """Whether ``value`` is a list of numbers (``depth`` 2: a list of such lists)."""
    if not isinstance(value, list):
        return False
    if depth > 1:
        return all(_numbers(v, depth - 1) for v in value)
    return all(_is_number(v) for v in value)


def check_run_record(config: Mapping[str, Json], result: Mapping[str, Json]) -> None:
    """Refuse a stored result that is not a run's record (:class:`RunResult.to_dict`).

    What :func:`run_result` and the reports read of it: ``task_accuracy`` (numbers),
    ``avg`` and ``train_seconds`` (numbers), ``extras`` (an object, whose
    ``skipped_steps``, if any, is a number) and ``settings`` (an object).

    :param config: the job's config (unused: every run's record has this shape).
    :param result: the stored result.
    :raises ValueError: the first thing missing or of another type, in one line.
    """
    problems = [(key, what) for key, what, ok in (
        ("task_accuracy", "a list of numbers", _numbers(result.get("task_accuracy"))),
        ("avg", "a number", _is_number(result.get("avg"))),
        ("train_seconds", "a number", _is_number(result.get("train_seconds"))),
        ("extras", "an object", isinstance(result.get("extras"), dict)),
        ("settings", "an object", isinstance(result.get("settings"), dict))) if not ok]
    if problems:
        key, what = problems[0]
        raise ValueError(f"{key!r} is {'missing' if key not in result else 'not ' + what}")
    skipped = json_object(result["extras"]).get("skipped_steps", 0)
    if not _is_number(skipped):
        raise ValueError("extras 'skipped_steps' is not a number")


_RESULT_CHECKS: dict[Callable[..., object], ResultCheck] = {}


def register_result_check(job: Callable[..., object], check: ResultCheck) -> None:
    """Have :func:`sweep` check each stored result of ``job`` with ``check`` before using it.

    A stored result that fails it (a cache entry of another shape, its checksum written to
    match) is recomputed, with a warning naming its file.

    :param job: a module-level job function.
    :param check: ``check(config, result)`` raises ``ValueError``, ``TypeError`` or
        ``KeyError`` for a result that lacks what the experiments read from it.
    """
    _RESULT_CHECKS[job] = check


def sweep(args: Options, experiment: str, jobs: Sequence[Job],
          job: Callable[[JsonObject], JsonObject]) -> list[JsonObject]:
    """Run (or find in the cache) every job; their results, in order.

    :param args: the parsed command line (``cache``, ``out``, ``workers``, ``launcher``,
        ``cluster``, ``threads`` and the cluster jobs' options, ``runs_per_job``...).
    :param experiment: the experiment's name (its cache folder under ``--out``).
    :param jobs: the jobs.
    :param job: the module-level function that runs one job from its config; a stored
        result is checked with the check registered for it (:func:`register_result_check`).
    :raises SystemExit: SLURM does not answer (one line).
    """
    cache_dir = args.cache or os.path.join(args.out, "cache", experiment)
    configs = [j.config() for j in jobs]
    options = JobOptions(partition=args.partition, time_min=args.time_min, mem_gb=args.mem_gb,
                         cpus_per_job=args.cpus_per_job, gpus_per_job=args.gpus_per_job)
    try:
        return run_sweep(configs, job, cache_dir=cache_dir, workers=args.workers,
                         launcher=args.launcher, cluster=args.cluster, threads=args.threads,
                         submitit_params=options, runs_per_job=getattr(args, "runs_per_job", 1),
                         check=_RESULT_CHECKS.get(job))
    except SchedulerUnavailable as err:  # one line, as the command line's own errors
        raise SystemExit(f"{prog_of(args)}: error: {err}") from None


def run_result(settings: RunSettings, result: Mapping[str, Json],
               drop: Sequence[str] = ()) -> RunResult:
    """A job's result as a :class:`RunResult` of ``settings``, without the extras ``drop``."""
    extras = json_object(result["extras"])
    return RunResult(settings=settings, task_accuracy=json_floats(result["task_accuracy"]),
                     avg=json_float(result["avg"]),
                     train_seconds=json_float(result["train_seconds"]),
                     extras={k: v for k, v in extras.items() if k not in drop})


def _models(data: ArrayDataset, names: Sequence[str]) -> dict[str, torch.nn.Module]:
    """Each named model as a run builds it for ``data`` (the global random state untouched)."""
    models = {}
    for name in names:
        with torch.random.fork_rng(devices=[]):
            models[name] = make_model(name, data.input_shape, data.num_classes)
    return models


def training_problems(data: ArrayDataset, settings: Sequence[RunSettings]) -> list[str | None]:
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


def check_model(data: ArrayDataset, settings: Sequence[RunSettings]) -> None:
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


def check_buffer_sizes(sizes: Sequence[int] | None, data: ArrayDataset, name: str) -> None:
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
