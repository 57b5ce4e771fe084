"""A FIFO that no writer will ever open, which cannot hang the test that reads it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

BOUND_S = 120.0
"""How long a reader may be stuck on the FIFO before the bound frees it (generous: on a
working reader it never comes into play; the test ends and cancels it)."""


def _free(path: Path) -> None:
    """Open the FIFO for writing and close it: a reader stuck on it gets end of file."""
    with contextlib.suppress(OSError):  # no reader stuck on it: nothing to free
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


@contextlib.contextmanager
def fifo(path: Path) -> Iterator[Path]:
    """Make a FIFO at ``path``; a reader that blocks on it is freed after :data:`BOUND_S`.

    Code that opens it without ``O_NONBLOCK`` (the bug the tests look for) then reads an
    empty file instead of hanging the suite, and the test fails on what it got.
    """
    os.mkfifo(path)
    timer = threading.Timer(BOUND_S, _free, (path,))
    timer.daemon = True
    timer.start()
    try:
        yield path
    finally:
        timer.cancel()
