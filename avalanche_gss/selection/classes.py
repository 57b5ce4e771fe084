"""Per-class bookkeeping shared by the class-balancing rules (CBRS, GDumb's sampler).

Both rules make room the same way: they overwrite a random stored instance of the largest
class. Ties are broken by drawing uniformly among the stored instances of every class tied
for largest, which is the same as drawing one of the tied classes uniformly and then one of
its instances uniformly, since tied classes hold the same number of instances.

The stored labels are plain Python lists here: the rules look at one sample at a time, and
on buffers of a few hundred slots a list is faster than a tensor operation per sample.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_capacity", "class_counts", "grow", "largest_instance", "shrink_largest",
           "stored_and_new", "weighted_index"]


def stored_and_new(stored: Tensor, new: Tensor, capacity: int) -> tuple[list[int], list[int]]:
    """Check a class-balancing rule's inputs; return the stored and new labels as lists.

    :param stored: ``(S,)`` labels of the stored samples.
    :param new: ``(B,)`` labels of the batch.
    :param capacity: buffer size ``M``.
    :raises ValueError: ``capacity < 1``, or more stored samples than ``capacity``.
    """
    check_capacity(len(stored), capacity)
    return stored.detach().cpu().long().tolist(), new.detach().cpu().long().tolist()


def check_capacity(n_stored: int, capacity: int) -> None:
    """Refuse a buffer size below one, or more stored samples than it holds.

    :param n_stored: how many samples are stored.
    :param capacity: buffer size ``M``.
    :raises ValueError: ``capacity < 1``, or ``n_stored > capacity``.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    if n_stored > capacity:
        raise ValueError(f"{n_stored} stored samples exceed the capacity {capacity}")


def grow(counts: Tensor, n_classes: int) -> Tensor:
    """``counts`` (a CPU copy) padded with zeros to at least ``n_classes`` entries.

    :param counts: ``(K,)`` per-class values indexed by label.
    :param n_classes: the length needed (the largest label plus one).
    """
    counts = counts.detach().cpu().clone()
    if len(counts) >= n_classes:
        return counts
    pad = torch.zeros(n_classes - len(counts), dtype=counts.dtype)
    return torch.cat([counts, pad])


def class_counts(labels: list[int], n_classes: int) -> list[int]:
    """How many of ``labels`` fall in each class ``0 .. n_classes - 1``.

    :param labels: stored labels, each below ``n_classes``.
    :param n_classes: length of the answer.
    """
    counts = [0] * n_classes
    for label in labels:
        counts[label] += 1
    return counts


def weighted_index(u: float, n: int, weights: list[float] | None = None) -> int:
    """Turn a uniform draw into an index below ``n``, uniformly or by ``weights``.

    :param u: a uniform draw in ``[0, 1)``.
    :param n: how many candidates (at least one).
    :param weights: ``n`` non-negative weights; ``None``, or all zero: uniform.
    :return: ``floor(u * n)`` without weights; with them, the first index whose
        cumulative weight exceeds ``u`` times the total (inverse CDF).
    """
    total = sum(weights) if weights else 0.0
    if not weights or not total > 0:
        return min(int(u * n), n - 1)
    target, cumulative = u * total, 0.0
    for k, w in enumerate(weights):
        cumulative += w
        if target < cumulative:
            return k
    return max(k for k, w in enumerate(weights) if w > 0)  # rounding at the top end


def largest_instance(labels: list[int], counts: list[int], u: float) -> int:
    """The position in ``labels`` of a random stored instance of (one of) the largest classes.

    :param labels: stored labels (at least one).
    :param counts: their per-class counts (:func:`class_counts`).
    :param u: a uniform draw in ``[0, 1)``; the candidates are taken in slot order.
    :return: the chosen position: candidate number ``floor(u * n_candidates)``.
    """
    top = max(counts)
    candidates = [i for i, label in enumerate(labels) if counts[label] == top]
    return candidates[weighted_index(u, len(candidates))]


def shrink_largest(
    labels: Tensor, n_keep: int, *, generator: torch.Generator | None = None
) -> Tensor:
    """Drop random instances of the largest class, one at a time, until ``n_keep`` are left.

    This is how CBRS and GDumb's sampler make room (:func:`largest_instance`), applied to a
    buffer that must shrink: small classes keep every instance, the largest ones are cut
    down towards each other.

    :param labels: ``(S,)`` stored labels, slot order.
    :param n_keep: how many to keep (``0 <= n_keep``).
    :param generator: source of randomness (CPU ``torch.Generator``).
    :return: the kept slots, ``(min(S, n_keep),)`` int64, in increasing order.
    """
    if n_keep < 0:
        raise ValueError(f"n_keep must be >= 0, got {n_keep}")
    stored = labels.detach().cpu().long().tolist()
    n_drop = len(stored) - n_keep
    if n_drop <= 0:
        return torch.arange(len(stored))
    draws = torch.rand(n_drop, generator=generator, dtype=torch.float64).tolist()
    slots = list(range(len(stored)))
    counts = class_counts(stored, max(stored) + 1)
    for u in draws:
        position = largest_instance(stored, counts, u)
        counts[stored[position]] -= 1
        del stored[position], slots[position]
    return torch.tensor(slots, dtype=torch.long)
