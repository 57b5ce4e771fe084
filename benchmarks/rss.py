"""Resident memory of this process, for the memory benchmarks (Linux)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import resource
import sys
import tempfile
from collections.abc import Callable


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33 and later)."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


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


def heap_in_use_mb() -> float | None:
    """What the C allocator has handed out and not had back, in MiB; ``None`` without glibc.

    glibc's ``mallinfo2()``: ``uordblks`` (chunks in use in its arenas) plus ``hblkhd``
    (blocks it mapped on their own). Unlike RSS, this does not grow when the allocator
    places a chunk on pages of its heap that it reserved earlier and never touched: memory
    the program holds, not where the allocator put it.
    """
    mallinfo2 = _mallinfo2()
    if mallinfo2 is None:
        return None
    info = mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20


def debugmallocstats() -> bytes:
    """What ``sys._debugmallocstats()`` reports now (CPython writes it to the C-level
    standard error, so it is captured through file descriptor 2)."""
    with tempfile.TemporaryFile() as out:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        return out.read()


def pymalloc_arenas() -> int | None:
    """Python's small-object allocator's arenas in use now (``None`` if not reported).

    Each is a mapping of its own (1 MiB on 64-bit Linux), outside the C heap: read from
    :func:`debugmallocstats`.
    """
    found = re.search(rb"# arenas allocated current\s*=\s*([\d,]+)", debugmallocstats())
    return None if found is None else int(found.group(1).replace(b",", b""))


def free_tuples() -> dict[int, int]:
    """Length of CPython's free list of tuples, per tuple length (from
    :func:`debugmallocstats`; empty where it does not report them)."""
    return {int(n): int(k) for k, n in
            re.findall(rb"(\d+) free (\d+)-sized PyTupleObjects", debugmallocstats())}


def copy_smaps(folder: str, k: int) -> None:
    """Record ``k``'s memory map (``k.smaps``, copied by a child process) and where three
    small tuples made now are placed (``k.marks``)."""
    marks = tuple((float(k), i) for i in range(3))
    with open(os.path.join(folder, f"{k}.marks"), "w") as f:
        f.write(" ".join(hex(id(m)) for m in marks))
    path = os.path.join(folder, f"{k}.smaps")
    if os.spawnlp(os.P_WAIT, "cp", "cp", f"/proc/{os.getpid()}/smaps", path):  # no Popen
        raise OSError(f"could not copy the memory map to {path}")


def smaps_rss(path: str) -> dict[tuple[int, int, str], int]:
    """Resident KB of each mapping of a ``/proc/PID/smaps`` copy, keyed by
    ``(start, end, name)`` (name ``""``: anonymous)."""
    out: dict[tuple[int, int, str], int] = {}
    key = None
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:  # a mapping's header
                start, end = (int(v, 16) for v in parts[0].split("-"))
                key = (start, end, parts[5] if len(parts) > 5 else "")
            elif parts and parts[0] == "Rss:" and key is not None:
                out[key] = int(parts[1])
    return out


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    """glibc's ``mallinfo2``, looked up once (``find_library`` runs ``ldconfig``)."""
    try:
        mallinfo2 = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    mallinfo2.restype = _MallInfo2
    return mallinfo2
