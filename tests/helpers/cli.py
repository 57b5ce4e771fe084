"""Driving ``python -m avalanche_gss.reproduce`` as a user does, and a small data file for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def command(args: Any, cwd: Any) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``python -m avalanche_gss.reproduce ARGS``."""
    assert REPO not in Path(cwd).resolve().parents, "must run outside the repository"
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout, wherever it is installed
    return [sys.executable, "-m", "avalanche_gss.reproduce", *map(str, args)], env


def cli(*args: Any, cwd: Any, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m avalanche_gss.reproduce ARGS`` in ``cwd`` (outside the repository)."""
    cmd, env = command(args, cwd)
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
