"""Run many independent runs (method x buffer x seed x variant), resumably.

A *job* is a JSON-serialisable config dict; ``fn(config) -> dict`` runs it. Each finished
job's result is stored as one file under ``cache_dir``, named by a hash of the whole
config (:class:`ResultCache`), written to a temporary file and moved into place with
``os.replace``: a sweep killed at any moment (even ``SIGKILL``) leaves only whole results,
and running it again runs only the jobs without one. Jobs run one after the other in this
process, in ``workers`` spawned processes (``concurrent.futures``), or on a SLURM cluster
through submitit's ``AutoExecutor``; in every case the job's own process writes its result,
so a finished job survives the death of the process that launched it.

``Ctrl-C`` (``SIGINT``) stops a sweep: no job starts after it, the jobs running in worker
processes are ended, and :class:`SweepInterrupted` (a ``KeyboardInterrupt``) says how many
jobs have a stored result. Worker processes ignore ``SIGINT`` themselves (a terminal sends
it to them too): the process that runs the sweep stops them.

A job's config may name it with a ``label`` entry (a string): log lines and
:class:`SweepError` then name the job by it, and two different jobs of one sweep may not
share one.

Changing what ``fn`` computes for an unchanged config is invisible to the cache: put a
version into the configs, or use a fresh ``cache_dir``.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from importlib.machinery import ModuleSpec
from multiprocessing.synchronize import Event
from types import FrameType
from typing import TYPE_CHECKING, Literal

from tqdm import tqdm

from avalanche_gss.reproduce.json_types import Json, JsonObject
from avalanche_gss.reproduce.runs.cache import (
    ResultCache,
    ResultCheck,
    canonical_json,
    config_key,
)

__all__ = ["ResultCache", "SweepError", "SweepInterrupted", "UncachedResultWarning",
           "available_cpus", "config_key", "job_name", "run_sweep", "worker_threads"]

logger = logging.getLogger(__name__)

JobFn = Callable[[JsonObject], JsonObject]
Launcher = Literal["local", "submitit"]

if TYPE_CHECKING:  # submitit's options: the module itself is imported when a sweep uses it
    from avalanche_gss.reproduce.runs.slurm import JobOptions


class SweepError(RuntimeError):
    """Some jobs failed; the others' results are stored.

    :param failures: ``(config, exception)`` of every failed job.
    """

    def __init__(self, failures: list[tuple[JsonObject, BaseException]]) -> None:
        self.failures = failures
        lines = [f"  job {config_key(cfg)[:12]}{_named(cfg)}: {type(err).__name__}: {err}"
                 for cfg, err in failures[:10]]
        more = f"\n  ... and {len(failures) - 10} more" if len(failures) > 10 else ""
        super().__init__(f"{len(failures)} job(s) failed (their configs are in .failures):\n"
                         + "\n".join(lines) + more)


class SweepInterrupted(KeyboardInterrupt):
    """The sweep was interrupted (``Ctrl-C``); no job started after it.

    The jobs that finished before it have their results stored: running the sweep again
    runs the others.

    :param cached: how many of the sweep's jobs have a stored result.
    :param total: how many jobs the sweep has (identical configs counted once).
    :param cache_dir: where the results are stored.
    """

    def __init__(self, cached: int, total: int, cache_dir: str) -> None:
        self.cached = cached
        self.total = total
        self.cache_dir = cache_dir
        super().__init__(f"sweep interrupted: {cached} of {total} jobs have a stored result "
                         f"in {cache_dir}; run it again to continue")


def job_name(config: Mapping[str, Json]) -> str | None:
    """A job's ``label`` entry, where it has a non-empty string one; else ``None``.

    :param config: the job's config.
    """
    label = config.get("label")
    return label if isinstance(label, str) and label else None


def _named(config: Mapping[str, Json]) -> str:
    """`` (label)`` after a job's key in messages, where it has a label."""
    label = job_name(config)
    return "" if label is None else f" ({label})"


class UncachedResultWarning(RuntimeWarning):
    """A finished job's result could not be stored (full disk, read-only or foreign folder).

    The sweep keeps the result and returns it with the others; only a rerun would compute
    it again. The message names the cache file.
    """


