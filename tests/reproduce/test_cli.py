"""``python -m avalanche_gss.reproduce`` driven as a user drives it: a process of its own, from
a folder outside the repository, on this checkout's package (PYTHONPATH names it, so that the
tests hold in any worktree; CI also installs the built wheel into a fresh venv and runs it).

What the command loads and refuses before the package is imported, and one whole run, use
a fresh interpreter; the other runs are forked from one that has the package imported
(``helpers.warm``), which spares each about 10 s of start-up."""

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import cli, command, subprocess_env, toy_npz
from helpers.warm import WarmProcess
from helpers.warm import run as warm_python

REPO = Path(__file__).resolve().parents[2]


def cli_background(*args, cwd, log):
    """Start ``python -m reproduce ARGS`` in ``cwd``, warm; its stderr goes to ``log``."""
    cmd, env = command(args, cwd)
    return WarmProcess(cmd[1:], cwd, env, out=Path(os.devnull), err=log)


def avalanche_gss_folder():
    """The folder of the ``avalanche_gss`` package this process imported."""
    import avalanche_gss

    return Path(avalanche_gss.__file__).resolve().parent


def table_lines(md_path):
    """The Markdown table of a report (its rows, without the command line)."""
    return [line for line in Path(md_path).read_text().splitlines() if line.startswith("|")]


@pytest.fixture
def outside(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.mark.slow
def test_workers_2_gives_the_table_of_workers_1(outside, monkeypatch):
    # The job function lives in an importable module, so spawned workers can run it. The
    # command with --workers 2 runs as a user runs it, in the background, while the same
    # sweep with --workers 1 runs in this process (the reference: what is compared is the
    # two tables, not how the command is started), on the small blobs.
    from avalanche_gss.reproduce.__main__ import main

    methods = ("--methods", "Rand", "Reservoir", "GSS-Clust", "--data", toy_npz(outside / "b.npz"))
    two = cli_background("table1", "--quick", *methods, "--workers", 2, "--out", "w2",
                         cwd=outside, log=outside / "w2.log")
    monkeypatch.chdir(outside)
    assert main(["table1", "--quick", *map(str, methods), "--workers", "1", "--out", "w1"]) == 0
    assert two.wait(timeout=600) == 0, (outside / "w2.log").read_text()[-3000:]
    log2 = (outside / "w2.log").read_text()
    assert "BrokenProcessPool" not in log2
    # Workers log each run as the main process does, variant included.
    assert "GSS-Clust-authors-M300-seed0: avg" in log2
    rows1 = table_lines(outside / "w1" / "table1.md")
    rows2 = table_lines(outside / "w2" / "table1.md")
    assert len(rows1) == 6 and rows1 == rows2  # header, rule, 4 methods/variants
    r1 = json.loads((outside / "w1" / "table1.json").read_text())["rows"]
    r2 = json.loads((outside / "w2" / "table1.json").read_text())["rows"]
    assert [r["task_accuracy"] for r in r1] == [r["task_accuracy"] for r in r2]


@pytest.mark.slow
def test_a_failed_job_shows_its_own_error(outside):
    # iCaRL needs class-incremental tasks: on a permuted stream its job fails in the worker.
    data = toy_npz(outside / "blobs.npz")
    # (One job: the pool starts one worker process, which is what the job needs.)
    res = cli("table2", "--quick", "--data", data, "--methods", "iCaRL", "--workers", 2,
              "--out", "o", cwd=outside, warm=True)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert "BrokenProcessPool" not in res.stderr
    assert last.startswith("python -m avalanche_gss.reproduce: error: 1 run(s) failed"), last
    assert "iCaRL-M300-seed" in last and "class-incremental" in last


def test_installed_outside_the_repository_and_help_is_light(outside):
    res = cli("--help", cwd=outside)
    assert res.returncode == 0, res.stderr
    for name in ("table1", "table2", "table3", "table4", "blurry", "constrained", "figure2",
                 "figure4", "figure5", "composition"):
        assert re.search(rf"^  {name}\s+\S", res.stdout, re.M), name  # one line each
    assert "(default: auto)" in res.stdout and "(default: 1)" in res.stdout
    assert "(default: results)" in res.stdout
    assert "Contract" not in res.stdout
    assert "threads" in res.stdout.lower()
    # Parsing imports neither torch nor Avalanche: --help and bad values answer at once.
    probe = ("import sys; from avalanche_gss.reproduce.cli import parse_args; "
             "parse_args(['table1']); "
             "print(sorted(m for m in ('torch', 'avalanche', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=outside, env=subprocess_env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("args, names", [
    (["--data", "fashion"], ["'fashion'", "mnist", "PATH.npz"]),
    (["--buffer-sizes", "0"], ["--buffer-sizes", "'0'", ">= 1"]),
    (["--seeds", "0", "0", "1"], ["--seeds", "0", "once"]),
    (["--buffer-sizes", "300", "400", "300"], ["--buffer-sizes", "300", "once"]),
    (["--methods", "Rand", "Rand"], ["--methods", "Rand", "once"]),
    (["--lr", "-1"], ["--lr", "'-1'", "> 0"]),
    (["--device", "gpu"], ["--device", "'gpu'", "cpu"]),
    (["--workers", "0"], ["--workers", "'0'"]),
    (["--data", "missing.npz"], ["missing.npz"]),
    (["--buffer-sizes", "99999999999999999999"],
     ["--buffer-sizes", "'99999999999999999999'", "10000000"]),
    (["--n-iter", "1000000"], ["--n-iter", "'1000000'", "1000"]),
    (["--threads", "99999999999999999999"], ["--threads", "'99999999999999999999'", "1024"]),
])
def test_bad_values_get_one_line_naming_them(outside, args, names):
    res = cli("table1", "--quick", *args, cwd=outside, timeout=600)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("python -m avalanche_gss.reproduce: error:")
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert "--root" not in lines[0] and "--download" not in lines[0]


