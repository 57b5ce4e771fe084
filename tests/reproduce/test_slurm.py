"""Sweeps on a cluster (``--launcher submitit``): packing, lost jobs, a scheduler that is down.

The tests marked ``slurm`` send jobs to a real SLURM cluster (``make slurm-up`` starts one
on this machine; ``.ci/run`` does); they skip themselves, with the reason, where ``sinfo``
is missing or no cluster answers. The others use submitit's local executor or a fake
``sinfo``.
"""

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import importable_module
from helpers.cli import cli
from helpers.fifo import fifo

from avalanche_gss.reproduce.runs import slurm
from avalanche_gss.reproduce.runs.slurm import (
    ClusterOptions,
    SchedulerUnavailable,
    check_scheduler,
    runs_at_once,
    share_out,
)
from avalanche_gss.reproduce.runs.sweep import SweepError, run_sweep

JOB_MODULE = '''
import json
import os
import signal
import time


def record(config):
    """Log the run's start, sleep, return something of the config.

    Run 3 kills its process (as the OOM killer would) while the file LOG.die exists; run 1
    waits while the file LOG.hold exists (until it is cancelled). With ``meet``, the run
    waits until that many processes have logged a start (or for 600 s, to fail, not hang).
    """
    with open(config["log"], "a") as f:
        f.write(json.dumps({"i": config["i"], "pid": os.getpid(),
                            "job": os.environ.get("SLURM_JOB_ID")}) + "\\n")
    if config["i"] == 3 and os.path.exists(config["log"] + ".die"):
        os.kill(os.getpid(), signal.SIGKILL)
    while config["i"] == 1 and os.path.exists(config["log"] + ".hold"):
        time.sleep(0.1)
    deadline = time.monotonic() + 600
    while config.get("meet") and time.monotonic() < deadline:
        with open(config["log"]) as f:
            if len({json.loads(line)["pid"] for line in f}) >= config["meet"]:
                break
        time.sleep(0.05)
    time.sleep(config.get("sleep", 0.0))
    return {"i": config["i"], "square": config["i"] ** 2}
'''

LOG = "avalanche_gss.reproduce.runs.slurm"


@pytest.fixture
def jobs_module(tmp_path, monkeypatch):
    """An importable module of job functions (for submitit's job processes too)."""
    return importable_module(tmp_path, monkeypatch, "slurm_jobs", JOB_MODULE)


def make_jobs(tmp_path, n, **extra):
    log = str(tmp_path / "starts.log")
    return [{"i": i, "log": log, "label": f"run-{i}", **extra} for i in range(n)]


def starts(tmp_path):
    """How often each run started, and the process (or SLURM job) of each start."""
    path = tmp_path / "starts.log"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return Counter(line["i"] for line in lines), lines


def test_runs_are_dealt_round_robin_into_ceil_n_over_k_groups():
    keys = [f"k{i}" for i in range(10)]
    groups = share_out(keys, 4)
    assert groups == [["k0", "k3", "k6", "k9"], ["k1", "k4", "k7"], ["k2", "k5", "k8"]]
    assert share_out(keys, 1) == [[k] for k in keys]
    assert share_out(keys, 10) == [keys] and share_out([], 3) == []
    with pytest.raises(ValueError, match="runs_per_job must be >= 1, got 0"):
        share_out(keys, 0)


def test_a_job_trains_its_cpus_over_threads_runs_at_once():
    assert runs_at_once(ClusterOptions()) == 1
    assert runs_at_once(ClusterOptions(cpus_per_job=8, threads=2)) == 4
    assert runs_at_once(ClusterOptions(cpus_per_job=1, threads=4)) == 1
    options = ClusterOptions(partition="gpu", time_min=30, mem_gb=4.5, cpus_per_job=8,
                             gpus_per_job=1, threads=2)
    assert options.submitit_params() == {"cpus_per_task": 8, "mem_gb": 4.5,
                                         "gpus_per_node": 1, "slurm_partition": "gpu",
                                         "timeout_min": 30}


