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


def rss_parts_mb() -> dict[str, float]:
    """Resident memory by kind, in MiB (``/proc/self/status``): ``anon`` (the heap and
    tensors: what a leak grows) and ``file`` (pages of mapped files, such as the code of
    torch's shared libraries, resident from the first time they are read)."""
    parts = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                parts[line[3:7].lower()] = int(line.split()[1]) / 1024
    return parts
