"""Bounded reads: a file is checked to be a regular file of bounded size before it is read.

A path can lead to something that is no file to read whole: a FIFO (a read blocks until a
writer comes, perhaps never), a device (``/dev/zero`` never ends), a sparse file of 40 GiB
(a read asks for 40 GiB of memory), or a symbolic link planted where a file of one's own
was. :func:`open_regular` opens without blocking and without following a final link,
checks what it opened with ``fstat`` and only then hands it over; :func:`read_regular`
also caps its size, and reads no more than that cap even from a file that grows.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

__all__ = ["FileRefused", "open_regular", "read_regular"]


class FileRefused(OSError):
    """A file refused before it is read: a link, not a regular file, or too large.

    Its message is one line naming the file (no ``errno``: nothing failed in the system);
    :attr:`reason` is that line without the file's name, for a caller that names it its
    own way.

    :param message: the line.
    :param reason: why, in words that follow the file's name (default: ``message``).
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason


def _refused(what: str, shown: str, reason: str) -> FileRefused:
    return FileRefused(f"{what} {shown} {reason}", reason)


def _link(path: str | os.PathLike[str]) -> str:
    """Where the link ``path`` leads (``"?"`` if it went meanwhile)."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _kind(mode: int) -> str:
    """What ``mode`` says the file is, in words."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _size(n: int) -> str:
    """``n`` bytes in words (``"40.0 GiB (42949672960 bytes)"``)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n} bytes)"
    return f"{n} bytes"


def open_regular(path: str | os.PathLike[str], *, what: str = "file",
                 follow_links: bool = False, limit: int | None = None) -> BinaryIO:
    """Open ``path`` for reading once it is known to be a regular file (of bounded size).

    The file is opened with ``O_NONBLOCK`` (a FIFO without a writer does not block the
    open) and, unless ``follow_links``, ``O_NOFOLLOW``; ``fstat`` of the open file then
    decides, so a file swapped after a check is not what gets read.

    :param path: the file.
    :param what: what the file is, for the message (``"cache entry"``, ``"checkpoint"``).
    :param follow_links: open the file a symbolic link leads to; else a link is refused.
    :param limit: the most bytes the file may hold (``None``: any size).
    :return: the open binary file (the caller closes it), positioned at its start.
    :raises FileNotFoundError: no such file (nor a link of that name).
    :raises FileRefused: ``path`` is a symbolic link (unless ``follow_links``), is not a
        regular file (a folder, a FIFO, a device), or holds more than ``limit`` bytes;
        one line naming it.
    :raises OSError: the system refused to open it (no permission), naming it.
    """
    shown = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if not follow_links and os.path.islink(path):  # O_NOFOLLOW's ELOOP (or EMLINK)
            raise _refused(what, shown, f"is a symbolic link (to {_link(path)}); refusing "
                           "to read through it") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(what, shown, f"is {_kind(info.st_mode)}, not a regular file")
        if limit is not None and info.st_size > limit:
            raise _refused(what, shown, f"holds {_size(info.st_size)}, more than the "
                           f"{_size(limit)} a {what} may hold")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], *, limit: int, what: str = "file",
                 follow_links: bool = False) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (:func:`open_regular`).

    At most ``limit + 1`` bytes are read, so a file that grows while it is read is
    refused too, never read whole.

    :param path: the file.
    :param limit: the most bytes it may hold.
    :param what: what the file is, for the message.
    :param follow_links: read the file a symbolic link leads to; else a link is refused.
    :raises FileNotFoundError: no such file.
    :raises FileRefused: a link, not a regular file, or too large; one line naming it.
    :raises OSError: the system refused to read it, naming it.
    """
    with open_regular(path, what=what, follow_links=follow_links, limit=limit) as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise _refused(what, os.fspath(path), f"grew past the {_size(limit)} a {what} may "
                       "hold while it was read")
    return data
