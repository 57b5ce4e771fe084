"""Cluster options that SLURM would take and misread, refused in one line before any job:
CPUs or memory beyond the partition's largest node (the job would wait in the queue
forever), memory under 1 MB (``--mem=0``: the whole node), ``--launcher submitit`` without
submitit; and ``.ci/slurm.sh up`` on a node already busy with jobs."""

import os
import subprocess
import threading
import time

import pytest
from helpers.cli import PACKAGE_ROOT, command, toy_npz

from avalanche_gss.reproduce.runs import slurm
from avalanche_gss.reproduce.runs.slurm import ClusterOptions, SchedulerUnavailable
from avalanche_gss.reproduce.runs.sweep import run_sweep

SLURM_SH = PACKAGE_ROOT / ".ci" / "slurm.sh"
"""The script of the checkout whose package this test imports."""

SINFO = '''case "$*" in
  *%c*) echo "debug* 16 64000"; echo "big 64 512000" ;;
  *%l*) echo "debug* infinite"; echo "big infinite" ;;
  *) echo "debug*"; echo "big" ;;
esac'''
"""A fake ``sinfo``: partition ``debug`` (the default), nodes of 16 CPUs and 64,000 MB;
partition ``big``, 64 CPUs and 512,000 MB."""


@pytest.fixture
def cluster_of_16_cpus(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "sinfo").write_text("#!/bin/sh\n" + SINFO + "\n")
    (folder / "srun").write_text("#!/bin/sh\nexit 0\n")  # what submitit looks for
    (folder / "sbatch").write_text("#!/bin/sh\necho sbatch must not run >&2; exit 1\n")
    for tool in ("sinfo", "srun", "sbatch"):
        (folder / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _job(config):
    raise AssertionError("no job may run")


@pytest.mark.parametrize(("options", "words"), [
    ({"cpus_per_job": 17}, "argument --cpus-per-job: 17 CPUs per job, but the largest node "
                           "of the default partition has 16; give at most 16"),
    ({"mem_gb": 100}, "argument --mem: 100 GB per job, but the largest node of the default "
                      "partition has 62.5 GB (64000 MB); give at most 62.5"),
    ({"cpus_per_job": 65, "partition": "big"}, "node of partition 'big' has 64"),
])
def test_a_job_no_node_can_run_is_refused_before_any_is_submitted(tmp_path, cluster_of_16_cpus,
                                                                  options, words):
    with pytest.raises(SchedulerUnavailable) as info:
        run_sweep([{"i": 0}], _job, cache_dir=tmp_path / "cache", launcher="submitit",
                  cluster="slurm", progress=False, submitit_params=options)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert not list((tmp_path / "cache").rglob("*.sh"))  # no sbatch script written


def test_what_a_node_has_is_read_from_sinfo(cluster_of_16_cpus):
    assert slurm.node_capacity(None) == (16, 64000)
    assert slurm.node_capacity("big") == (64, 512000)
    slurm.check_capacity(ClusterOptions(cpus_per_job=16, mem_gb=62.5))  # fits: no error


def test_memory_under_one_megabyte_is_refused_not_sent_as_the_whole_node(tmp_path):
    with pytest.raises(ValueError, match="mem_gb must be at least 1 MB"):
        ClusterOptions(mem_gb=0.0005)
    cmd, env = command(["table1", "--launcher", "submitit", "--mem", "0.0005", "--help"],
                       tmp_path)
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("python -m avalanche_gss.reproduce: error: argument --mem: "
                                "'0.0005' GB is less than 1 MB"), res.stderr


@pytest.mark.slow
def test_the_submitit_launcher_without_submitit_is_refused_at_once(tmp_path):
    # Given a Python where submitit cannot be imported (as without the cluster extra)
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "submitit.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'submitit'\", name='submitit')\n")
    data = toy_npz(tmp_path / "toy.npz")
    cmd, env = command(["table1", "--quick", "--data", data, "--methods", "Reservoir",
                        "--seeds", "0", "--buffer-sizes", "100", "--launcher", "submitit",
                        "--out", "out"], tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(blocked), env["PYTHONPATH"]])
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    # Then one line says how to install it, before any run
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("python -m avalanche_gss.reproduce: error: argument --launcher "
                               "submitit: submitit cannot be imported"), lines[0]
    assert "pip install 'avalanche-gss[cluster]'" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("state", ["idle", "mixed", "allocated"])
