"""``python -m MODULE``, ``python -c CODE`` or ``python SCRIPT``, forked from a warm interpreter.

Starting Python and importing Avalanche costs about 10 s of CPU, which is most of what a
test that runs the command on a few blobs spends. Tests whose subject is what the command
does once it runs (its outputs, its one-line errors, its exit status, its worker pool) run
it here instead: a ``multiprocessing`` fork server imports the package's experiment modules
once per test process, and each command is a process forked from it, started in its own
folder with its own environment, argv, stdout and stderr, as ``python`` would run it.
What happens before the package is imported (start-up, what ``--help`` or a bad value
loads, lazy imports, a fresh interpreter's resume) is tested with :func:`subprocess.run`
on a cold interpreter, and CI runs the installed command from a fresh virtual environment.

The fork server is single-threaded at the fork (imports only; no torch op runs in it), as
a ``DataLoader``'s forked workers are.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import avalanche_gss

PRELOAD = (
    "avalanche_gss.reproduce.dispatch",
    "avalanche_gss.reproduce.experiments.tables",
    "avalanche_gss.reproduce.experiments.which_buffer",
    "avalanche_gss.reproduce.experiments.composition",
    "avalanche_gss.reproduce.experiments.figures",
    "avalanche_gss.reproduce.runs.jobs",
)
"""What the fork server imports once: the command's experiments, and through them Avalanche."""

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(list(PRELOAD))  # this test process's own fork server

PACKAGE_ROOT = Path(avalanche_gss.__file__).resolve().parents[1]
"""The folder of the ``avalanche_gss`` that this process imported: the fork server's too."""


def _start_server() -> None:
    """Start the fork server, once, on the package this process imported.

    Python 3.11's fork server starts as ``python -c`` and drops the ``sys.path`` it is
    given: the current folder would come first, and a test process that imported another
    copy of the package (``PYTHONPATH``) would fork commands running this folder's. It
    starts with that copy's folder on ``PYTHONPATH`` and no current folder instead
    (``PYTHONSAFEPATH``); the commands forked from it get their own environment.
    """
    from multiprocessing import forkserver

    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_ROOT), *([saved["PYTHONPATH"]] if saved["PYTHONPATH"] else [])])
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _child(args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """In the forked process: become ``python ARGS`` started in ``cwd`` with ``env``."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    # sys.path[0] and sys.argv as Python sets them for each form
    if args[0] == "-m":
        sys.path.insert(0, cwd)
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.path.insert(0, "")
        sys.argv = ["-c", *args[2:]]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        script = os.path.abspath(args[0])
        sys.path.insert(0, os.path.dirname(script))
        sys.argv = list(args)
        runpy.run_path(script, run_name="__main__")


class WarmProcess:
    """A command forked from the warm interpreter; ``wait`` as :class:`subprocess.Popen`'s."""

    def __init__(self, args: Sequence[Any], cwd: Any, env: Mapping[str, str], out: Path,
                 err: Path) -> None:
        self.args = [str(a) for a in args]
        _start_server()
        self.process = _CONTEXT.Process(
            target=_child, args=(self.args, str(cwd), dict(env), str(out), str(err)))
        self.process.start()

    def wait(self, timeout: float | None = None) -> int:
        """The exit status (``-N`` for signal N); kill it and raise on ``timeout``."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return int(self.process.exitcode)


def run(args: Sequence[Any], cwd: Any, env: Mapping[str, str],
        timeout: float = 600) -> subprocess.CompletedProcess:
    """``python ARGS`` (``-m MODULE ...``, ``-c CODE ...`` or ``SCRIPT ...``), warm; its output."""
    with tempfile.TemporaryDirectory(prefix="warm-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        code = WarmProcess(args, cwd, env, out, err).wait(timeout)
        return subprocess.CompletedProcess([sys.executable, *map(str, args)], code,
                                           out.read_text(), err.read_text())
