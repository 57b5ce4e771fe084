"""What the repository holds: no output of a run is committed, and the outputs that runs in
the checkout write are ignored (a SLURM job writes ``slurm-<id>.out`` into the folder it was
submitted from)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no list of committed files to read")
    return subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_no_slurm_log_is_committed_and_slurm_logs_are_ignored():
    assert [p for p in _tracked() if Path(p).name.startswith("slurm-")
            and p.endswith(".out")] == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "slurm-123.out"], cwd=REPO)
    assert ignored.returncode == 0, "slurm-*.out is not in .gitignore"
