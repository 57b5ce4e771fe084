"""Resumable sweeps: one cached result per finished job, survives SIGKILL, reruns the rest."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import importable_module

from avalanche_gss.reproduce.runs.sweep import (
    ResultCache,
    SweepError,
    config_key,
    run_sweep,
    worker_threads,
)

JOB_MODULE = '''
import json
import os
import time


def record(config):
    """Log the start of the job, sleep, and return something computed from the config.

    A job from number ``free`` on waits, after its start is logged, until the file
    ``gate`` exists: it is provably running until the test opens the gate.
    """
    with open(config["log"], "a") as f:
        f.write(json.dumps({"i": config["i"], "pid": os.getpid()}) + "\\n")
    time.sleep(config.get("sleep", 0.0))
    if "gate" in config and config["i"] >= config["free"]:
        while not os.path.exists(config["gate"]):
            time.sleep(0.01)
    if config.get("fail"):
        raise RuntimeError("asked to fail")
    return {"i": config["i"], "square": config["i"] ** 2, "pid": os.getpid(),
            "threads": os.environ.get("OMP_NUM_THREADS")}


def not_a_dict(config):
    return [config["i"]]
'''

DRIVER = """
import json
import sys

import sweep_jobs
from avalanche_gss.reproduce.runs.sweep import run_sweep

if __name__ == "__main__":  # spawned workers import this file again
    jobs = json.loads(sys.argv[1])
    run_sweep(jobs, sweep_jobs.record, cache_dir=sys.argv[2], workers=int(sys.argv[3]),
              progress=False)
"""


INTERRUPTED_DRIVER = """
import json
import sys

import sweep_jobs
from avalanche_gss.reproduce.runs.sweep import run_sweep

if __name__ == "__main__":
    try:
        run_sweep(json.loads(sys.argv[1]), sweep_jobs.record, cache_dir=sys.argv[2],
                  workers=int(sys.argv[3]), progress=False)
    except KeyboardInterrupt as err:  # SweepInterrupted: what the sweep kept
        print(json.dumps({"cached": getattr(err, "cached", None),
                          "total": getattr(err, "total", None)}))
        sys.exit(130)
"""


@pytest.fixture
def jobs_module(tmp_path, monkeypatch):
    """An importable module of job functions (for spawned workers and submitit jobs too)."""
    return importable_module(tmp_path, monkeypatch, "sweep_jobs", JOB_MODULE)


def make_jobs(tmp_path, n, sleep=0.0, **extra):
    log = str(tmp_path / "starts.log")
    return [{"i": i, "log": log, "sleep": sleep, **extra} for i in range(n)]


def starts(tmp_path):
    path = tmp_path / "starts.log"
    if not path.exists():
        return Counter()
    return Counter(json.loads(line)["i"] for line in path.read_text().splitlines())


def stored(cache_dir):
    """Indices of the jobs with a result file (every file must be whole JSON)."""
    done = set()
    for path in cache_dir.glob("*.json"):
        if not path.name.startswith(".tmp-"):
            done.add(json.loads(path.read_text())["result"]["i"])
    return done


def make_gated_jobs(tmp_path, n, free):
    """``n`` jobs of which the first ``free`` finish at once and the others wait, once
    started, for the gate (``tmp_path / "gate"``) to open: while it is closed, a sweep of
    them can neither end nor store more than ``free`` results, however slow the machine."""
    return make_jobs(tmp_path, n, gate=str(tmp_path / "gate"), free=free)


def wait_for_a_blocked_job(tmp_path, proc, free):
    """Return once ``free`` results are stored and a later job has started (it then waits
    at the gate): the loop ends on those events, or fails if the sweep's process ended."""
    cache = tmp_path / "cache"
    while not (cache.exists() and len(stored(cache)) >= free
               and any(i >= free for i in starts(tmp_path))):
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_halfway_then_rerun_skips_every_finished_job(tmp_path, jobs_module, workers):
    # Given a sweep of 6 jobs running in its own process group, of which jobs 2 to 5 wait,
    # once started, for a gate the test opens only after the kill
    jobs = make_gated_jobs(tmp_path, 6, free=2)
    cache = tmp_path / "cache"
    (tmp_path / "driver.py").write_text(DRIVER)
    cmd = [sys.executable, str(tmp_path / "driver.py"), json.dumps(jobs), str(cache), str(workers)]
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.PIPE, text=True)
    # When it is killed with SIGKILL (with its workers) once two results exist and a
    # third job runs
    try:
        wait_for_a_blocked_job(tmp_path, proc, free=2)
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already: the loop failed
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    finished = stored(cache)  # results written before the kill (all processes are dead)
    assert finished == {0, 1}
    before = starts(tmp_path)
    assert all(before[i] == 1 for i in finished)
    # And the same sweep is started again, the gate open
    (tmp_path / "gate").touch()
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    # Then no job finished before the kill started again, and every job has a result
    after = starts(tmp_path)
    assert all(after[i] == 1 for i in finished), (finished, after)
    assert all(after[i] >= 1 for i in range(6))
    assert stored(cache) == set(range(6))
    # And a third run, in process, starts nothing and returns every result in job order
    results = run_sweep(jobs, jobs_module.record, cache_dir=cache, progress=False)
    assert [r["square"] for r in results] == [i * i for i in range(6)]
    assert starts(tmp_path) == after


