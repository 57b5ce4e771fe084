"""Crash-safe file writes: a killed writer leaves the old file (or none) and a temp file."""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO


def _umask() -> int:
    """The process's umask (from /proc on Linux; elsewhere by setting it back at once)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def remove_stale_temporaries(folder: str | os.PathLike[str], prefix: str, suffix: str, *,
                             older_than: float = 3600.0) -> int:
    """Delete leftovers of killed :func:`atomic_write` calls; return how many.

    Only files named ``prefix*suffix`` and not modified for ``older_than`` seconds are
    removed, so that a write in progress in another process is left alone.

    :param folder: the folder the writes went to.
    :param prefix: the temporary files' name prefix.
    :param suffix: their name suffix.
    :param older_than: minimum age in seconds.
    """
    removed = 0
    now = time.time()
    for tmp in Path(folder).glob(f"{glob.escape(prefix)}*{glob.escape(suffix)}"):
        try:
            if now - tmp.stat().st_mtime >= older_than:
                tmp.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object], *,
                 prefix: str, suffix: str, sync_dir: bool = False) -> None:
    """Write ``path`` through a temporary file in its folder, fsynced, then ``os.replace``.

    :param path: the file to (re)write.
    :param write: writes the content to the open binary file it is given.
    :param prefix: the temporary file's name prefix (leftovers of killed writes carry it).
    :param suffix: the temporary file's name suffix.
    :param sync_dir: also fsync the folder, so that the rename itself survives a crash.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    try:
        # mkstemp makes the file 0600; give it the permissions open() would (0666 & ~umask).
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if not sync_dir:
        return
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
