"""Resident memory of this process, for the memory benchmarks (Linux)."""

from __future__ import annotations

import resource


def rss_mb() -> float:
    """The process's resident memory now, in MiB, from Linux's procfs (what psutil reads)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
