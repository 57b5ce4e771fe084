"""Bounded one-line descriptions of a checkpoint's content, for error messages.

A checkpoint's content comes from a file: a string of megabytes or a list of a million
names must not become a message of the same size. The descriptions here are built piece
by piece (:mod:`reprlib`), never from the whole value.
"""

from __future__ import annotations

import reprlib
from typing import Any

import torch

__all__ = ["short", "short_error"]

LIMIT = 300
"""The longest description, in characters."""


class _Bounded(reprlib.Repr):
    """``reprlib``'s bounded ``repr``, with tensors by shape and dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxstring = 160
        self.maxother = 160
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = 12

    def repr_Tensor(self, x: torch.Tensor, level: int) -> str:  # noqa: N802 (reprlib's name)
        return f"<tensor {list(x.shape)} {str(x.dtype).removeprefix('torch.')}>"


_REPR = _Bounded()


def _cut(text: str, limit: int) -> str:
    text = " ".join(text[: 4 * limit].split())  # one line
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)`` on one line, at most ``limit`` characters, built without the whole.

    :param value: anything read from a checkpoint.
    :param limit: the longest result.
    """
    try:
        text = _REPR.repr(value)
    except Exception:  # a value whose repr fails: its type alone
        text = f"<{type(value).__name__}>"
    return _cut(text, limit)


def short_error(err: BaseException, limit: int = LIMIT) -> str:
    """``"Type: message"`` of an exception, on one line, at most ``limit`` characters.

    :param err: the exception.
    :param limit: the longest result.
    """
    try:
        message = str(err)
    except Exception:  # a message that cannot be built
        message = ""
    return _cut(f"{type(err).__name__}: {message or 'no message'}", limit)
