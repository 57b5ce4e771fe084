"""What a buffer checks of an incoming batch, and how it counts the samples it refuses.

:func:`check_batch` validates a batch before anything changes; :func:`reject` counts
refused samples in the buffer's ``n_rejected`` and says why with a ``RuntimeWarning``.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple, Protocol

import torch
from torch import Tensor

__all__ = ["Checked", "check_batch", "reject"]

_SMALL = 64
"""Batches of at most this many labels are read whole (else their least and most)."""


class _Bounded(Protocol):
    """A buffer as :func:`check_batch` reads it: the bound its labels must stay below."""

    @property
    def label_bound(self) -> int: ...  # noqa: D102


class _Counting(Protocol):
    """A buffer as :func:`reject` changes it: its count of refused samples."""

    n_rejected: int


class Checked(NamedTuple):
    """What :func:`check_batch` found in a valid batch."""

    finite: Tensor | None
    """``(B,)`` CPU mask of the samples whose inputs are all finite (``None``: all are)."""
    high: int
    """The largest label (``-1`` for an empty batch)."""


def check_batch(owner: _Bounded, x: Tensor, y: Tensor, ref: Tensor | None) -> Checked:
    """Validate a batch; return which samples are finite and the largest label.

    Nothing changes here: the buffer's ``_offer`` counts the non-finite samples. On a
    GPU it reads values on the host: validate the batch before moving it there.

    :param owner: the buffer the batch is offered to (its ``label_bound``).
    :param x: ``(B, *input_shape)`` inputs.
    :param y: ``(B,)`` labels.
    :param ref: stored inputs whose shape ``x`` must match, if any.
    :raises ValueError: sizes or shapes disagree, or labels are not integers in
        ``[0, owner.label_bound)``.
    """
    if y.dim() != 1 or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(
            f"labels must be a 1-D integer tensor, got {y.dtype} of shape {tuple(y.shape)}"
        )
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{x.shape[0]} inputs but {y.shape[0]} labels")
    if ref is not None and x.shape[1:] != ref.shape[1:]:
        raise ValueError(
            f"inputs of shape {tuple(x.shape[1:])} do not match the buffer's "
            f"{tuple(ref.shape[1:])}"
        )
    if len(y) == 0:
        return Checked(None, -1)
    if len(y) <= _SMALL:  # a batch's few labels: one read of them all
        labels = y.tolist()
        low, high = min(labels), max(labels)
    else:
        low, high = (int(v) for v in torch.stack(torch.aminmax(y)).tolist())  # one read
    if low < 0:
        raise ValueError(f"labels must be >= 0, got {low}")
    if high >= owner.label_bound:
        raise ValueError(f"labels must be < {owner.label_bound} ({type(owner).__name__}"
                         f".label_bound), got {high}")
    if not x.is_floating_point():
        return Checked(None, high)
    if math.isfinite(float(x.sum())):  # a finite sum: every value is finite (one read)
        return Checked(None, high)
    # (a NaN or an infinity makes the sum NaN or infinite; so may an overflow: look closer)
    finite = torch.isfinite(x.reshape(len(y), -1)).all(dim=1).cpu()  # (B,)
    return Checked(None if bool(finite.all()) else finite, high)


def reject(owner: _Counting, count: int, message: str, *, stacklevel: int) -> None:
    """Count ``count`` refused samples in ``owner.n_rejected`` and say why (``RuntimeWarning``).

    :param owner: the buffer that refused them.
    :param count: how many.
    :param message: what happened, after the buffer's class name.
    :param stacklevel: the caller's ``stacklevel`` plus one.
    """
    owner.n_rejected += count
    warnings.warn(f"{type(owner).__name__}: {message}", RuntimeWarning, stacklevel=stacklevel)
