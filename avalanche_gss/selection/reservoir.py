"""Reservoir sampling (Vitter's Algorithm R) as slot assignments: the ``Reservoir`` baseline."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["reservoir_slots", "refill_slots"]


def reservoir_slots(
    n_seen: int, n_new: int, capacity: int, *, generator: torch.Generator | None = None
) -> Tensor:
    """Decide where each of ``n_new`` arriving samples goes under Algorithm R.

    Sample number ``t`` of the stream (0-based) fills slot ``t`` while ``t < capacity``;
    afterwards it draws ``j`` uniformly from ``0..t`` and replaces slot ``j`` when
    ``j < capacity``. Every sample seen so far is then in the buffer with the same
    probability ``capacity / (t + 1)``. Within one batch a later sample may draw the slot
    of an earlier one; the earlier one is then dropped, exactly as if they arrived one
    at a time.

    :param n_seen: samples of the stream seen before this batch.
    :param n_new: samples in this batch.
    :param capacity: buffer size ``M``.
    :param generator: source of randomness (CPU ``torch.Generator``).
    :return: ``(n_new,)`` int64 tensor: the slot of each sample, or ``-1`` if it is not
        stored. Stored slots are distinct.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    if n_seen < 0 or n_new < 0:
        raise ValueError("n_seen and n_new must be non-negative")
    draws = torch.rand(n_new, generator=generator, dtype=torch.float64).tolist()
    out = []
    for k, draw in enumerate(draws):  # a batch's few samples: host floats, one read
        t = n_seen + k  # the stream position
        # uniform on 0..t: floor(u * (t + 1)), the float64 product (exact below 2**53)
        slot = t if t < capacity else math.floor(draw * float(t + 1))
        out.append(slot if slot < capacity else -1)
    # A later sample that drew the same slot overwrites the earlier one: keep the last.
    holder: dict[int, int] = {}  # slot -> the latest sample of the batch that took it
    for k, slot in enumerate(out):
        if slot >= 0:
            if slot in holder:
                out[holder[slot]] = -1
            holder[slot] = k
    return torch.tensor(out, dtype=torch.long)


def refill_slots(
    n_seen: int, n_new: int, size: int, capacity: int, *,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Algorithm R on a buffer that a resize may have grown: the free slots fill first.

    A buffer grown after it was full holds ``size < min(capacity, n_seen)`` samples:
    Algorithm R alone would put sample ``t < capacity`` into slot ``t``, past the stored
    ones. Here the first ``capacity - size`` new samples take the free slots ``size,
    size + 1, ...`` in order; the others follow Algorithm R at their stream positions
    (the fills counted), and a later one that draws the slot of a sample placed just now
    replaces it. Otherwise (not grown) this is :func:`reservoir_slots`.

    :param n_seen: samples of the stream seen before this batch.
    :param n_new: samples in this batch.
    :param size: samples the buffer holds (slots ``0..size-1``), ``<= capacity``.
    :param capacity: buffer size ``M``.
    :param generator: source of randomness (CPU ``torch.Generator``).
    :return: ``(n_new,)`` int64 tensor: the slot of each sample, or ``-1`` if it is not
        stored. Stored slots are distinct, and together with ``0..size-1`` contiguous.
    """
    free = capacity - size
    if not (free > 0 and n_seen > size):
        return reservoir_slots(n_seen, n_new, capacity, generator=generator)
    first = min(free, n_new)
    slots = torch.full((n_new,), -1, dtype=torch.long)
    slots[:first] = torch.arange(size, size + first)
    if n_new > first:
        rest = reservoir_slots(n_seen + first, n_new - first, capacity, generator=generator)
        # a later sample may replace one placed just now; slots stay distinct
        taken = rest[rest >= 0]
        clash = torch.isin(slots[:first], taken)
        slots[:first][clash] = -1
        slots[first:] = rest
    return slots
