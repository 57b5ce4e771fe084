"""Skipping an optimizer step whose loss is not finite."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import Tensor

__all__ = ["finite_loss", "is_finite"]


def is_finite(loss: Tensor) -> bool:
    """Whether every value of ``loss`` is finite, with one host read.

    A one-value loss (the usual scalar) is read with ``item()``, no extra tensor op;
    any other with one reduction.

    :param loss: a loss tensor.
    """
    if loss.numel() == 1:
        return math.isfinite(loss.detach().item())
    return bool(torch.isfinite(loss).all())


def finite_loss(loss: Tensor, owner: Any) -> bool:
    """Whether ``loss`` is finite; if not, count a skipped step on ``owner`` and warn.

    A NaN or infinite loss would make every parameter NaN at the next ``optimizer.step()``
    (and every gradient score after it); the caller skips that step instead.

    :param loss: the step's scalar loss.
    :param owner: the object whose ``skipped_steps`` counter is increased.
    """
    # is_finite's check, written here: a step's read is then counted as finite_loss's
    # (benchmarks/host_syncs.py names each read by where it is made)
    if loss.numel() == 1:  # the usual scalar: one host read, no extra tensor op
        if math.isfinite(loss.detach().item()):
            return True
    elif bool(torch.isfinite(loss).all()):
        return True
    owner.skipped_steps += 1
    warnings.warn(
        f"{type(owner).__name__}: non-finite loss ({float(loss.detach().sum())}); "
        "the optimizer step is skipped",
        RuntimeWarning,
        stacklevel=3,
    )
    return False
