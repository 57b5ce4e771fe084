"""A sweep's runs on a cluster through submitit: packed into jobs, watched, losses reported.

The runs that have no stored result are shared out into groups of at most
``runs_per_job`` (:func:`share_out`: run ``i`` of ``n`` goes to group ``i mod g``, with
``g = ceil(n / runs_per_job)`` groups, so each group holds a mix of the sweep's methods,
sizes and seeds and the groups take about as long), and each group is one task of one
SLURM job array (submitit's ``executor.batch()``). A task runs its runs one after the
other, or ``cpus_per_job // threads`` at a time in processes of its own
(:func:`run_group`), all sharing the job's GPU when it has one; each run's own process
writes its result to the sweep's cache as it finishes, so what a task finished survives
it, and so does what finished after the submitting process died.

The submitting process watches the tasks (:func:`run_on_cluster`): a task that ends
without a result (``scancel``, killed for its memory or time) is one log line naming the
SLURM job and its runs that have no result; the other tasks go on; those runs fail the
sweep at the end (a rerun trains only them). A scheduler that does not answer, before
or during the sweep, is one :class:`SchedulerUnavailable` line.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

from avalanche_gss._atomic import atomic_write
from avalanche_gss._files import read_regular
from avalanche_gss.reproduce.json_types import Json
from avalanche_gss.reproduce.runs.cache import ResultCache

if TYPE_CHECKING:
    import submitit

__all__ = ["JOB_OPTIONS", "ClusterOptions", "JobLost", "JobOptions", "JobsDoNotFit", "RunOutcome",
           "SchedulerUnavailable", "check_capacity", "check_scheduler", "node_capacity",
           "run_group", "run_on_cluster", "runs_at_once", "share_out"]

logger = logging.getLogger(__name__)

Config = Mapping[str, Json]
"""A run's config: JSON data, the run's cache key (what the sweep's jobs are)."""

Result = Mapping[str, Json]
"""What a run returns: JSON data."""

Executed = tuple[Result, "str | None"]
"""A finished run's result, and why it could not be cached (``None``: it was)."""

RunOne = Callable[[Config], Executed]
"""Runs one config in this process and caches its result (the sweep's executor)."""

Collect = Callable[[str, Callable[[], Executed]], None]
"""Takes a run's key and what gives its result (or raises its error)."""

SCHEDULER_TIMEOUT_S = 30
"""How long ``sinfo`` may take to answer before the scheduler counts as down."""

SCHEDULER_PATIENCE_S = 120
"""How long, during a sweep, the scheduler may not answer before the sweep stops."""

RESULT_WAIT_S = 15
"""How long a job that ended may take to show its result file (a shared file system's
lag) before it counts as lost: submitit's own wait."""

JOB_OPTIONS = ("partition", "time_min", "mem_gb", "cpus_per_job", "gpus_per_job")
"""The fields of :class:`ClusterOptions` that say what each job asks of the cluster."""


class JobOptions(TypedDict, total=False):
    """What each job asks of the cluster, by :data:`JOB_OPTIONS` name (``None``: its default)."""

    partition: str | None
    time_min: int | None
    mem_gb: float | None
    cpus_per_job: int | None
    gpus_per_job: int | None

UNLIMITED_MIN = 7 * 24 * 60
"""The time asked per job where the partition has no limit and ``--time`` is not given."""

LEDGER_BYTES = 64 * 2**20
"""The largest ledger (``sweep-<job id>.json``) an adopting sweep reads: a larger file
there is no ledger of a sweep's."""


class SchedulerUnavailable(RuntimeError):
    """SLURM does not answer (its commands are missing, or the controller is down)."""


class JobsDoNotFit(SchedulerUnavailable):
    """The cluster has no node that can run a job as asked (its CPUs or its memory).

    Such a job would wait in the queue forever: the sweep is refused before it submits
    any (one line, as :class:`SchedulerUnavailable`).
    """


class JobLost(RuntimeError):
    """A run's cluster job ended without its result (cancelled, killed, timed out).

    Its job's line in the log names it already (``reported``): the sweep logs no line of
    its own for it.
    """

    reported = True


class _Job(Protocol):
    """What this module uses of a submitit job."""

    @property
    def job_id(self) -> str: ...  # noqa: D102

    def done(self, force_check: bool = False) -> bool: ...  # noqa: D102

    def result(self) -> object: ...  # noqa: D102

    def cancel(self, check: bool = True) -> None: ...  # noqa: D102

    @property
    def state(self) -> str: ...  # noqa: D102


@dataclass(frozen=True)
class ClusterOptions:
    """How a sweep's runs go to the cluster.

    :param cluster: submitit's executor: ``None`` (auto: SLURM when ``srun`` exists, else
        local processes), ``"slurm"``, ``"local"`` or ``"debug"``.
    :param runs_per_job: the most runs one job (one array task) trains.
    :param threads: torch threads of each run (``None``: the cluster's default).
    :param partition: the SLURM partition (``None``: the cluster's default).
    :param time_min: each job's time limit in minutes (``None``: the partition's limit).
    :param mem_gb: each job's memory in GB (``None``: the cluster's default).
    :param cpus_per_job: each job's CPUs (``None``: ``threads``, or 1); a job trains
        ``cpus_per_job // threads`` runs at a time (:func:`runs_at_once`).
    :param gpus_per_job: each job's GPUs (``None``: none asked); the runs a job trains
        at a time share them.
    """

    cluster: str | None = None
    runs_per_job: int = 1
    threads: int | None = None
    partition: str | None = None
    time_min: int | None = None
    mem_gb: float | None = None
    cpus_per_job: int | None = None
    gpus_per_job: int | None = None

    def __post_init__(self) -> None:
        if self.mem_gb is not None and not self.mem_gb * 1024 >= 1:
            raise ValueError(f"mem_gb must be at least 1 MB (1/1024 GB), got {self.mem_gb!r}: "
                             "SLURM reads --mem=0 as the whole node's memory")

    def submitit_params(self) -> dict[str, int | float | str]:
        """The options as ``AutoExecutor.update_parameters`` takes them (those given)."""
        params: dict[str, int | float | str] = {
            "cpus_per_task": self.cpus_per_job or self.threads or 1}
        if self.mem_gb is not None:
            params["mem_gb"] = self.mem_gb
        if self.gpus_per_job is not None:
            params["gpus_per_node"] = self.gpus_per_job
        if self.partition is not None:
            params["slurm_partition"] = self.partition
        if self.time_min is not None:
            params["timeout_min"] = self.time_min
        return params


def runs_at_once(options: ClusterOptions) -> int:
    """How many runs one job trains at a time: its CPUs over each run's threads (>= 1).

    :param options: the cluster options.
    """
    return max(1, (options.cpus_per_job or 1) // (options.threads or 1))


def share_out(keys: Sequence[str], runs_per_job: int) -> list[list[str]]:
    """Share the runs out into ``ceil(n / runs_per_job)`` groups, dealt round-robin.

    Run ``i`` goes to group ``i mod g``: neighbouring runs of a sweep (one method, one
    size, its seeds) land in different groups, so each group holds a mix and the groups
    take about as long. Group sizes differ by at most one.

    :param keys: the runs (their cache keys), in the sweep's order.
    :param runs_per_job: the most runs in one group (>= 1).
    :raises ValueError: ``runs_per_job`` is below 1.
    """
    if runs_per_job < 1:
        raise ValueError(f"runs_per_job must be >= 1, got {runs_per_job}")
    count = math.ceil(len(keys) / runs_per_job)
    return [list(keys[g::count]) for g in range(count)]


@dataclass(frozen=True)
class RunOutcome:
    """What became of one run of a job: its result, or its error as text.

    :param result: the run's result (``None``: it failed).
    :param uncached: why its result could not be cached (``None``: it was, or it failed).
    :param error: the run's error, ``Type: message`` (``None``: it finished).
    """

    result: Result | None = None
    uncached: str | None = None
    error: str | None = None

    def value(self) -> Executed:
        """The result and its caching note, as the sweep collects them.

        :raises RuntimeError: the run failed (its error's text).
        """
        if self.result is None:
            raise RuntimeError(self.error)
        return self.result, self.uncached


def _outcome(run: RunOne, config: Config) -> RunOutcome:
    """Run one config and say what became of it (its error caught, as text)."""
    try:
        result, uncached = run(config)
    except Exception as err:  # reported by the sweep, like a local run's error
        return RunOutcome(error=f"{type(err).__name__}: {err}")
    return RunOutcome(result=result, uncached=uncached)


def _init_group_worker(threads: int | None) -> None:
    """Ready a process of a job's pool: its torch threads (``None``: left alone)."""
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)


def run_group(run: RunOne, configs: Sequence[Config], cache_dir: str, at_once: int = 1,
              threads: int | None = None) -> list[RunOutcome]:
    """A cluster job: train its runs, each result cached by the run's own process.

    A run that has a result in the cache already (a requeued job, a run trained by an
    earlier job) is not trained again. Module-level, so submitit pickles it by name.

    :param run: trains one config and caches its result.
    :param configs: the job's runs.
    :param cache_dir: the sweep's cache.
    :param at_once: runs trained at a time, each in a process of its own when above 1.
    :param threads: torch threads of each run's process (``None``: the job's default).
    :return: per run, in order, what became of it.
    """
    cache = ResultCache(cache_dir)
    outcomes: dict[int, RunOutcome] = {}
    for i, config in enumerate(configs):
        stored = cache.get(config)
        if stored is not None:
            outcomes[i] = RunOutcome(result=stored)
    todo = [i for i in range(len(configs)) if i not in outcomes]
    if at_once <= 1 or len(todo) <= 1:
        outcomes.update((i, _outcome(run, configs[i])) for i in todo)
    else:
        context = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(min(at_once, len(todo)), mp_context=context,
                                    initializer=_init_group_worker,
                                    initargs=(threads,)) as pool:
            futures = {i: pool.submit(_outcome, run, configs[i]) for i in todo}
            outcomes.update((i, future.result()) for i, future in futures.items())
    return [outcomes[i] for i in range(len(configs))]


def _sinfo_problem(timeout: float = SCHEDULER_TIMEOUT_S) -> str | None:
    """Why ``sinfo`` does not answer (its first line), or ``None`` when it does.

    :param timeout: how long it may take, in seconds.
    """
    if shutil.which("sinfo") is None:
        return "sinfo is not installed here"
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer in {timeout:g} s"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        return f"sinfo failed: {lines[0].strip()}"
    return None


def check_scheduler() -> None:
    """Refuse, in one line, a SLURM that does not answer.

    :raises SchedulerUnavailable: ``sinfo`` is missing, fails or hangs.
    """
    problem = _sinfo_problem()
    if problem is not None:
        raise SchedulerUnavailable(f"SLURM does not answer ({problem}); start it (on this "
                                   "machine: make slurm-up) or run without --cluster slurm")


def node_capacity(partition: str | None) -> tuple[int, int] | None:
    """The most CPUs and the most memory (MB) one node of a partition has.

    Read from ``sinfo -N`` (one line per node; the default partition for ``None``).

    :param partition: the partition's name.
    :return: ``(cpus, memory_mb)``, each the largest of the partition's nodes; ``None``
        where sinfo lists no node of it (an unknown partition is refused when its time
        limit is read: :func:`partition_minutes`).
    """
    command = ["sinfo", "-h", "-N", "-o", "%P %c %m"] + ([] if partition is None
                                                         else ["-p", partition])
    done = subprocess.run(command, capture_output=True, text=True,
                          timeout=SCHEDULER_TIMEOUT_S, check=False)
    nodes = []
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) != 3 or (partition is None and not words[0].endswith("*")):
            continue
        cpus, memory = (word.rstrip("+") for word in words[1:])
        if cpus.isdigit() and memory.isdigit():
            nodes.append((int(cpus), int(memory)))
    if not nodes:
        return None
    return max(c for c, _ in nodes), max(m for _, m in nodes)


