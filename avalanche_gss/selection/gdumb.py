"""GDumb's greedy class-balanced sampler as slot assignments.

Prabhu, Torr and Dokania, *GDumb: A simple approach that questions our progress in
continual learning*, ECCV 2020: the sampler that "greedily stores samples in memory as
they come" (the learner that retrains from scratch on the memory is not part of it).
The rule reads class labels only: no task label, no task boundary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from avalanche_gss.selection.classes import class_counts, grow, largest_instance, stored_and_new

__all__ = ["GDumbDecision", "gdumb_slots"]


class GDumbDecision(NamedTuple):
    """What :func:`gdumb_slots` decided for a batch, and the counts after it.

    :param slots: ``(B,)`` int64 slot of each sample, ``-1`` where it is not stored.
    :param seen: ``(K,)`` int64 stream samples of each class seen so far.
    """

    slots: Tensor
    seen: Tensor


def gdumb_slots(
    stored: Tensor, new: Tensor, capacity: int, seen: Tensor, *,
    generator: torch.Generator | None = None,
) -> GDumbDecision:
    """Place a batch, one sample at a time, by GDumb's greedy class-balancing sampler.

    With memory budget ``k`` (``capacity``), ``Y_t`` the classes seen so far (the
    sample's own included) and ``k_c`` the stored samples of the sample's class ``c``:
    the sample is stored if ``k_c < k / |Y_t|`` (compared exactly, as
    ``k_c * |Y_t| < k``); if the memory is then full, a random stored instance of the
    class with the most samples makes room for it (with ties, a random instance of any
    class tied for the most). Otherwise it is not stored, even if a slot is free.

    When the memory is full the class with the most samples holds at least ``k / |Y_t|``,
    so it is never the sample's own class. Consequences: a class with fewer than
    ``k / |Y_t|`` samples seen keeps all of them; no sample makes its class exceed
    ``ceil(k / |Y_t|)``; and once every class keeps arriving the counts settle within
    one of each other. The rule does not move space between classes that are at or
    above their share: a class that got more than its share before new classes
    arrived keeps its excess until a class below its share claims it.

    Within one batch a later sample may overwrite the slot an earlier one took; the
    earlier one is then not stored, exactly as if they arrived one at a time.

    :param stored: ``(S,)`` labels of the stored samples, slots ``0 .. S-1``.
    :param new: ``(B,)`` labels of the batch, in stream order.
    :param capacity: memory budget ``k`` (``S <= k``).
    :param seen: ``(K,)`` int64 samples of each class seen before the batch (any length:
        padded with zeros); a class has been seen when its count is positive.
    :param generator: source of randomness (CPU ``torch.Generator``); each batch draws
        ``B`` uniforms, whatever the decisions.
    :return: the slots and the per-class counts after the batch (:class:`GDumbDecision`).
    """
    labels, batch = stored_and_new(stored, new, capacity)
    n_classes = max(len(seen), max(labels, default=-1) + 1, max(batch, default=-1) + 1)
    n_seen = grow(seen.long(), n_classes).tolist()
    n_seen_classes = sum(1 for n in n_seen if n > 0)
    counts = class_counts(labels, n_classes)
    draws = torch.rand(len(batch), generator=generator, dtype=torch.float64).tolist()
    slots = [-1] * len(batch)
    owner: dict[int, int] = {}  # slot -> the sample of this batch that holds it
    for i, c in enumerate(batch):
        if n_seen[c] == 0:
            n_seen_classes += 1
        n_seen[c] += 1
        if counts[c] * n_seen_classes >= capacity:  # k_c >= k / |Y_t|: not stored
            continue
        if len(labels) < capacity:
            slot = len(labels)
            labels.append(c)
        else:  # full: a random instance of the class with the most samples makes room
            slot = largest_instance(labels, counts, draws[i])
            counts[labels[slot]] -= 1
            labels[slot] = c
        counts[c] += 1
        if slot in owner:
            slots[owner[slot]] = -1
        owner[slot] = i
        slots[i] = slot
    return GDumbDecision(torch.tensor(slots, dtype=torch.long),
                         torch.tensor(n_seen, dtype=torch.long))
