"""The paper's ``Rand`` baseline (section 5.1) as slot assignments."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rand_slots"]


def rand_slots(
    size: int, n_new: int, capacity: int, *, generator: torch.Generator | None = None
) -> Tensor:
    """Every batch joins; when the buffer overflows keep a uniform random ``capacity``.

    Paper, section 5.1: "Whenever a new batch is received, it joins the buffer. When the
    buffer is full, we randomly select samples to keep of size M from the new batch and
    samples already in buffer." Unlike reservoir sampling this favours recent samples.

    :param size: samples currently in the buffer (slots ``0..size-1``).
    :param n_new: samples in the batch.
    :param capacity: buffer size ``M``.
    :param generator: source of randomness (CPU ``torch.Generator``).
    :return: ``(n_new,)`` int64 slot per new sample, ``-1`` if dropped; a kept new sample
        takes a free slot or the slot of a dropped buffer sample.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    if not 0 <= size <= capacity:
        raise ValueError(f"size must be in [0, {capacity}], got {size}")
    total = size + n_new
    if total <= capacity:
        return torch.arange(size, total)
    kept = torch.randperm(total, generator=generator)[:capacity]  # uniform M of buffer ∪ batch
    is_kept = torch.zeros(total, dtype=torch.bool)
    is_kept[kept] = True
    free = torch.cat([(~is_kept[:size]).nonzero().flatten(), torch.arange(size, capacity)])
    slots = torch.full((n_new,), -1, dtype=torch.long)
    new_kept = is_kept[size:].nonzero().flatten()  # positions in the batch
    slots[new_kept] = free[: len(new_kept)]
    return slots