def check_capacity(options: ClusterOptions) -> None:
    """Refuse, in one line, jobs that no node of the partition can run.

    A job asking more CPUs (``--cpus-per-job``) or more memory (``--mem``) than the
    partition's largest node would wait in the queue forever, the sweep with it.

    :param options: the cluster options (``cpus_per_job``, ``threads``, ``mem_gb``,
        ``partition``).
    :raises JobsDoNotFit: naming the option, its value and the most a node has.
    """
    capacity = node_capacity(options.partition)
    if capacity is None:
        return
    cpus, memory_mb = capacity
    where = (f"partition {options.partition!r}" if options.partition is not None
             else "the default partition")
    asked = options.cpus_per_job or options.threads or 1
    if asked > cpus:
        flag = "--cpus-per-job" if options.cpus_per_job else "--threads"
        raise JobsDoNotFit(f"argument {flag}: {asked} CPUs per job, but the largest node of "
                           f"{where} has {cpus}; give at most {cpus} (such a job would wait "
                           "in the queue forever)")
    if options.mem_gb is not None and options.mem_gb * 1024 > memory_mb:
        raise JobsDoNotFit(f"argument --mem: {options.mem_gb:g} GB per job, but the largest "
                           f"node of {where} has {memory_mb / 1024:g} GB ({memory_mb} MB); "
                           f"give at most {memory_mb / 1024:g} (such a job would wait in the "
                           "queue forever)")