@pytest.mark.parametrize("content", [b"", b"not a zip file at all"])
def test_a_bad_npz_gets_one_line_naming_the_file(outside, content):
    bad = outside / "bad.npz"
    bad.write_bytes(content)
    res = cli("table1", "--quick", "--data", bad, cwd=outside, timeout=600)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert "Traceback" not in res.stderr
    assert str(bad) in last and last.startswith("python -m avalanche_gss.reproduce: error:"), last


@pytest.mark.slow
def test_outputs_state_the_run_as_it_was(outside):
    data = toy_npz(outside / "blobs.npz")
    res = cli("table1", "--quick", "--data", data, "--methods", "Rand", "iCaRL",
              "--buffer-sizes", 20, "--seeds", 0, 1, "--lr", 0.1, "--n-iter", 2,
              "--out", "o", cwd=outside, warm=True)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((outside / "o" / "table1.json").read_text())
    protocol = report["protocol"]
    # Every override is in the protocol: --lr reaches iCaRL too (its own 0.1 is replaced).
    assert protocol["lr"] == 0.1 and protocol["n_iter"] == 2
    assert {m: s["lr"] for m, s in protocol["settings_by_method"].items()} == {
        "Rand": 0.1, "iCaRL": 0.1}
    assert protocol["settings_by_method"]["Rand"]["n_iter"] == 2
    assert "lr" not in protocol["method_overrides"].get("iCaRL", {})
    # The title names the data used; the paper's numbers stay with the paper's data.
    assert "blobs" in report["title"] and "MNIST (" not in report["title"]
    assert not protocol["paper_numbers_shown"]
    md = (outside / "o" / "table1.md").read_text()
    assert "disjoint blobs" in md.splitlines()[0] and "(37.5" not in md
    # Provenance: versions, commit when known, device, threads.
    prov = report["provenance"]
    for key in ("avalanche_gss", "torch", "avalanche", "python", "numpy", "device",
                "threads", "git_commit"):
        assert key in prov
    # and the code by its hash, the one every run's cache key holds
    from avalanche_gss.reproduce.runs.cache import package_sha256, source_sha256

    assert prov["code_sha256"] == package_sha256() == source_sha256(
        Path(avalanche_gss_folder()))
    # --device auto is the default: CUDA when present.
    import torch

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert prov["device"] == expected and prov["threads"] == 1 and prov["torch"]
    assert protocol["settings_by_method"]["Rand"]["device"] == expected
    assert "Produced by avalanche-gss" in md and "1 torch thread(s)" in md
    with open(outside / "o" / "table1.csv") as f:
        first = next(csv.DictReader(f))
    assert first["device"] == expected and first["threads"] == "1"
    # Two seeds: a spread in every cell.
    assert all("±" in line for line in table_lines(outside / "o" / "table1.md")[2:])
    # The per-run log line names the run fully.
    assert "Rand-M20-seed1: avg" in res.stderr
    # Each cached run is keyed by its whole config (its SHA-256), which holds the thread
    # count, the data's content hash and source, and the code version.
    configs = [json.loads(p.read_text())["config"]
               for p in (outside / "o" / "cache" / "table1").glob("*.json")]
    assert len(configs) == 4  # 2 methods x 2 seeds
    for config in configs:
        assert config["threads"] == 1 and config["code"] and len(config["data_sha256"]) == 64
        assert "blobs" in config["data_source"]