def test_packed_runs_share_jobs_and_a_rerun_submits_nothing(tmp_path, jobs_module):
    jobs = make_jobs(tmp_path, 5)
    cache = tmp_path / "cache"

    def sweep():
        return run_sweep(jobs, jobs_module.record, cache_dir=cache, launcher="submitit",
                         cluster="local", runs_per_job=2, progress=False)

    assert [r["square"] for r in sweep()] == [0, 1, 4, 9, 16]
    count, lines = starts(tmp_path)
    assert count == Counter(range(5))
    by_process = Counter(line["pid"] for line in lines)
    assert sorted(by_process.values()) == [1, 2, 2] and os.getpid() not in by_process
    pid = {line["i"]: line["pid"] for line in lines}
    assert pid[0] == pid[3] != pid[1] == pid[4] != pid[2]  # dealt round-robin: 0 3, 1 4, 2
    sweep()
    assert starts(tmp_path)[0] == count  # all cached: no job submitted


def test_a_job_with_two_cpus_trains_two_runs_at_a_time(tmp_path, jobs_module):
    # (each run waits until two processes have started one: both train, however slow the
    # machine is to start the second)
    jobs = make_jobs(tmp_path, 4, meet=2)
    results = run_sweep(jobs, jobs_module.record, cache_dir=tmp_path / "cache",
                        launcher="submitit", cluster="local", runs_per_job=4, progress=False,
                        submitit_params={"cpus_per_job": 2})
    assert [r["square"] for r in results] == [0, 1, 4, 9]
    _, lines = starts(tmp_path)
    assert len({line["pid"] for line in lines}) == 2  # one job, two processes of its own


def test_a_job_killed_midway_is_one_line_naming_its_unfinished_runs(
        tmp_path, jobs_module, caplog, monkeypatch):
    # Given 4 runs in 2 jobs, [0, 2] and [1, 3], and run 3 kills its job (as the OOM killer)
    monkeypatch.setattr(slurm, "RESULT_WAIT_S", 0)
    jobs = make_jobs(tmp_path, 4)
    (tmp_path / "starts.log.die").touch()
    cache = tmp_path / "cache"
    with caplog.at_level("ERROR", logger=LOG), pytest.raises(SweepError) as info:
        run_sweep(jobs, jobs_module.record, cache_dir=cache, launcher="submitit",
                  cluster="local", runs_per_job=2, progress=False)
    # Then one line names the lost job and its run without a result, run 3, not run 1
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert len(lines) == 1, lines
    assert "before 1 of its run(s) finished: run-3;" in lines[0], lines[0]
    assert [cfg["i"] for cfg, _ in info.value.failures] == [3]
    assert len(list(cache.glob("*.json"))) == 3  # runs 0, 1, 2 are stored
    # And a rerun trains only run 3
    (tmp_path / "starts.log.die").unlink()
    before = starts(tmp_path)[0]
    run_sweep(jobs, jobs_module.record, cache_dir=cache, launcher="submitit", cluster="local",
              runs_per_job=2, progress=False)
    assert starts(tmp_path)[0] - before == Counter({3: 1})


def fake_sinfo(folder, monkeypatch, script):
    """A ``sinfo`` first on PATH that runs ``script`` (a shell script's body)."""
    folder.mkdir()
    (folder / "sinfo").write_text("#!/bin/sh\n" + script + "\n")
    (folder / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_a_scheduler_that_is_down_is_one_line(tmp_path, monkeypatch):
    fake_sinfo(tmp_path / "bin", monkeypatch, "echo 'slurm_load_partitions: Unable to contact "
                                              "slurm controller (connect failure)' >&2; exit 1")
    with pytest.raises(SchedulerUnavailable, match=r"^SLURM does not answer \(sinfo failed: "
                       r"slurm_load_partitions: Unable to contact slurm controller \(connect "
                       r"failure\)\); start it \(on this machine: make slurm-up\)"):
        check_scheduler()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SchedulerUnavailable, match="sinfo is not installed here"):
        check_scheduler()