def partition_minutes(partition: str | None) -> int:
    """The time limit of a partition (the default one for ``None``), in minutes.

    :param partition: the partition's name.
    :return: its ``MaxTime``, or :data:`UNLIMITED_MIN` where it has none.
    :raises SchedulerUnavailable: the partition is unknown.
    """
    command = ["sinfo", "-h", "-o", "%P %l"] + ([] if partition is None else ["-p", partition])
    done = subprocess.run(command, capture_output=True, text=True,
                          timeout=SCHEDULER_TIMEOUT_S, check=False)
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    chosen = [limit for name, limit in lines if partition is not None or name.endswith("*")]
    if not chosen:
        raise SchedulerUnavailable(f"SLURM has no partition {partition!r}" if partition else
                                   "SLURM has no default partition; give --partition")
    return _minutes(chosen[0])


def _minutes(limit: str) -> int:
    """SLURM's ``[days-]hours:minutes:seconds`` (or ``minutes``, ``infinite``) in minutes."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", limit)
    if match is None:
        return int(limit) if limit.isdigit() else UNLIMITED_MIN
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return max(1, days * 1440 + hours * 60 + minutes + (seconds > 0))


@dataclass(frozen=True)
class _Task:
    """One submitted group: its runs (cache keys, configs) and the job that trains them."""

    keys: list[str]
    configs: list[Config]
    job: _Job
    skip: frozenset[str] = frozenset()
    """Runs of the job not to collect (an adopted job's runs stored meanwhile)."""


def run_on_cluster(todo: Mapping[str, Config], run: RunOne, cache_dir: Path,
                   options: ClusterOptions, collect: Collect,
                   labels: Mapping[str, str] | None = None) -> None:
    """Train the runs ``todo`` as packed cluster jobs; collect each run as its job ends.

    :param todo: the runs to train, by cache key.
    :param run: trains one config and caches its result (pickled into the jobs).
    :param cache_dir: the sweep's cache (the jobs write there; submitit's files go to
        its ``_submitit`` folder).
    :param options: where and how the jobs run.
    :param collect: takes each run's key and what gives its result or raises its error.
    :param labels: each run's name in log lines, by key (default: its key's start).
    :raises SchedulerUnavailable: SLURM does not answer, before submitting or for
        :data:`SCHEDULER_PATIENCE_S` while the jobs run.
    """
    import submitit  # optional dependency (the "cluster" extra)

    if options.cluster == "slurm":
        check_scheduler()
    executor = submitit.AutoExecutor(folder=cache_dir / "_submitit", cluster=options.cluster)
    params = {**options.submitit_params(), "name": f"avalanche-gss-{cache_dir.name}"}
    if executor.cluster == "slurm" and options.cluster != "slurm":  # chosen by submitit
        check_scheduler()
    if "timeout_min" not in params:
        params["timeout_min"] = (partition_minutes(options.partition)
                                 if executor.cluster == "slurm" else UNLIMITED_MIN)
    if executor.cluster == "slurm":
        check_capacity(options)
    executor.update_parameters(**params)
    slurm = executor.cluster == "slurm"
    adopted, ledgers = _adopt(todo, executor.folder) if slurm else ([], [])
    taken = {key for task in adopted for key in task.keys if key not in task.skip}
    rest = {key: config for key, config in todo.items() if key not in taken}
    tasks = _submit(executor, rest, run, str(cache_dir), options) if rest else []
    if slurm and tasks:
        ledgers.append(_write_ledger(executor.folder, tasks))
    _log_plan(len(todo) - len(taken), len(tasks), executor.cluster, options, adopted)
    try:
        _watch(adopted + tasks, cache_dir, collect, labels or {}, slurm=slurm)
    except SchedulerUnavailable:  # nothing to cancel with: the jobs may still finish
        raise
    except BaseException:  # Ctrl-C, an error here: end the jobs
        _cancel([task.job for task in adopted + tasks], slurm=slurm)
        raise
    for ledger in ledgers:  # every job listed there has ended
        ledger.unlink(missing_ok=True)


def _log_plan(runs: int, jobs: int, cluster: str, options: ClusterOptions,
              adopted: Sequence[_Task]) -> None:
    """Log where the sweep's runs go: new jobs, and jobs of an earlier sweep waited for."""
    parts = [f"{runs} run(s) in {jobs} {cluster} job(s) of at most {options.runs_per_job} "
             f"run(s), {runs_at_once(options)} at a time"] if jobs else []
    if adopted:
        waited = sum(len(set(task.keys) - task.skip) for task in adopted)
        parts.append(f"{waited} run(s) in {len(adopted)} job(s) of an earlier sweep still "
                     "out: waiting for them")
    logger.info("sweep: %s", "; ".join(parts))


def _cancel(jobs: Sequence[_Job], *, slurm: bool) -> None:
    """Cancel the jobs (those that ended are not affected): one ``scancel`` on SLURM."""
    if not slurm:
        for job in jobs:
            job.cancel(check=False)
        return
    try:
        subprocess.run(["scancel", *(job.job_id for job in jobs)], capture_output=True,
                       timeout=SCHEDULER_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        logger.warning("could not cancel the sweep's SLURM jobs: %s", err)
    else:
        logger.info("cancelled the sweep's SLURM jobs that had not ended")


def _write_ledger(folder: Path, tasks: Sequence[_Task]) -> Path:
    """Record which job trains which runs, for a sweep started again after this one died.

    :return: the ledger's path, ``sweep-<job id>.json`` in ``folder``.
    """
    path = folder / f"sweep-{tasks[0].job.job_id.split('_')[0]}.json"
    text = json.dumps([[task.job.job_id, task.keys] for task in tasks])
    atomic_write(path, lambda f: f.write(text.encode()), prefix=".tmp-", suffix=".json")
    return path


def _adopt(todo: Mapping[str, Config], folder: Path) -> tuple[list[_Task], list[Path]]:
    """The jobs an earlier sweep left out for runs of ``todo``; the ledgers done with.

    A sweep whose submitting process died (``SIGKILL``) leaves its ledger
    (:func:`_write_ledger`): the jobs it lists that still run or wait, for runs still to
    do, are watched again instead of their runs being submitted a second time (a job
    skips the runs whose results are stored). A ledger whose jobs have all ended or are
    watched again can go once this sweep ends.
    """
    import submitit

    listed: dict[Path, list[tuple[_Job, list[str]]]] = {}
    for path in sorted(folder.glob("sweep-*.json")):
        try:
            ledger = json.loads(read_regular(path, limit=LEDGER_BYTES, what="ledger"))
            entries = [(str(job_id), list(keys)) for job_id, keys in ledger]
        except (OSError, ValueError, TypeError, RecursionError):
            continue  # being written, or damaged (a link, a FIFO): not to adopt, nor to remove
        listed[path] = [(submitit.SlurmJob(folder=folder, job_id=job_id), keys)
                        for job_id, keys in entries]
    adopted, done_with = [], []
    for path, jobs in listed.items():  # the first done() asks sacct about them all
        out = [(job, keys) for job, keys in jobs if not job.done()]
        wanted = [(job, keys) for job, keys in out if any(key in todo for key in keys)]
        adopted += [_Task(keys, [todo.get(key, {}) for key in keys], job,
                          frozenset(key for key in keys if key not in todo))
                    for job, keys in wanted]
        if len(wanted) == len(out):
            done_with.append(path)
    for task in adopted:
        task.job._results_timeout_s = RESULT_WAIT_S  # type: ignore[attr-defined]
    return adopted, done_with


def _submit(executor: submitit.AutoExecutor, todo: Mapping[str, Config], run: RunOne,
            cache_dir: str, options: ClusterOptions) -> list[_Task]:
    """Submit the groups of ``todo`` as one job array; one :class:`_Task` per group."""
    from submitit.core.utils import FailedJobError

    groups = share_out(list(todo), options.runs_per_job)
    group = partial(run_group, at_once=runs_at_once(options), threads=options.threads)
    try:
        with executor.batch():
            jobs = [executor.submit(
                group, run, [todo[key] for key in keys], cache_dir) for keys in groups]
    except (FailedJobError, subprocess.SubprocessError, OSError) as err:  # sbatch's stderr
        text = " ".join(str(err).split())
        raise SchedulerUnavailable(f"SLURM refused the sweep's jobs: {text[:300]}") from None
    for job in jobs:  # submitit's, read when a job has no result
        job._results_timeout_s = RESULT_WAIT_S
    return [_Task(keys, [todo[key] for key in keys], job)
            for keys, job in zip(groups, jobs, strict=True)]


def _watch(tasks: list[_Task], cache_dir: Path, collect: Collect, labels: Mapping[str, str],
           *, slurm: bool) -> None:
    """Collect each task's runs as it ends; stop when the scheduler stays silent."""
    pending = list(tasks)
    silent_since: float | None = None
    last_check = time.monotonic()
    while pending:
        ended = [task for task in pending if task.job.done()]
        for task in ended:
            pending.remove(task)
            _collect_task(task, cache_dir, collect, labels)
        if ended or not pending:
            continue
        time.sleep(1)
        if slurm and time.monotonic() - last_check > SCHEDULER_TIMEOUT_S:
            last_check = time.monotonic()
            silent_since = _still_answering(silent_since, pending, labels)


def _still_answering(silent_since: float | None, pending: list[_Task],
                     labels: Mapping[str, str]) -> float | None:
    """When SLURM began not to answer (``None``: it answers); raise once it is too long."""
    problem = _sinfo_problem()
    if problem is None:
        return None
    now = time.monotonic()
    since = now if silent_since is None else silent_since
    if now - since < SCHEDULER_PATIENCE_S:
        logger.warning("SLURM does not answer (%s); waiting", problem)
        return since
    runs = [labels.get(key, key[:12]) for task in pending for key in task.keys]
    raise SchedulerUnavailable(
        f"SLURM stopped answering ({problem}) for {SCHEDULER_PATIENCE_S} s with "
        f"{len(pending)} job(s) out ({_listing(runs)}); runs that finish still store their "
        "results: run the sweep again once SLURM is back")


def _listing(names: Sequence[str], most: int = 8) -> str:
    """The names, comma-separated, at most ``most`` of them and how many more."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _collect_task(task: _Task, cache_dir: Path, collect: Collect,
                  labels: Mapping[str, str]) -> None:
    """Collect the runs of an ended task; a task lost by the cluster is one log line."""
    try:
        outcomes = task.job.result()
    except Exception as err:  # submitit: UncompletedJobError, FailedJobError
        _collect_lost(task, cache_dir, collect, labels, err)
        return
    assert isinstance(outcomes, list) and len(outcomes) == len(task.keys)
    for key, outcome in zip(task.keys, outcomes, strict=True):
        if key not in task.skip:
            collect(key, outcome.value)


def _collect_lost(task: _Task, cache_dir: Path, collect: Collect, labels: Mapping[str, str],
                  err: Exception) -> None:
    """A task that ended without its outcomes: its cached runs are done, the others lost."""
    cache = ResultCache(cache_dir)
    state = _state(task.job)
    lost = []
    for key, config in zip(task.keys, task.configs, strict=True):
        if key in task.skip:
            continue
        stored = cache.get(config)
        if stored is not None:
            collect(key, partial(_as_executed, stored))
        else:
            lost.append(key)
    if not lost:
        return
    names = [labels.get(key, key[:12]) for key in lost]
    why = state if state not in ("", "UNKNOWN") else " ".join(str(err).split())[:200]
    logger.error("cluster job %s ended (%s) before %d of its run(s) finished: %s; a rerun "
                 "trains them", task.job.job_id, why, len(lost), _listing(names, most=50))
    for key in lost:
        collect(key, partial(_raise_lost, f"cluster job {task.job.job_id} ended ({why}) "
                                          "before this run finished"))


def _as_executed(result: Result) -> Executed:
    """A result the cache holds, as the sweep collects a finished run's."""
    return result, None


def _raise_lost(message: str) -> Executed:
    """Raise :class:`JobLost` (a lost run's outcome, as the sweep collects it)."""
    raise JobLost(message)


def _state(job: _Job) -> str:
    """The job's state as the cluster says it (``""`` when it cannot be read)."""
    try:
        return str(job.state)
    except Exception:  # noqa: BLE001 - sacct failing: the error says what it can
        return ""