def test_results_are_cached_by_config_and_returned_in_order(tmp_path, jobs_module):
    jobs = make_jobs(tmp_path, 4)
    cache = tmp_path / "cache"
    # Duplicates (also with another key order) run once
    dup = dict(reversed(list(jobs[1].items())))
    results = run_sweep([*jobs, dup], jobs_module.record, cache_dir=cache, progress=False)
    assert [r["i"] for r in results] == [0, 1, 2, 3, 1]
    assert starts(tmp_path) == Counter({0: 1, 1: 1, 2: 1, 3: 1})
    assert results[0]["pid"] == os.getpid()  # workers=1 runs in this process
    # One file per job, named by the config's hash, holding the config and the result
    files = sorted(p.name for p in cache.glob("*.json"))
    assert files == sorted(f"{config_key(j)}.json" for j in jobs)
    record = json.loads((cache / f"{config_key(jobs[2])}.json").read_text())
    assert record["config"] == jobs[2] and record["result"]["square"] == 4
    assert record["seconds"] >= 0
    # A new job joins: only it runs
    more = [*jobs, {**jobs[0], "i": 9}]
    results = run_sweep(more, jobs_module.record, cache_dir=cache, progress=False)
    assert results[-1]["square"] == 81
    assert starts(tmp_path) == Counter({0: 1, 1: 1, 2: 1, 3: 1, 9: 1})


def test_parallel_workers_are_spawned_processes_with_limited_threads(tmp_path, jobs_module):
    jobs = make_jobs(tmp_path, 4, sleep=0.2)
    results = run_sweep(
        jobs, jobs_module.record, cache_dir=tmp_path / "c", workers=2, progress=False
    )
    assert [r["i"] for r in results] == [0, 1, 2, 3]
    pids = {r["pid"] for r in results}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert {r["threads"] for r in results} == {str(worker_threads(2))}
    assert worker_threads(2) == max(1, len(os.sched_getaffinity(0)) // 2)


def test_failures_are_collected_and_only_they_rerun(tmp_path, jobs_module):
    jobs = make_jobs(tmp_path, 4)
    jobs[2]["fail"] = True
    cache = tmp_path / "cache"
    with pytest.raises(SweepError, match="1 job") as info:
        run_sweep(jobs, jobs_module.record, cache_dir=cache, progress=False)
    assert info.value.failures[0][0]["i"] == 2
    assert stored(cache) == {0, 1, 3}
    with pytest.raises(SweepError):
        run_sweep(jobs, jobs_module.record, cache_dir=cache, progress=False)
    assert starts(tmp_path) == Counter({0: 1, 1: 1, 2: 2, 3: 1})
    with pytest.raises(SweepError, match="not a dict"):
        run_sweep(jobs[:1], jobs_module.not_a_dict, cache_dir=tmp_path / "other", progress=False)


def _alive(pid):
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()  # Z: exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_stops_the_sweep_and_no_job_starts_after_it(tmp_path, jobs_module, workers):
    # Given a sweep of 8 jobs in its own process group, as a terminal runs it, of which
    # jobs 1 to 7 wait, once started, for a gate that stays closed until the sweep ended
    jobs = make_gated_jobs(tmp_path, 8, free=1)
    cache = tmp_path / "cache"
    (tmp_path / "driver.py").write_text(INTERRUPTED_DRIVER)
    cmd = [sys.executable, str(tmp_path / "driver.py"), json.dumps(jobs), str(cache),
           str(workers)]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # When Ctrl-C reaches the group (the sweep's process and its workers) once a
        # result is stored and another job runs (it cannot end before the signal)
        wait_for_a_blocked_job(tmp_path, proc, free=1)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=600)
    finally:
        (tmp_path / "gate").touch()  # a job left running ends (the test failed)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    # Then the sweep says how many results are stored, and nothing else is said
    assert proc.returncode == 130, err
    assert err == ""
    finished = stored(cache)
    assert finished == {0}
    assert json.loads(out) == {"cached": 1, "total": 8}
    # and every job that started either finished or was running at the signal (one per
    # worker): none started after it, the queued ones did not run
    started = starts(tmp_path)
    assert set(finished) <= set(started) and len(started) <= len(finished) + workers
    # and its workers are gone with it (nothing more can start or be stored)
    lines = (tmp_path / "starts.log").read_text().splitlines()
    pids = {json.loads(line)["pid"] for line in lines}
    assert not [pid for pid in pids if _alive(pid)]


