"""Driving ``python -m avalanche_gss.reproduce`` as a user does, and a small data file for it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

import avalanche_gss

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = Path(avalanche_gss.__file__).resolve().parents[1]
"""The folder holding the ``avalanche_gss`` that this process imported."""


def subprocess_env() -> dict[str, str]:
    """The environment for this checkout's code in another interpreter, started anywhere.

    ``PYTHONPATH`` is the folder of the package this process imported (this checkout, or
    another copy of the package that ``PYTHONPATH`` put first: the child runs the same
    code as the test), wherever the package is installed. Under mutmut's
    statistics pass (``MUTANT_UNDER_TEST=stats``) the child runs with no mutant active
    instead: mutmut records which tests reach which function in its own process only, and
    its trampolines look for its configuration in the working directory, which a child
    started in another folder does not have. With a mutant active (its name), the child
    runs that mutant too, so that a test in a subprocess can kill it.
    """
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    if env.get("MUTANT_UNDER_TEST") == "stats":
        env["MUTANT_UNDER_TEST"] = ""
    return env


def command(args: Any, cwd: Any) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``python -m avalanche_gss.reproduce ARGS``."""
    assert REPO not in Path(cwd).resolve().parents, "must run outside the repository"
    return [sys.executable, "-m", "avalanche_gss.reproduce", *map(str, args)], subprocess_env()


def cli(*args: Any, cwd: Any, timeout: float = 600,
        warm: bool = False) -> subprocess.CompletedProcess:
    """Run ``python -m avalanche_gss.reproduce ARGS`` in ``cwd`` (outside the repository).

    :param warm: fork the command from an interpreter that has the package imported
        (:mod:`helpers.warm`: for tests of what it does once it runs) instead of starting
        Python afresh (for tests of what it loads and does before that).
    """
    cmd, env = command(args, cwd)
    if warm:
        from helpers import warm as warm_python

        return warm_python.run(cmd[1:], cwd, env, timeout)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def toy_npz(path: Path, n_classes: int = 10, train: int = 40, test: int = 10, dim: int = 12,
            seed: int = 0) -> Path:
    """A small learnable data set: Gaussian blobs around one centre per class."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, size=(n_classes, dim))

    def draw(per_class: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(n_classes), per_class)
        x = centres[y] + rng.normal(0, 1, size=(len(y), dim))
        return x.astype(np.float32), y.astype(np.int64)

    x_train, y_train = draw(train)
    x_test, y_test = draw(test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def first_lines_command(text: str, lines: int = 6) -> list[str]:
    """The ``avalanche-gss ...`` command of a file's first lines, its ``\\`` lines joined."""
    head = "\n".join(text.splitlines()[:lines])
    (line,) = re.findall(r"^\s*(avalanche-gss .*?)(?<!\\)$", head.replace("\\\n", " "), re.M)
    return shlex.split(line)