@pytest.mark.slow
def test_the_command_line_says_the_scheduler_is_down_in_one_line(tmp_path, monkeypatch):
    fake_sinfo(tmp_path / "bin", monkeypatch, "echo 'Unable to contact slurm controller' >&2; "
                                              "exit 1")
    work = tmp_path / "work"
    work.mkdir()
    res = cli("table1", "--quick", "--seeds", "0", "--buffer-sizes", "300", "--methods",
              "Reservoir", "--launcher", "submitit", "--cluster", "slurm", "--runs-per-job",
              "4", cwd=work, timeout=600, warm=True)
    assert res.returncode == 1, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m avalanche_gss.reproduce: error: SLURM does not answer "
                           "(sinfo failed: Unable to contact slurm controller)"), res.stderr
    assert "Traceback" not in res.stderr


def test_job_options_need_the_submitit_launcher(tmp_path):
    res = cli("table1", "--quick", "--runs-per-job", "4", cwd=tmp_path, timeout=600)
    assert res.returncode == 2
    assert res.stderr.strip() == ("python -m avalanche_gss.reproduce: error: argument "
                                  "--runs-per-job: applies to --launcher submitit")


# --- on a real SLURM cluster ---------------------------------------------------------------

def _cluster_problem():
    """Why no SLURM cluster can take jobs here (``None``: one answers).

    A running controller answers at once; a stopped one makes sinfo retry for 9 s.
    """
    problem = slurm._sinfo_problem(timeout=3)
    if problem is None:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                                timeout=600, check=False).stdout.split()
        if not {"idle", "mixed", "allocated"} & set(states):
            problem = f"no node takes jobs (node states: {' '.join(states) or 'none'})"
    return problem


@pytest.fixture(scope="session")
def cluster():
    problem = _cluster_problem()
    if problem is not None:
        pytest.skip(f"no SLURM cluster answers ({problem}); make slurm-up starts one")


def sacct_tasks(job_name, count):
    """``(job id, state)`` of the array tasks named ``job_name`` that accounting lists.

    slurmctld hands its records to slurmdbd as it can: up to 600 s (for a loaded machine)
    are given for ``count`` tasks to be listed as ended.
    """
    deadline = time.monotonic() + 600
    while True:
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,State", "--name",
                              job_name], capture_output=True, text=True, timeout=600,
                             check=True).stdout
        tasks = [tuple(line.split("|")) for line in out.splitlines() if line]
        if (len(tasks) >= count and all(state not in ("PENDING", "RUNNING", "COMPLETING")
                                        for _, state in tasks)) or time.monotonic() > deadline:
            return tasks
        time.sleep(0.25)


@pytest.mark.slurm
@pytest.mark.slow
def test_on_slurm_runs_are_packed_into_ceil_n_over_k_array_tasks(cluster, tmp_path,
                                                                 jobs_module):
    jobs = make_jobs(tmp_path, 5)
    cache = tmp_path / f"cache-{os.getpid()}-{time.time_ns()}"  # its jobs' name in sacct
    results = run_sweep(jobs, jobs_module.record, cache_dir=cache, launcher="submitit",
                        cluster="slurm", runs_per_job=2, progress=False,
                        submitit_params={"time_min": 5})
    assert [r["square"] for r in results] == [0, 1, 4, 9, 16]
    _, lines = starts(tmp_path)
    jobs_seen = {line["job"] for line in lines}
    assert len(jobs_seen) == 3 and None not in jobs_seen
    tasks = sacct_tasks(f"avalanche-gss-{cache.name}", 3)
    assert len(tasks) == 3 and {state for _, state in tasks} == {"COMPLETED"}, tasks


