"""Crash-safe file writes: a killed writer leaves the old file (or none) and a temp file.

A path that is a symbolic link is refused, never written through.
"""

from __future__ import annotations

import errno
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


def refuse_link(path: str | os.PathLike[str]) -> None:
    """Refuse to write ``path`` if it is a symbolic link (a dangling one included).

    Writing through a link would replace a file elsewhere (in a shared folder, any file
    the user can write); replacing the link itself would silently drop what it pointed
    to. Only the final component is checked: the folder one was given may be a link.

    :param path: the file about to be written.
    :raises OSError: ``path`` is a symbolic link (``errno`` ``ELOOP``): one line naming
        it and where it leads.
    """
    try:
        target = os.readlink(path)
    except OSError:  # not a link (or nothing there): os.replace will put a file there
        return
    raise OSError(errno.ELOOP, f"refusing to write {os.fspath(path)}: it is a symbolic link "
                  f"(to {target}); remove the link, or write elsewhere")


def _named(err: OSError, shown: str) -> OSError:
    """``err`` as one line that names the file (same ``errno``, so the same subclass)."""
    reason = err.strerror or " ".join(str(err).split()) or type(err).__name__
    if err.errno is None:
        return OSError(f"cannot write {shown}: {reason}")
    return OSError(err.errno, f"cannot write {shown}: {reason}")


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object], *,
                 prefix: str, suffix: str, sync_dir: bool = False) -> None:
    """Write ``path`` through a temporary file in its folder, fsynced, then ``os.replace``.

    A ``path`` that is a symbolic link is refused (:func:`refuse_link`): nothing is
    written through it, and it is not replaced either. (Should a link appear there
    between that check and the rename, ``os.replace`` replaces the link itself, never
    the file it leads to.)

    :param path: the file to (re)write.
    :param write: writes the content to the open binary file it is given.
    :param prefix: the temporary file's name prefix (leftovers of killed writes carry it).
    :param suffix: the temporary file's name suffix.
    :param sync_dir: also fsync the folder, so that the rename itself survives a crash.
    :raises OSError: ``path`` is a symbolic link, or the file could not be written (a
        full disk, no permission): one line naming ``path``, with the system's ``errno``
        (``ELOOP`` for a link); the previous file is left as it was and the temporary
        file is removed.
    """
    refuse_link(path)
    target = Path(path)
    shown = os.fspath(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
    except OSError as err:
        raise _named(err, shown) from err
    try:
        with os.fdopen(fd, "wb") as file:
            # mkstemp makes the file 0600; give it the permissions open() would (0666 & ~umask).
            os.fchmod(file.fileno(), 0o666 & ~_umask())
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise _named(err, shown) from err
        raise
    if not sync_dir:
        return
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def replace_file(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object], *,
                 sync_dir: bool = False) -> None:
    """(Re)write an output file atomically through a hidden ``.<name>.*.tmp`` beside it.

    Leftovers of killed writes of the same file (an hour old, so that no other process is
    still writing them) are removed first; then :func:`atomic_write`: a failed write (a
    full disk) leaves the previous file whole, and a symbolic link is refused.

    :param path: the file to (re)write.
    :param write: writes the content to the open binary file it is given.
    :param sync_dir: also fsync the folder (see :func:`atomic_write`).
    :raises OSError: ``path`` is a symbolic link, or cannot be written: one line naming it.
    """
    target = Path(path)
    prefix = f".{target.name}."
    remove_stale_temporaries(target.parent, prefix, ".tmp")
    atomic_write(target, write, prefix=prefix, suffix=".tmp", sync_dir=sync_dir)