def test_slurm_up_counts_a_node_busy_with_jobs_as_up(tmp_path, state):
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "sinfo").write_text(f"#!/bin/sh\necho {state}\n")
    (folder / "sinfo").chmod(0o755)
    env = {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
           "AVALANCHE_GSS_SLURM_STATE": str(tmp_path / "state")}
    res = subprocess.run(["bash", "-c", 'source "$1"; wait_node && echo up', "bash",
                          str(SLURM_SH)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and res.stdout == "up\n", res.stderr


# --- on a real SLURM cluster (make slurm-up); skipped where none answers -------------------

@pytest.fixture
def real_cluster():
    """The most CPUs a node of the default partition has (skips where no cluster answers)."""
    problem = slurm._sinfo_problem(timeout=3)
    cpus = []
    if problem is None:
        lines = subprocess.run(["sinfo", "-h", "-N", "-o", "%P %c"], capture_output=True,
                               text=True, timeout=30, check=False).stdout.split("\n")
        cpus = [int(line.split()[1]) for line in lines if line.split()[:1]
                and line.split()[0].endswith("*")]
        problem = None if cpus else "sinfo lists no node of the default partition"
    if problem is not None:
        pytest.skip(f"no SLURM cluster answers ({problem}); make slurm-up starts one")
    return max(cpus)


@pytest.mark.slurm
def test_on_slurm_a_job_larger_than_every_node_is_refused_unsubmitted(tmp_path, real_cluster):
    cpus = real_cluster
    cache = tmp_path / f"cache-{os.getpid()}-{time.time_ns()}"  # its jobs' name in squeue
    raised: list[BaseException] = []

    def sweep():
        try:
            run_sweep([{"i": 0}], _job, cache_dir=cache, launcher="submitit",
                      cluster="slurm", progress=False,
                      submitit_params={"cpus_per_job": cpus + 1, "time_min": 5})
        except BaseException as err:  # noqa: BLE001 - handed to the test
            raised.append(err)

    # (in a thread: a sweep whose job is submitted waits for it forever; 120 s bound it)
    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    thread.join(timeout=120)
    name = f"avalanche-gss-{cache.name}"
    queued = subprocess.run(["squeue", "-h", "-n", name], capture_output=True, text=True,
                            timeout=30, check=True).stdout
    if queued:
        subprocess.run(["scancel", "-n", name], timeout=30, check=False)
    assert queued == "" and not thread.is_alive(), queued
    assert len(raised) == 1 and isinstance(raised[0], SchedulerUnavailable), raised
    assert (f"argument --cpus-per-job: {cpus + 1} CPUs per job, but the largest node of the "
            f"default partition has {cpus}") in str(raised[0])


@pytest.mark.slurm
@pytest.mark.slow
def test_on_slurm_up_again_while_a_job_holds_every_cpu_says_it_is_up(tmp_path, real_cluster):
    # Given a job that holds every CPU of the node (its state: allocated), running
    cpus = real_cluster
    job = subprocess.run(["sbatch", "--parsable", f"--cpus-per-task={cpus}", "-o", "/dev/null",
                          "--wrap", "sleep 300"], capture_output=True, text=True, timeout=30,
                         check=True, cwd=tmp_path).stdout.strip().split(";")[0]
    try:
        for _ in range(240):  # up to 60 s for it to start
            state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                                   text=True, timeout=30, check=True).stdout.strip()
            if state == "RUNNING":
                break
            subprocess.run(["sleep", "0.25"], check=True)
        assert state == "RUNNING", state
        # When slurm.sh up runs again, Then it finds the node up, busy, not missing
        res = subprocess.run([str(SLURM_SH), "up"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert "slurm.sh: up in" in res.stderr and "allocated" in res.stderr, res.stderr
    finally:
        subprocess.run(["scancel", job], timeout=30, check=False)
