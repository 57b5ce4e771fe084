"""Sweeps that cannot lie or linger: checksummed cache entries, workers that die with their
parent, a capped worker count, readable files and no leftover temporaries."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from helpers import importable_module
from helpers.cli import cli, toy_npz
from helpers.fifo import fifo

from avalanche_gss.reproduce.runs.cache import _checksum, canonical_json, result_config
from avalanche_gss.reproduce.runs.sweep import ResultCache, available_cpus, run_sweep

JOB_MODULE = '''
import os
import time


def slow(config):
    """Log this worker's pid, then wait until the file ``gate`` exists."""
    with open(config["log"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    while not os.path.exists(config["gate"]):
        time.sleep(0.01)
    return {"i": config["i"]}


def echo(config):
    return {"i": config["i"], "pid": os.getpid()}
'''

DRIVER = """
import json
import sys

import safety_jobs
from avalanche_gss.reproduce.runs.sweep import run_sweep

if __name__ == "__main__":
    run_sweep(json.loads(sys.argv[1]), safety_jobs.slow, cache_dir=sys.argv[2], workers=2,
              progress=False)
"""


@pytest.fixture
def jobs_module(tmp_path, monkeypatch):
    return importable_module(tmp_path, monkeypatch, "safety_jobs", JOB_MODULE)


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited


@pytest.mark.skipif(available_cpus() < 2, reason="needs two CPUs for two workers")
def test_workers_exit_when_the_sweep_process_is_killed(tmp_path, jobs_module):
    log = tmp_path / "pids.log"
    gate = tmp_path / "gate"  # opened after the checks: until then no job can end
    jobs = [{"i": i, "gate": str(gate), "log": str(log)} for i in range(40)]
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), json.dumps(jobs),
                             str(tmp_path / "cache")], stderr=subprocess.DEVNULL)
    try:
        # both workers run a job (the loop ends on that, or fails if the sweep ended)
        while not log.exists() or len(set(log.read_text().split())) < 2:
            assert proc.poll() is None
            time.sleep(0.1)
        workers = {int(p) for p in log.read_text().split()}
        proc.send_signal(signal.SIGKILL)  # the parent only, not its process group
        proc.wait()
        # a generous bound, for a loaded machine: a worker notices within a second
        deadline = time.monotonic() + 600
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [p for p in workers if _alive(p)]
        for p in alive:  # clean up before failing
            os.kill(p, signal.SIGKILL)
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not alive, "workers outlived their parent"
    done = len(list((tmp_path / "cache").glob("*.json")))
    assert done == 0  # they did not finish the queue either, nor their own jobs


def test_workers_are_capped_at_the_cpus_available(tmp_path, jobs_module):
    jobs = [{"i": i} for i in range(4)]
    too_many = available_cpus() + 3
    with pytest.warns(UserWarning, match=f"workers={too_many} capped at the "
                                         f"{available_cpus()} CPU"):
        results = run_sweep(jobs, jobs_module.echo, cache_dir=tmp_path, workers=too_many,
                            progress=False)
    assert len({r["pid"] for r in results}) <= available_cpus()


def test_a_job_function_in_a_package_main_is_refused_up_front(tmp_path, monkeypatch):
    import types

    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="avalanche_gss.reproduce.__main__")
    main.__file__ = "/x/avalanche_gss/reproduce/__main__.py"
    monkeypatch.setitem(sys.modules, "__main__", main)

    def job(config):
        return config

    job.__module__ = "__main__"
    main.job = job
    job.__qualname__ = "job"
    with pytest.raises(TypeError, match="avalanche_gss.reproduce.__main__, which spawned worker"):
        run_sweep([{"i": 0}], job, cache_dir=tmp_path, workers=2, progress=False)


def test_an_altered_cache_entry_is_recomputed_with_a_warning_naming_it(tmp_path):
    cache = ResultCache(tmp_path)
    cfg = {"method": "Reservoir", "seed": 0}
    cache.put(cfg, {"avg": 85.6, "task_accuracy": [85.6]}, 1.0)
    path = cache.path(cfg)
    assert path.stat().st_mode & 0o044 == 0o044  # readable like any file open() writes
    text = path.read_text()
    path.write_text(text.replace("85.6", "81.6", 1))  # one flipped digit
    with pytest.warns(UserWarning, match=f"{path.name}.*checksum"):
        assert cache.get(cfg) is None
    path.write_text("[1, 2, 3]")  # valid JSON of the wrong shape
    with pytest.warns(UserWarning, match=f"{path.name}.*not a result entry"):
        assert cache.get(cfg) is None


def test_every_single_byte_flip_of_a_cache_entry_is_refused_or_harmless(tmp_path):
    cache = ResultCache(tmp_path)
    cfg = {"experiment": "table1", "settings": {"method": "GSS-Greedy", "seed": 1}}
    result = {"avg": 85.6, "task_accuracy": [97.5, 80.25, 79.0], "extras": {"c": [1, 2]}}
    cache.put(cfg, result, 1.0)
    path = cache.path(cfg)
    original = path.read_bytes()
    outcomes = {"refused": 0, "identical": 0}
    for i in range(len(original)):
        for flip in (0x01, 0x20):
            data = bytearray(original)
            data[i] ^= flip
            path.write_bytes(bytes(data))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = cache.get(cfg)
            if got is None:
                assert caught, f"byte {i}: refused without a warning"
                outcomes["refused"] += 1
            else:
                assert got == result, f"byte {i} ^ {flip:#x} loaded another result: {got}"
                outcomes["identical"] += 1
    assert outcomes["refused"] > len(original)  # most flips are caught, none slip through


def test_leftover_temporaries_are_removed_when_old(tmp_path):
    old = tmp_path / ".tmp-abc.json"
    old.write_text("partial")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    fresh = tmp_path / ".tmp-def.json"  # perhaps another process is writing it now
    fresh.write_text("partial")
    ResultCache(tmp_path)
    assert not old.exists() and fresh.exists()


# --- what is at a cache entry's path is never trusted, nor written through ---------------

def _swept(jobs, fn, cache_dir, **kwargs):
    """Run the sweep; its results, and the messages of its warnings, in order."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = run_sweep(jobs, fn, cache_dir=cache_dir, progress=False, **kwargs)
    return results, [str(w.message) for w in caught]


def test_a_cache_entry_that_is_a_symlink_is_neither_read_nor_written_through(tmp_path,
                                                                           jobs_module):
    # Given a shared cache where one entry is a link to someone's file, another a dangling
    # link (whose target a write through it would create)
    cache = ResultCache(tmp_path / "cache")
    jobs = [{"i": 1}, {"i": 2}]
    precious = tmp_path / "precious.txt"
    precious.write_text("someone's file\n")
    created = tmp_path / "created.txt"
    cache.path(jobs[0]).symlink_to(precious)
    cache.path(jobs[1]).symlink_to(created)
    # When the sweep runs
    results, messages = _swept(jobs, jobs_module.echo, cache.dir)
    # Then both jobs ran, nothing was written through either link, and the links are left
    assert [r["i"] for r in results] == [1, 2]
    assert precious.read_text() == "someone's file\n" and not created.exists()
    assert all(cache.path(job).is_symlink() for job in jobs)
    # And each link is one warning when read, one refusal when the result would be stored
    for job in jobs:
        entry = str(cache.path(job))
        read = [m for m in messages if m.startswith(f"ignoring {entry} ")]
        assert len(read) == 1 and "is a symbolic link" in read[0], messages
        refused = [m for m in messages if f"refusing to write {entry}: it is a symbolic link"
                   in m]
        assert len(refused) == 1, messages
    assert all("\n" not in m for m in messages)


def _nested(path):
    depth = 200_000
    path.write_text('{"config": ' + "[" * depth + "]" * depth + ', "result": {}}')


def _sparse(path):
    path.touch()
    os.truncate(path, 40 * 2**30)  # 40 GiB that take no disk


@pytest.mark.parametrize("make, said", [
    (_nested, "nested too deeply"),
    (_sparse, "holds 40.0 GiB"),
    (lambda path: path.mkdir(), "is a folder, not a regular file"),
    ("fifo", "is a FIFO (named pipe), not a regular file"),
])
def test_a_malformed_cache_entry_is_recomputed_with_a_warning_naming_it(tmp_path, jobs_module,
                                                                       make, said):
    cache = ResultCache(tmp_path / "cache")
    job = {"i": 3}
    entry = cache.path(job)
    with contextlib.ExitStack() as stack:
        if make == "fifo":  # a reader that blocks on it is freed (and fails) after a bound
            stack.enter_context(fifo(entry))
        else:
            make(entry)
        results, messages = _swept([job], jobs_module.echo, cache.dir)
    assert [r["i"] for r in results] == [3]  # recomputed: no traceback, hang or MemoryError
    ignored = [m for m in messages if m.startswith(f"ignoring {entry} (it will be recomputed)")]
    assert len(ignored) == 1 and said in ignored[0] and "\n" not in ignored[0], messages
    if not entry.is_dir():  # the new result took the malformed entry's place
        assert cache.get(job)["i"] == 3


def _recorded(cache, config, result):
    """Write ``result`` as the entry of ``config``, its checksum recomputed to match."""
    canonical = json.loads(canonical_json(result_config(config)))
    cache.path(config).write_text(json.dumps({
        "config": canonical, "result": result, "checksum": _checksum(canonical, result)}))


RUN_RECORD = {"settings": {"method": "Reservoir", "seed": 0}, "task_accuracy": [90.0, 80.0],
              "avg": 85.0, "train_seconds": 1.5, "extras": {"skipped_steps": 0}}


@pytest.mark.parametrize("result, said", [
    ({"i": 7}, "'task_accuracy' is missing"),
    ({**RUN_RECORD, "task_accuracy": "high"}, "'task_accuracy' is not a list of numbers"),
    ({**RUN_RECORD, "avg": None}, "'avg' is not a number"),
    ({**RUN_RECORD, "extras": []}, "'extras' is not an object"),
    ({**RUN_RECORD, "extras": {"skipped_steps": "many"}}, "'skipped_steps' is not a number"),
])
def test_a_result_of_another_shape_with_a_matching_checksum_is_recomputed(tmp_path, result,
                                                                          said):
    from avalanche_gss.reproduce.runs.planning import check_run_record

    # Given an entry whose checksum matches, written by hand, of a shape no run returns
    cache = ResultCache(tmp_path)
    config = {"experiment": "table1", "seed": 0}
    _recorded(cache, config, result)
    assert cache.get(config) == result  # the checksum alone believes it
    # When the experiment's check reads it, Then it is a warning naming it, and a rerun
    with pytest.warns(UserWarning, match=rf"ignoring {cache.path(config)} \(it will be "
                                         rf"recomputed\): its result is not one this job "
                                         rf"returns \(.*{re.escape(said)}"):
        assert cache.get(config, check_run_record) is None
    _recorded(cache, config, RUN_RECORD)  # what a run returns passes
    assert cache.get(config, check_run_record) == RUN_RECORD


def test_the_sweeps_of_the_experiments_check_what_they_read(tmp_path):
    # run_job's and figure_job's stored results are checked before use; a figure's curve
    # job must have stored a curve, its final job a run's record
    from avalanche_gss.reproduce.experiments import figure_runs
    from avalanche_gss.reproduce.runs import jobs, planning
    from avalanche_gss.reproduce.runs.planning import check_run_record

    assert planning._RESULT_CHECKS[jobs.run_job] is check_run_record
    assert planning._RESULT_CHECKS[jobs.run_logged_job] is check_run_record
    check = planning._RESULT_CHECKS[figure_runs.figure_job]
    check({"kind": "final"}, RUN_RECORD)
    with pytest.raises(ValueError, match="'result' is missing"):
        check({"kind": "curve"}, RUN_RECORD)
    curve = {"result": RUN_RECORD, "samples": [100, 200], "task_ends": [200],
             "task_accuracy": [[50.0, 10.0], [60.0, 20.0]], "schedule": "periodic",
             "eval_seconds": 0.5}
    with pytest.raises(ValueError, match="per point"):
        check({"kind": "curve"}, {**curve, "samples": [100]})


def accuracies(work):
    """Each row's method and accuracies in the table the command wrote (no timings)."""
    rows = json.loads((work / "o" / "table1.json").read_text())["rows"]
    return [(r["method"], r["task_accuracy"]) for r in rows]


@pytest.mark.slow
def test_the_command_reruns_a_linked_or_misshapen_cache_entry_and_writes_through_nothing(
        tmp_path):
    # Given a table's run, cached
    work = tmp_path / "work"
    work.mkdir()
    toy_npz(work / "blobs.npz")
    args = ("table1", "--quick", "--data", "blobs.npz", "--methods", "Rand", "--buffer-sizes",
            20, "--seeds", 0, "--out", "o")
    first = cli(*args, cwd=work, warm=True)
    assert first.returncode == 0, first.stderr[-3000:]
    table = accuracies(work)
    [entry] = (work / "o" / "cache" / "table1").glob("*.json")
    record = json.loads(entry.read_text())
    # When the entry is a link to someone's file, and the command runs again
    precious = tmp_path / "precious.txt"
    precious.write_text("someone's file\n")
    entry.unlink()
    entry.symlink_to(precious)
    linked = cli(*args, cwd=work, warm=True)
    # Then the run is recomputed (the same table), the file the link leads to is untouched
    assert linked.returncode == 0 and "Traceback" not in linked.stderr, linked.stderr[-3000:]
    assert precious.read_text() == "someone's file\n" and entry.is_symlink()
    assert accuracies(work) == table
    assert f"{entry.name} (it will be recomputed): it is a symbolic link" in linked.stderr
    assert f"refusing to write o/cache/table1/{entry.name}" in linked.stderr
    # And an entry of another shape, its checksum recomputed, is a warning and a rerun
    entry.unlink()
    result = {"avg": 99.0}
    entry.write_text(json.dumps({**record, "result": result,
                                 "checksum": _checksum(record["config"], result)}))
    shaped = cli(*args, cwd=work, warm=True)
    assert shaped.returncode == 0 and "Traceback" not in shaped.stderr, shaped.stderr[-3000:]
    assert "'task_accuracy' is missing" in shaped.stderr
    # each in one line of the command's own, not Python's two-line warning with its source
    for shown in (linked.stderr, shaped.stderr):
        [line] = [x for x in shown.splitlines() if "it will be recomputed" in x]
        assert re.match(r"\S.*: warning: ignoring o/cache/table1/\w+\.json \(", line), line
        assert "UserWarning" not in shown and "warnings.warn(" not in shown, shown[-2000:]
    assert accuracies(work) == table
    rerun = json.loads(entry.read_text())["result"]  # a run's record again, not the fake
    assert rerun["task_accuracy"] == record["result"]["task_accuracy"]
