"""``Ctrl-C`` on ``python -m avalanche_gss.reproduce``: one line, exit status 130, no run after.

The command runs as a user runs it in a terminal: a process of its own, from a folder
outside the repository, in a process group of its own that the signal reaches whole (the
command and its worker processes), as a terminal's ``Ctrl-C`` does.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.cli import command, toy_npz

PROG = "python -m avalanche_gss.reproduce"
GATED = '''"""Gated: reservoir sampling, but every run except the first waits at its first batch.

The folder ``$GATED_DIR`` holds the gate: the first run to reach its first batch creates
``first`` and goes on; every later one creates ``waiting-PID`` and waits there until
``open`` exists. While the gate is closed a sweep of such runs can neither end nor cache
more than one run, however slow the machine.
"""

import os
import time

from avalanche_gss.methods import Method, register
from avalanche_gss.methods.reservoir import ReservoirBuffer
from avalanche_gss.training import BufferStrategy

GATE = os.environ["GATED_DIR"]


def _first():
    try:
        os.close(os.open(os.path.join(GATE, "first"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class GatedBuffer(ReservoirBuffer):
    def _assign(self, rows, model):
        if not getattr(self, "_through", False):
            self._through = True
            if not _first():
                open(os.path.join(GATE, f"waiting-{os.getpid()}"), "w").close()
                while not os.path.exists(os.path.join(GATE, "open")):
                    time.sleep(0.01)
        return super()._assign(rows, model)


class Gated(BufferStrategy):
    buffer_class = GatedBuffer


register(Method("Gated", GatedBuffer, Gated))
'''
"""A policy of the test's own (``--import``) whose runs, but the first, wait on a gate."""
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d ")  # the command's log lines on stderr
RUNS = 5


def _group_alive(group):
    """The command lines of the live (not zombie) processes of the process group ``group``.

    Python's multiprocessing resource tracker, which ends by itself once the command that
    started it has exited (it reads its pipe to the end), and which neither starts nor
    stores a run, is not counted: on a loaded machine it may still be ending. Nor is a
    process whose command line reads empty: its memory is already released (the kernel
    is ending it), so it runs no code any more. A process that is ending (the tracker, or
    a worker in its last moments) reads so for a while before it turns zombie.
    """
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != "Z":
                line = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                if line and b"multiprocessing.resource_tracker" not in line:
                    alive.append(line)
        except (OSError, IndexError):
            continue
    return alive


def _entries(cache):
    """The results stored in ``cache``, without an entry still being written."""
    return [p for p in cache.glob("*.json") if not p.name.startswith(".")]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_on_a_sweep_says_what_is_cached_in_one_line(tmp_path, workers):
    outside = tmp_path / "work"
    outside.mkdir()
    data = toy_npz(outside / "blobs.npz", train=100)
    (outside / "gated.py").write_text(GATED)
    gate = outside / "gate"
    gate.mkdir()
    cmd, env = command(["--import", "gated.py", "table1", "--quick", "--data", data,
                        "--seeds", *range(RUNS), "--buffer-sizes", 300, "--methods", "Gated",
                        "--workers", workers, "--out", "o"], outside)
    env["GATED_DIR"] = str(gate)
    cache = outside / "o" / "cache" / "table1"
    with open(outside / "stderr", "w") as err:
        proc = subprocess.Popen(cmd, cwd=outside, env=env, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
    try:
        # Ctrl-C once the first run is cached and another one runs: it waits at the gate,
        # closed until the command has ended, so the sweep cannot end before the signal
        # (the loop ends on those two events, or fails if the command ended); an entry
        # being written (``.tmp-*.json``) is not cached yet
        while not (cache.is_dir() and _entries(cache) and list(gate.glob("waiting-*"))):
            assert proc.poll() is None, (outside / "stderr").read_text()[-3000:]
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=600)
    finally:
        (gate / "open").touch()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr = (outside / "stderr").read_text()
    assert code == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    # Nothing of the command is left to start or store a run: the runs cached now are all
    # there will be, and the queued ones were not run.
    assert not (alive := _group_alive(proc.pid)), alive
    cached = len(_entries(cache))
    assert cached == 1
    # One line says so, and nothing else but the log and the progress bar is on stderr.
    said = [line for line in re.split(r"[\r\n]", stderr) if line.strip()
            and not LOG_LINE.match(line) and not line.startswith("sweep:")]
    assert said == [f"{PROG}: interrupted; {cached} of {RUNS} run(s) are cached in "
                    "o/cache/table1; run the same command again to continue"], stderr[-3000:]
    # Each run that ended logged its line: the cached ones, and at most one per worker that
    # the signal cut short between its line and its cache entry.
    ended = re.findall(r"Gated-M300-seed\d+(?:-\S+)?: avg", stderr)
    assert cached <= len(ended) <= cached + workers


def test_ctrl_c_outside_a_sweep_is_one_line_too(monkeypatch, capsys):
    from avalanche_gss.reproduce import dispatch
    from avalanche_gss.reproduce.__main__ import main

    def interrupted(args, argv):
        raise KeyboardInterrupt  # Ctrl-C while the data load, say

    monkeypatch.setattr(dispatch, "run_experiment", interrupted)
    try:
        code = main(["table1", "--quick"], prog=PROG)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the command (a traceback)")
    assert code == 130
    assert capsys.readouterr().err == f"{PROG}: interrupted\n"