def available_cpus() -> int:
    """Return the CPUs this process may run on (its affinity mask where there is one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - macOS, Windows


def worker_threads(workers: int) -> int:
    """Return the torch threads each of ``workers`` processes gets: ``max(1, cpus // workers)``.

    :param workers: number of parallel processes.
    """
    return max(1, available_cpus() // max(1, workers))


_STOP: Event | None = None
"""In a worker process: the sweep's stop event (set when the sweep is interrupted)."""


def _watch_parent(parent: int, stop: Event | None = None) -> None:
    """End this worker when its parent is gone (even by SIGKILL), or ``stop`` is set.

    :param parent: the process that started this worker.
    :param stop: the sweep's ``Event``, set when it is interrupted (``None``: none).
    """
    while stop is None or not stop.is_set():
        if os.getppid() != parent:
            os._exit(1)
        if stop is None:
            time.sleep(0.5)
        else:
            stop.wait(0.5)
    os._exit(1)


def _init_worker(threads: int, parent: int | None = None, stop: Event | None = None) -> None:
    """Ready a fresh worker: its threads; SIGINT ignored; exit with its parent or ``stop``.

    :param threads: its torch threads.
    :param parent: the process that started it (``None``: not watched).
    :param stop: the sweep's ``Event``: once set, the worker exits and starts no job.
    """
    global _STOP
    # Ctrl-C reaches the whole process group: the sweep's process handles it and stops
    # the workers. A worker started with SIGINT blocked (_deaf_children) discards the
    # pending signal here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _STOP = stop
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    if parent is not None:
        threading.Thread(target=_watch_parent, args=(parent, stop), daemon=True,
                         name="watch-parent").start()


@contextlib.contextmanager
def _deaf_children() -> Iterator[None]:
    """Block SIGINT in this thread while it starts worker processes, which inherit the mask.

    A worker then ignores it from its first instruction (:func:`_init_worker` discards it),
    not only once it has imported its modules; a SIGINT meant for this process waits
    until the block ends. The resource tracker of ``multiprocessing`` must run already
    (it unblocks SIGINT when it starts): creating the pool's queues starts it.
    """
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - Windows
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _execute(
    fn: JobFn, config: JsonObject, cache_dir: str, threads: int | None = None
) -> tuple[JsonObject, str | None]:
    """Run one job where it was sent and store its result there (module-level: picklable).

    :return: the result, and why it could not be stored (``None`` when it was): a job
        whose result cannot be written to the cache still succeeds, and the process that
        collects it warns.
    """
    if _STOP is not None and _STOP.is_set():
        raise RuntimeError("the sweep was interrupted before this job started")
    if threads is not None and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    start = time.perf_counter()
    result = fn(dict(config))
    if not isinstance(result, Mapping):
        raise TypeError(f"job function returned {type(result).__name__}, not a dict")
    try:
        ResultCache(cache_dir).put(config, result, time.perf_counter() - start)
    except OSError as err:
        where = os.fsdecode(err.filename or os.path.join(cache_dir, f"{config_key(config)}.json"))
        reason = " ".join((err.strerror or str(err)).split())
        said = reason if where in reason else f"{where} ({reason})"
        return dict(result), (f"could not cache a finished result: {said}; it is kept for "
                              "this sweep only")
    return dict(result), None


def run_sweep(jobs: Sequence[Mapping[str, Json]], fn: JobFn, *, cache_dir: str | os.PathLike[str],
              workers: int = 1, launcher: Launcher = "local", progress: bool = True,
              cluster: str | None = None, submitit_params: JobOptions | None = None,
              threads: int | None = None, runs_per_job: int = 1,
              check: ResultCheck | None = None) -> list[JsonObject]:
    """Run every job that has no stored result; return all results, in job order.

    Stored results are reused (rerun to resume; identical configs run once); a failing
    job does not stop the others; a result that cannot be stored is still returned, with
    an :class:`UncachedResultWarning`; ``Ctrl-C`` stops the sweep (module docstring).

    :param jobs: the configs (JSON-serialisable dicts, e.g. ``{"method": "GSS-Greedy",
        "buffer_size": 300, "seed": 0}``). A ``label`` entry (a string) names its job in
        log lines and in :class:`SweepError`; different jobs may not share one.
    :param fn: ``fn(config) -> dict``, module-level (pickled by reference into workers
        and cluster jobs), returning JSON data; the config arrives as JSON (tuples as lists).
    :param cache_dir: where results are stored, one file per job.
    :param workers: ``launcher="local"``: jobs run in this process when 1, else in that
        many spawned processes, each limited to :func:`worker_threads` torch threads
        (spawned processes import the main script again: call ``run_sweep`` under
        ``if __name__ == "__main__":``, with ``fn`` in an importable module, not a
        package's ``__main__``). Capped, with a warning, at the CPUs available. Workers
        exit when this process dies. Ignored by ``"submitit"`` (the cluster decides).
    :param launcher: ``"local"`` or ``"submitit"`` (SLURM through ``submitit.AutoExecutor``).
    :param progress: show a tqdm progress bar on stderr.
    :param cluster: submitit's executor: ``None`` (auto: SLURM when ``srun`` exists, else
        local processes), ``"slurm"``, ``"local"`` or ``"debug"`` (in this process; it
        opens ``pdb`` when a job fails).
    :param submitit_params: the fields of
        :class:`~avalanche_gss.reproduce.runs.slurm.ClusterOptions` beyond ``cluster``,
        ``runs_per_job`` and ``threads``: ``partition``, ``time_min`` (default: the
        partition's limit; the local executor's: 7 days), ``mem_gb``, ``cpus_per_job``,
        ``gpus_per_job``.
    :param runs_per_job: ``"submitit"``: the most runs one job (one task of the job
        array) trains (:func:`~avalanche_gss.reproduce.runs.slurm.share_out`).
    :param check: ``check(config, result)`` raises ``ValueError``, ``TypeError`` or
        ``KeyError`` for a stored result that lacks what the caller reads: that job runs
        again, with a warning naming its file (:meth:`ResultCache.get`).
    :param threads: torch threads of each job run in a worker process or a submitit job
        (``None``: :func:`worker_threads` in worker processes, the cluster's default in
        submitit jobs). Jobs run in this process (``workers=1``) use this process's
        setting: ``run_sweep`` never changes it.
    :return: ``fn``'s result for each job, in the order of ``jobs``.
    :raises SweepError: if some jobs failed (rerunning retries only them).
    :raises SweepInterrupted: on ``KeyboardInterrupt`` (``Ctrl-C``), after stopping the
        jobs; it says how many jobs have a stored result.
    :raises ValueError: two different jobs have the same ``label`` (before any job runs).
    :raises OSError: ``cache_dir`` cannot be created (before any job runs).
    """
    workers = _checked_options(fn, launcher, workers, threads, runs_per_job)
    cache = ResultCache(cache_dir)
    keys, unique, results = _plan(jobs, cache, launcher, check)
    failures: list[tuple[JsonObject, BaseException]] = []
    _launch(unique, results, failures, fn, cache, launcher=launcher, progress=progress,
            workers=workers, cluster=cluster, submitit_params=submitit_params,
            threads=threads, runs_per_job=runs_per_job)
    if failures:
        raise SweepError(failures)
    return [results[key] for key in keys]


def _plan(jobs: Sequence[Mapping[str, Json]], cache: ResultCache, launcher: Launcher,
          check: ResultCheck | None = None
          ) -> tuple[list[str], dict[str, JsonObject], dict[str, JsonObject]]:
    """Each job's cache key, the distinct jobs by key, and the stored results by key.

    :raises ValueError: two different jobs have the same ``label``.
    """
    configs = [json.loads(canonical_json(job)) for job in jobs]
    keys = [config_key(cfg) for cfg in configs]
    unique = dict(zip(keys, configs, strict=True))
    _check_labels(unique)
    results: dict[str, JsonObject] = {}
    for key, cfg in unique.items():
        stored = cache.get(cfg, check)
        if stored is not None:
            results[key] = stored
    logger.info("sweep: %d jobs, %d already done, %d to run (%s)",
                len(unique), len(results), len(unique) - len(results), launcher)
    return keys, unique, results


def _checked_options(fn: JobFn, launcher: Launcher, workers: int, threads: int | None,
                     runs_per_job: int) -> int:
    """Refuse bad :func:`run_sweep` options; return ``workers``, capped at the CPUs.

    Called by :func:`run_sweep` only: its warning points at ``run_sweep``'s caller.
    """
    if launcher not in ("local", "submitit"):
        raise ValueError(f"launcher must be 'local' or 'submitit', got {launcher!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    if isinstance(runs_per_job, bool) or not isinstance(runs_per_job, int) or runs_per_job < 1:
        raise ValueError(f"runs_per_job must be a positive int, got {runs_per_job!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    if workers > 1 and launcher == "local":
        cpus = available_cpus()
        if workers > cpus:
            warnings.warn(f"workers={workers} capped at the {cpus} CPU(s) available to this "
                          "process", stacklevel=3)
            workers = cpus
    if workers > 1 or launcher == "submitit":
        try:
            pickle.dumps(fn)
        except (pickle.PicklingError, AttributeError, TypeError) as err:
            raise TypeError(f"fn must be a picklable module-level callable: {err}") from err
    if workers > 1 and launcher == "local" and _unimportable(fn):
        where = getattr(_main_spec(), "name", "__main__")
        raise TypeError(f"fn {getattr(fn, '__qualname__', fn)!r} is defined in {where}, which "
                        "spawned worker processes cannot import; define it in an importable "
                        "module")
    return workers


def _launch(unique: dict[str, JsonObject], results: dict[str, JsonObject],
            failures: list[tuple[JsonObject, BaseException]], fn: JobFn, cache: ResultCache, *,
            launcher: Launcher, progress: bool, workers: int, cluster: str | None,
            submitit_params: JobOptions | None, threads: int | None,
            runs_per_job: int) -> None:
    """Run the jobs without a result where :func:`run_sweep` was told to, behind a bar.

    :param unique: every job of the sweep, by cache key.
    :param results: the stored results, by cache key; each finished job's goes there.
    :param failures: where each failed job's config and exception go.
    :raises SweepInterrupted: on ``KeyboardInterrupt``, after the runner stopped its jobs.
    """
    todo = {key: cfg for key, cfg in unique.items() if key not in results}
    bar = tqdm(total=len(unique), initial=len(results), disable=not progress,
               file=sys.stderr, desc="sweep", unit="job", dynamic_ncols=True)
    jobs = _Jobs(todo, results, failures, bar)
    try:
        with _remember_interrupts(jobs):
            if jobs.todo and launcher == "submitit":
                _run_submitit(jobs, fn, cache, cluster, submitit_params, threads,
                              runs_per_job)
            elif jobs.todo and workers > 1:
                _run_pool(jobs, fn, cache, workers, threads)
            else:
                _run_here(jobs, fn, cache)
            jobs.check()  # a Ctrl-C swallowed during the last job
    except KeyboardInterrupt as err:
        bar.leave = False  # cleared, not drawn again: the caller says what was kept
        if isinstance(err, SweepInterrupted):  # pragma: no cover - a job's own sweep
            raise
        cached = sum(cache.path(cfg).exists() for cfg in unique.values())
        raise SweepInterrupted(cached, len(unique), os.fspath(cache.dir)) from None
    finally:
        bar.close()


def _check_labels(unique: Mapping[str, Mapping[str, Json]]) -> None:
    """Refuse two different jobs (by cache key) that carry the same ``label``."""
    seen: dict[str, str] = {}
    for key, cfg in unique.items():
        label = job_name(cfg)
        if label is None:
            continue
        if label in seen:
            raise ValueError(f"two different jobs share the label {label!r} (keys "
                             f"{seen[label][:12]} and {key[:12]}): a label must name one job")
        seen[label] = key


def _main_spec() -> ModuleSpec | None:
    spec: ModuleSpec | None = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec


def _unimportable(fn: JobFn) -> bool:
    """Whether a spawned process cannot find ``fn``.

    That is when it lives in ``__main__`` and the main module is a package's ``__main__``
    or has no file: spawned processes do not import those again.
    """
    if getattr(fn, "__module__", None) != "__main__":
        return False
    main = sys.modules.get("__main__")
    spec = _main_spec()
    return (getattr(main, "__file__", None) is None
            or (spec is not None and spec.name.endswith(".__main__")))


class _Jobs:
    """The jobs a runner runs, and where it puts what each gave.

    :param todo: the jobs to run, by cache key.
    :param results: where each finished job's result goes, by cache key.
    :param failures: where each failed job's config and exception go.
    :param bar: the progress bar, advanced once per job.
    """

    def __init__(
        self,
        todo: dict[str, JsonObject],
        results: dict[str, JsonObject],
        failures: list[tuple[JsonObject, BaseException]],
        bar: tqdm,
    ) -> None:
        self.todo = todo
        self.results = results
        self.failures = failures
        self.bar = bar
        self.interrupted = False  # set by a Ctrl-C, even one a gc callback swallowed

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a Ctrl-C came during the sweep.

        Python raises ``KeyboardInterrupt`` wherever the main thread is when ``SIGINT``
        arrives; inside a garbage-collector callback or a ``__del__`` it is printed and
        dropped. The sweep's handler also sets :attr:`interrupted`, read here between
        jobs, so such a Ctrl-C still stops the sweep before its next job.
        """
        if self.interrupted:
            raise KeyboardInterrupt

    def collect(self, key: str, result: Callable[[], tuple[JsonObject, str | None]], *,
                traceback: bool = False) -> None:
        """Store the result of job ``key``, or log and keep its failure; advance the bar.

        A result that could not be cached is kept, with an :class:`UncachedResultWarning`.

        :param key: the job's cache key.
        :param result: returns what :func:`_execute` returns, or raises the job's error.
        :param traceback: log the error with its traceback (it was raised in this
            process), not only its repr.
        """
        self.check()
        cfg = self.todo[key]
        name = job_name(cfg) or cfg
        try:
            self.results[key], uncached = result()
        except Exception as err:  # reported together in SweepError
            if getattr(err, "reported", False):
                pass  # logged already, in one line with the other runs it took down
            elif traceback:
                logger.exception("job %s failed", name)
            else:
                logger.error("job %s failed: %r", name, err)
            self.failures.append((cfg, err))
        else:
            if uncached is not None:
                warnings.warn(uncached, UncachedResultWarning, stacklevel=2)
        self.bar.update()


@contextlib.contextmanager
def _remember_interrupts(jobs: _Jobs) -> Iterator[None]:
    """While the sweep runs, a Ctrl-C also sets ``jobs.interrupted`` (:meth:`_Jobs.check`).

    Only where Python's own handler is in place, in the main thread; the handler before
    is restored after. A handler of the caller's own is left alone.

    A Ctrl-C that lands in a garbage-collector callback or a ``__del__`` (JAX, which a
    solver imports, runs one at every full collection) cannot stop the code it interrupts:
    Python hands its ``KeyboardInterrupt`` to ``sys.unraisablehook``, whose default prints
    it with a traceback. The sweep stops at its next job instead (:meth:`_Jobs.check`), so
    while the handler is in place that one exception is not printed; every other one
    goes to the hook as before, which is restored after.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        jobs.interrupted = True
        raise KeyboardInterrupt

    hook = sys.unraisablehook

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        if not (jobs.interrupted and info.exc_type is KeyboardInterrupt):
            hook(info)

    signal.signal(signal.SIGINT, interrupt)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = hook


def _run_here(jobs: _Jobs, fn: JobFn, cache: ResultCache) -> None:
    """Run the jobs one after the other in this process."""
    for key, cfg in jobs.todo.items():
        jobs.collect(key, partial(_execute, fn, cfg, str(cache.dir)), traceback=True)


def _run_pool(jobs: _Jobs, fn: JobFn, cache: ResultCache, workers: int,
              threads: int | None = None) -> None:
    """Run the jobs in ``workers`` spawned processes.

    Stopped early (``Ctrl-C``, an error), it cancels the jobs not started, sets the stop
    event that makes every worker exit at once (ending the jobs they run) and none start
    another, and waits for the workers to be gone.
    """
    threads = threads or worker_threads(workers)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()  # also starts the resource tracker, before _deaf_children
    pool = cf.ProcessPoolExecutor(
        max_workers=min(workers, max(1, len(jobs.todo))),
        mp_context=context,
        initializer=_init_worker,
        initargs=(threads, os.getpid(), stop),
    )
    try:
        with _deaf_children():  # the pool starts its workers as jobs are submitted
            futures = {
                pool.submit(_execute, fn, cfg, str(cache.dir), threads): key
                for key, cfg in jobs.todo.items()
            }
        for future in cf.as_completed(futures):
            jobs.collect(futures[future], future.result)
    except BaseException:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()


def _run_submitit(jobs: _Jobs, fn: JobFn, cache: ResultCache, cluster: str | None,
                  params: JobOptions | None, threads: int | None = None,
                  runs_per_job: int = 1) -> None:
    """Send the jobs to submitit's ``AutoExecutor``, packed, as one job array; wait for them.

    :func:`~avalanche_gss.reproduce.runs.slurm.run_on_cluster` (how runs are packed and
    lost jobs reported).
    """
    from avalanche_gss.reproduce.runs.slurm import ClusterOptions, JobOptions, run_on_cluster

    options = ClusterOptions(cluster=cluster, runs_per_job=runs_per_job, threads=threads,
                             **(params or JobOptions()))
    labels = {key: name for key, cfg in jobs.todo.items() if (name := job_name(cfg))}

    def collect(key: str, result: Callable[[], tuple[Mapping[str, Json], str | None]]) -> None:
        def as_dict() -> tuple[JsonObject, str | None]:
            value, uncached = result()
            return dict(value), uncached

        jobs.collect(key, as_dict)

    run_on_cluster(jobs.todo, partial(_execute, fn, cache_dir=str(cache.dir), threads=threads),
                   cache.dir, options, collect, labels)