@pytest.mark.parametrize("launcher", ["here", "pool", "submitit"])
def test_every_launcher_collects_failures_and_logs_them(tmp_path, jobs_module, caplog,
                                                         launcher):
    jobs = make_jobs(tmp_path, 3)
    jobs[1]["fail"] = True
    options = {"here": {}, "pool": {"workers": 2},
               "submitit": {"launcher": "submitit", "cluster": "local"}}[launcher]
    with caplog.at_level("ERROR", logger="avalanche_gss.reproduce.runs.sweep"), \
            pytest.raises(SweepError, match="1 job") as info:
        run_sweep(jobs, jobs_module.record, cache_dir=tmp_path / "cache", progress=False,
                  **options)
    assert [cfg["i"] for cfg, _ in info.value.failures] == [1]
    assert "asked to fail" in str(info.value.failures[0][1])
    assert stored(tmp_path / "cache") == {0, 2}
    failed = [r for r in caplog.records if r.getMessage().startswith("job ")]
    assert len(failed) == 1 and "'i': 1" in failed[0].getMessage()
    # Only a job that failed in this process is logged with its traceback
    assert (failed[0].exc_info is not None) == (launcher == "here")


def test_invalid_arguments(tmp_path, jobs_module):
    with pytest.raises(TypeError, match="JSON"):
        run_sweep([{"x": object()}], jobs_module.record, cache_dir=tmp_path)
    with pytest.raises(TypeError, match="picklable"):
        run_sweep([{"i": 0}], lambda c: c, cache_dir=tmp_path, workers=2)
    with pytest.raises(ValueError, match="launcher"):
        run_sweep([], jobs_module.record, cache_dir=tmp_path, launcher="slurm")
    with pytest.raises(ValueError, match="workers"):
        run_sweep([], jobs_module.record, cache_dir=tmp_path, workers=0)
    assert config_key({"a": 1, "b": [1, 2]}) == config_key({"b": [1, 2], "a": 1})
    assert config_key({"a": 1}) != config_key({"a": 1.0})


def test_cache_ignores_foreign_and_broken_files(tmp_path):
    cache = ResultCache(tmp_path)
    cfg = {"method": "Reservoir", "seed": 0}
    assert cache.get(cfg) is None
    cache.put(cfg, {"avg": 80.0}, 1.0)
    assert cache.get(cfg) == {"avg": 80.0}
    cache.path(cfg).write_text('{"config": {"other": 1}, "result": {}}')
    with pytest.warns(UserWarning, match="another config"):
        assert cache.get(cfg) is None
    cache.path(cfg).write_text('{"config": ')
    with pytest.warns(UserWarning, match="unreadable"):
        assert cache.get(cfg) is None
    assert not list(tmp_path.glob(".tmp-*"))


