"""What produced a result: versions, commit, machine, device and threads.

:func:`provenance` is recorded in every report of ``python -m avalanche_gss.reproduce``;
:func:`provenance_line` says it in one Markdown line.
"""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

__all__ = ["numerics_identity", "provenance", "provenance_line"]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _checkout() -> Path | None:
    """The git checkout this package runs from; ``None`` when installed (site-packages)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / ".git").exists() else None


def _git_commit() -> str | None:
    """The commit of the checkout this package runs from (``+dirty`` with local edits).

    ``None`` when the package is installed rather than run from a checkout, or when git
    cannot tell.
    """
    root = _checkout()
    if root is None:
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def numerics_identity() -> dict[str, str]:
    """Torch's version and the CPU capability its kernels use: what a run computes on.

    ``cpu_capability`` is the CPU instruction set torch's kernels dispatch to (``"AVX2"``,
    ``"AVX512"``...): another one sums in another order, so the same run can end on other
    numbers there. Part of every run's provenance and of its cache key.
    """
    return {"torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def provenance(device: str, threads: int) -> dict[str, Any]:
    """What produced a result: versions, commit (when known), machine, device, threads.

    ``torch`` and ``cpu_capability`` are :func:`numerics_identity`'s.

    ``avalanche_gss`` is the installed distribution's version; ``source`` says whether the
    code ran from a git checkout (then ``git_commit`` names its commit) or from an
    installed package (a wheel: no commit, the version names the code).

    :param device: the device the runs trained on (``"cpu"``, ``"cuda"``...).
    :param threads: the torch threads each run used.
    """
    accelerator = "cpu"
    if device.startswith("cuda") and torch.cuda.is_available():
        accelerator = torch.cuda.get_device_name(torch.device(device))
    from avalanche_gss import __version__

    return {
        "avalanche_gss": _version("avalanche-gss") or __version__,
        "source": "git checkout" if _checkout() is not None else "installed package",
        "git_commit": _git_commit(),
        **numerics_identity(),
        "avalanche": _version("avalanche-lib"),
        "numpy": _version("numpy"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
        "accelerator": accelerator,
        "threads": threads,
    }


def provenance_line(info: dict[str, Any]) -> str:
    """One Markdown line of :func:`provenance`'s output.

    Without a commit it names the code by the first 12 digits of ``code_sha256``, where
    the record holds one (the reports of ``python -m avalanche_gss.reproduce`` do).
    """
    commit = info.get("git_commit")
    code = info.get("code_sha256")
    if commit:
        origin = f" (commit {commit})"
    elif info.get("source") == "installed package":
        origin = " (installed package, no git checkout"
        origin += f"; code sha256 {code[:12]})" if code else ")"
    else:
        origin = f" (commit unknown; code sha256 {code[:12]})" if code else " (commit unknown)"
    return (f"Produced by avalanche-gss {info.get('avalanche_gss')}" + origin
            + f", torch {info.get('torch')}, Avalanche {info.get('avalanche')}, "
            f"Python {info.get('python')}; device {info.get('device')} "
            f"({info.get('accelerator')})"
            + (f", CPU {info['cpu_capability']}" if info.get("cpu_capability") else "")
            + f", {info.get('threads')} torch thread(s) per run.")