@pytest.mark.slow
def test_a_device_that_is_absent_gets_one_line(outside):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    res = cli("table1", "--quick", "--device", "cuda", cwd=outside, timeout=600)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert "'cuda'" in last and "no CUDA" in last and "Traceback" not in res.stderr


@pytest.mark.slow
def test_data_with_too_few_classes_are_refused_before_any_run(outside):
    data = toy_npz(outside / "three.npz", n_classes=3)
    res = cli("table1", "--quick", "--data", data, "--out", "o", cwd=outside, timeout=600,
              warm=True)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("python -m avalanche_gss.reproduce: error: --data")
    assert "three.npz" in lines[-1]
    assert "needs at least 10 classes" in lines[-1] and "Traceback" not in res.stderr
    assert not (outside / "o").exists()  # refused before any run


def small_table(outside, data, *extra):
    return cli("table1", "--quick", "--data", data, "--methods", "Rand", "--buffer-sizes", 20,
               "--out", "o", *extra, cwd=outside, warm=True)


@pytest.mark.slow
def test_a_data_file_replaced_at_the_same_path_is_not_a_cache_hit(outside, monkeypatch, caplog):
    # Both runs in this process: the cache's key is what is tested (the command line as a
    # user starts it is tested above and below)
    from avalanche_gss.reproduce.__main__ import main

    data = toy_npz(outside / "d.npz", seed=0)
    args = ["table1", "--quick", "--data", str(data), "--methods", "Rand", "--buffer-sizes",
            "20", "--out", "o"]
    monkeypatch.chdir(outside)
    assert main(args) == 0  # the first run fills the cache
    first = json.loads((outside / "o" / "table1.json").read_text())
    toy_npz(data, seed=1)  # other data, same path
    with caplog.at_level("INFO", logger="avalanche_gss.reproduce.runs.sweep"):
        assert main(args) == 0
    assert "0 already done" in caplog.text, caplog.text
    second = json.loads((outside / "o" / "table1.json").read_text())
    assert first["data_sha256"] != second["data_sha256"]
    # Healthy runs: no skipped step, no mark.
    assert second["rows"][0]["skipped_steps"] == [0] and second["rows"][0]["diverged"] == [False]
    md = (outside / "o" / "table1.md").read_text()
    assert "‡" not in md and "†" not in md
    entries = [json.loads(p.read_text())["config"]
               for p in (outside / "o" / "cache" / "table1").glob("*.json")]
    assert len(entries) == 2
    # What set the second run apart is the data's hash, nothing else in its key
    differ = {k for k in entries[0].keys() | entries[1].keys()
              if entries[0].get(k) != entries[1].get(k)}
    assert differ == {"data_sha256"}, differ
    assert first["rows"][0]["task_accuracy"] != second["rows"][0]["task_accuracy"]


