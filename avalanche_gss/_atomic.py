"""Crash-safe file writes: a killed writer leaves the old file (or none) and a temp file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


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
