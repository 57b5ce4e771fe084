"""Sweeps that cannot lie or linger: checksummed cache entries, workers that die with their
parent, a capped worker count, readable files and no leftover temporaries."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from helpers import importable_module

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