@pytest.mark.slow
def test_a_diverged_run_is_flagged_in_every_output(outside):
    data = toy_npz(outside / "d.npz")
    res = small_table(outside, data, "--lr", "1e6")
    assert res.returncode == 3, res.stderr[-2000:]
    assert "1 run(s) diverged" in res.stderr.strip().splitlines()[-1]
    row = json.loads((outside / "o" / "table1.json").read_text())["rows"][0]
    assert row["skipped_steps"][0] > 0 and row["diverged"] == [True]
    md = (outside / "o" / "table1.md").read_text()
    assert "‡" in md and "diverged" in md and "skipped" in md
    with open(outside / "o" / "table1.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["diverged"] == "True" and int(rows[0]["skipped_steps"]) > 0


def toy_table(outside, *extra, warm=False):
    """``table1 --quick`` on a small data file, Rand only (a few seconds when it runs)."""
    data = outside / "blobs.npz"
    if not data.exists():
        toy_npz(data)
    return cli("table1", "--quick", "--data", data, "--methods", "Rand", "--buffer-sizes", 20,
               *extra, cwd=outside, timeout=600, warm=warm)


def refused_at_once(res, outside, *names):
    """One line naming every ``name``, exit status 2, nothing run and nothing left behind."""
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr[-2000:]
    assert lines[0].startswith("python -m avalanche_gss.reproduce: error:")
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert not (outside / "results").exists() and not (outside / "new").exists()


@pytest.mark.parametrize("args, names", [
    (["--cache", "file"], ["--cache file", "is not a directory"]),
    (["--out", "file/sub"], ["--out file/sub", "not a directory"]),
    (["--tensorboard", "file"], ["--tensorboard file", "is not a directory"]),
    (["--out", "new/o", "--cache", "file/c"], ["--cache file/c", "not a directory"]),
    # sysfs refuses new files to root too (EPERM), or is mounted read-only (EROFS)
    (["--out", "/sys/avalanche-gss-probe"], ["--out /sys/avalanche-gss-probe",
                                              "not writable ("]),
])
def test_a_folder_that_cannot_be_written_is_refused_before_any_run(outside, args, names):
    (outside / "file").write_text("a file, not a folder")
    refused_at_once(toy_table(outside, *args), outside, *names)
    assert (outside / "file").read_text() == "a file, not a folder"


@pytest.fixture
def read_only(tmp_path):
    """A read-only file system (a tmpfs mounted ro): chmod does not stop root."""
    folder = tmp_path / "ro"
    folder.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mount.stderr.strip()}")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_out_on_a_read_only_file_system_is_refused_before_any_run(outside, read_only):
    res = toy_table(outside, "--out", read_only / "results")
    refused_at_once(res, outside, f"--out {read_only / 'results'}",
                    "not writable (Read-only file system)")


FULL_DISK = """
import errno, os, runpy, sys
import avalanche_gss.reproduce.runs.cache

def full(path, write, **kwargs):  # as a full disk fails: in write(), naming no file
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

avalanche_gss.reproduce.runs.cache.atomic_write = full
sys.argv[0] = "reproduce"
runpy.run_module("avalanche_gss.reproduce", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_a_full_disk_for_the_cache_keeps_the_results_and_writes_the_outputs(outside):
    # The cache's writes fail as on a full disk, in the command's own process.
    toy_npz(outside / "blobs.npz")
    cmd, env = command(["table1", "--quick", "--data", "blobs.npz", "--methods", "Rand",
                         "Reservoir", "--buffer-sizes", 20, "--out", "o"], outside)
    res = warm_python(["-c", FULL_DISK, *cmd[3:]], outside, env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    warned = [line for line in res.stderr.splitlines() if "could not cache" in line]
    assert len(warned) == 2, res.stderr[-3000:]
    for line in warned:
        assert line.startswith("python -m avalanche_gss.reproduce: warning:")
        assert "o/cache/table1/" in line
        assert "No space left on device" in line
    assert "Traceback" not in res.stderr
    rows = json.loads((outside / "o" / "table1.json").read_text())["rows"]
    assert sorted(r["method"] for r in rows) == ["Rand", "Reservoir"]
    assert (outside / "o" / "table1.md").exists() and (outside / "o" / "table1.csv").exists()
    assert not list((outside / "o" / "cache" / "table1").glob("*.json"))


@pytest.mark.slow
def test_an_output_that_cannot_be_written_is_one_line_naming_it(outside):
    (outside / "o" / "table1.json" / "in-the-way").mkdir(parents=True)  # a folder, not a file
    res = toy_table(outside, "--out", "o", warm=True)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m avalanche_gss.reproduce: error:"), last
    assert "o/table1.json" in last, last
    assert "Is a directory" in last
    assert "Traceback" not in res.stderr
    assert len(list((outside / "o" / "cache" / "table1").glob("*.json"))) == 1  # run kept


def test_every_option_of_the_parser_is_a_field_of_the_typed_options():
    # parse_args hands the experiments an Options: an option the parser gains without a
    # field would be dropped there, and a field without an option never set
    import dataclasses

    from avalanche_gss.reproduce.cli import make_parser, parse_args
    from avalanche_gss.reproduce.options import Options

    dests = {a.dest for a in make_parser()._actions if a.dest != "help"}
    assert dests == {f.name for f in dataclasses.fields(Options)} - {"prog"}
    parsed = parse_args(["table1", "--seeds", "3", "--workers", "2"])
    assert isinstance(parsed, Options) and parsed.seeds == [3] and parsed.workers == 2