@pytest.mark.slurm
@pytest.mark.slow
def test_on_slurm_a_cancelled_job_is_one_line_and_the_rerun_trains_its_runs(
        cluster, tmp_path, jobs_module, caplog, monkeypatch):
    monkeypatch.setattr(slurm, "RESULT_WAIT_S", 2)  # one machine: no file system lag
    # Given 3 runs, one per job, and one job cancelled (scancel) once it runs (its run
    # waits until then: it cannot end before the cancel, however slow the machine)
    jobs = make_jobs(tmp_path, 3)
    (tmp_path / "starts.log.hold").touch()
    cache = tmp_path / f"cache-{os.getpid()}-{time.time_ns()}"
    name = f"avalanche-gss-{cache.name}"
    canceller = subprocess.Popen(
        ["bash", "-c", f"until squeue -h -t R -n {name} -o %i | grep -q _1; do sleep 0.2; "
                       f"done; scancel $(squeue -h -n {name} -o %i | grep _1)"])
    with caplog.at_level("ERROR", logger=LOG), pytest.raises(SweepError) as info:
        run_sweep(jobs, jobs_module.record, cache_dir=cache, launcher="submitit",
                  cluster="slurm", progress=False, submitit_params={"time_min": 5})
    canceller.wait(timeout=600)
    # Then one line names the job and its run; the other runs are stored
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert len(lines) == 1 and "CANCELLED" in lines[0] and ": run-1;" in lines[0], lines
    assert [cfg["i"] for cfg, _ in info.value.failures] == [1]
    assert len(list(Path(cache).glob("*.json"))) == 2
    # And the rerun trains run 1 only
    (tmp_path / "starts.log.hold").unlink()
    before = starts(tmp_path)[0]
    run_sweep(jobs, jobs_module.record, cache_dir=cache, launcher="submitit", cluster="slurm",
              progress=False, submitit_params={"time_min": 5})
    assert starts(tmp_path)[0] - before == Counter({1: 1})


DRIVER = """
import json
import sys

import slurm_jobs
from avalanche_gss.reproduce.runs.sweep import run_sweep

run_sweep(json.loads(sys.argv[1]), slurm_jobs.record, cache_dir=sys.argv[2],
          launcher="submitit", cluster="slurm", progress=False,
          submitit_params={"time_min": 5})
"""


@pytest.mark.slurm
@pytest.mark.slow
def test_on_slurm_a_sweep_killed_then_started_again_trains_no_run_twice(
        cluster, tmp_path, jobs_module, caplog):
    # Given a sweep of 2 runs of 10 s whose submitting process is killed (SIGKILL) once
    # its jobs are submitted (long enough to be still out when it starts again, as a rule:
    # on a cluster just started, the check of the scheduler alone can take seconds)
    jobs = make_jobs(tmp_path, 2, sleep=10.0)
    cache = tmp_path / f"cache-{os.getpid()}-{time.time_ns()}"
    (tmp_path / "driver.py").write_text(DRIVER)
    driver = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), json.dumps(jobs),
                               str(cache)], start_new_session=True)
    while not list((cache / "_submitit").glob("sweep-*.json")):  # its ledger: submitted
        assert driver.poll() is None, "the sweep ended before it was killed"
        time.sleep(0.1)
    driver.kill()
    driver.wait()
    # When it is started again, its jobs still out
    with caplog.at_level("INFO"):
        results = run_sweep(jobs, jobs_module.record, cache_dir=cache, launcher="submitit",
                            cluster="slurm", progress=False, submitit_params={"time_min": 5})
    # Then it waits for them instead of training their runs a second time
    assert [r["square"] for r in results] == [0, 1]
    assert starts(tmp_path)[0] == Counter({0: 1, 1: 1})
    # (it waited for the jobs still out; or they had ended and stored every result before
    # it looked: nothing to wait for, and nothing trained again either way)
    messages = [r.getMessage() for r in caplog.records]
    assert any("of an earlier sweep still out" in m for m in messages) or any(
        "2 already done, 0 to run" in m for m in messages), messages
    assert not list((cache / "_submitit").glob("sweep-*.json"))  # all its jobs ended


def test_a_ledger_that_is_no_file_of_a_sweeps_is_skipped_unread(tmp_path):
    # Given a cluster folder where ledgers are looked for, holding a 40 GiB sparse file, a
    # FIFO that no writer opens and a link to someone's file, each named as a ledger
    folder = tmp_path / "_submitit"
    folder.mkdir()
    huge = folder / "sweep-1.json"
    huge.touch()
    os.truncate(huge, 40 * 2**30)
    other = tmp_path / "other.json"
    other.write_text('[["7", ["k"]]]')
    (folder / "sweep-3.json").symlink_to(other)
    with fifo(folder / "sweep-2.json"):
        # When a sweep looks for jobs to adopt, Then none is adopted, none left to remove,
        # and nothing was read whole (a MemoryError) nor blocked on
        assert slurm._adopt({"k": {}}, folder) == ([], [])