@pytest.mark.parametrize("cluster", ["debug", "local"])
def test_submitit_launcher(tmp_path, jobs_module, cluster):
    import submitit  # noqa: F401  (declared in the cluster extra that make installs)
    jobs = make_jobs(tmp_path, 3)
    cache = tmp_path / "cache"

    def sweep():
        return run_sweep(jobs, jobs_module.record, cache_dir=cache, launcher="submitit",
                         cluster=cluster, progress=False)

    results = sweep()
    assert [r["square"] for r in results] == [0, 1, 4]
    assert stored(cache) == {0, 1, 2}  # written by the jobs themselves
    if cluster == "local":  # separate processes, launched by submitit
        assert os.getpid() not in {r["pid"] for r in results}
    # Rerun: everything cached, nothing submitted
    again = sweep()
    assert again == results
    assert starts(tmp_path) == Counter({0: 1, 1: 1, 2: 1})


def test_progress_bar_goes_to_stderr(tmp_path, jobs_module, capsys):
    run_sweep(make_jobs(tmp_path, 2), jobs_module.record, cache_dir=tmp_path / "c", progress=True)
    out, err = capsys.readouterr()
    assert out == "" and "2/2" in err


def test_a_runs_label_names_it_and_is_no_part_of_its_key(tmp_path, jobs_module):
    # A label names a run in log and failure lines; renaming a run must not train it again
    (job,) = make_jobs(tmp_path, 1)
    assert config_key({**job, "label": "x"}) == config_key({**job, "label": "y"}) == config_key(job)
    cache = tmp_path / "cache"
    first = run_sweep([{**job, "label": "first"}], jobs_module.record, cache_dir=cache,
                      progress=False)
    again = run_sweep([{**job, "label": "renamed"}], jobs_module.record, cache_dir=cache,
                      progress=False)
    assert again == first and starts(tmp_path) == Counter({0: 1})
    (entry,) = cache.glob("*.json")
    assert "label" not in json.loads(entry.read_text())["config"]


def _swallows_a_ctrl_c(config):
    """A job during which Ctrl-C lands where Python drops it (a gc callback, a __del__)."""
    if config["i"] == 0:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            while True:  # until the handler runs, here (however late the signal comes)
                time.sleep(0.01)
        except KeyboardInterrupt:
            pass  # dropped, as Python drops it inside a gc callback
    return {"i": config["i"]}


def _interrupted_sweep(tmp_path, job):
    """Run 3 jobs of ``job`` under Python's own SIGINT handler (as in a terminal), which
    must end in ``SweepInterrupted``; return it and the handler that was in place before."""
    from avalanche_gss.reproduce.runs.sweep import SweepInterrupted

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SweepInterrupted) as caught:
            run_sweep([{"i": i} for i in range(3)], job, cache_dir=tmp_path / "cache",
                      progress=False)
    finally:
        signal.signal(signal.SIGINT, before)
    return caught.value, before


def test_a_ctrl_c_that_a_job_swallowed_still_stops_the_sweep(tmp_path, monkeypatch):
    interrupted, before = _interrupted_sweep(tmp_path, _swallows_a_ctrl_c)
    assert (interrupted.cached, interrupted.total) == (1, 3)  # job 0 kept, none after
    assert signal.getsignal(signal.SIGINT) is before  # the sweep put its handler back


class _Broken:
    def __del__(self):
        raise ValueError("from __del__")


def _ctrl_c_in_a_gc_callback(config):
    """A job during which Ctrl-C arrives while a garbage-collector callback runs (as JAX's
    does at every full collection): Python hands the callback's KeyboardInterrupt to
    ``sys.unraisablehook`` and the job goes on. Before that, a ``__del__`` raises another
    exception, which Python hands to the same hook."""
    if config["i"] == 0:
        import gc

        _Broken()

        def callback(phase, info):
            if phase == "start":
                gc.callbacks.remove(callback)
                os.kill(os.getpid(), signal.SIGINT)
                while True:  # until the handler runs, here, inside the callback
                    time.sleep(0.01)

        gc.callbacks.append(callback)
        gc.collect()
    return {"i": config["i"]}


def test_a_ctrl_c_in_a_gc_callback_stops_the_sweep_and_prints_no_traceback(tmp_path,
                                                                          monkeypatch):
    unraisable = []  # what reaches the hook in place before the sweep
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    interrupted, _ = _interrupted_sweep(tmp_path, _ctrl_c_in_a_gc_callback)
    assert (interrupted.cached, interrupted.total) == (1, 3)  # job 0 kept, none after
    # the Ctrl-C did not reach the hook (the default one prints it with a traceback); the
    # other exception did, and the sweep put the hook back
    assert [u.exc_type for u in unraisable] == [ValueError]
    assert sys.unraisablehook == unraisable.append
