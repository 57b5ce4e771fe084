"""Class-balancing reservoir sampling (CBRS) as slot assignments.

Chrysakis and Moens, *Online Continual Learning from Imbalanced Data*, ICML 2020,
Algorithm 1. The rule reads class labels only: no task label, no task boundary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from avalanche_gss.selection.classes import (
    class_counts,
    grow,
    largest_instance,
    stored_and_new,
    weighted_index,
)

__all__ = ["CBRSDecision", "cbrs_slots"]


class CBRSDecision(NamedTuple):
    """What :func:`cbrs_slots` decided for a batch, and the bookkeeping after it.

    :param slots: ``(B,)`` int64 slot of each sample, ``-1`` where it is not stored.
    :param seen: ``(K,)`` int64 ``n_c``: stream samples of each class seen so far.
    :param full: ``(K,)`` bool: the classes that are full.
    """

    slots: Tensor
    seen: Tensor
    full: Tensor


def cbrs_slots(
    stored: Tensor, new: Tensor, capacity: int, seen: Tensor, full: Tensor, *,
    generator: torch.Generator | None = None, weights: tuple[Tensor, Tensor] | None = None,
) -> CBRSDecision:
    """Place a batch, one sample at a time, by Algorithm 1 of the CBRS paper.

    The paper's wording: a class is *largest* if it has the most stored instances, and
    *full* "if it currently is, or has been in one of the previous time steps, the
    largest class"; "once a class becomes full, it remains so". For each sample
    ``(x_i, y_i)`` of class ``c``:

    - "if memory is not filled": store it (the next free slot);
    - else, if ``c`` "is not a full class": "find all instances of the largest class,
      select from them an instance at random, overwrite the selected instance" with it.
      With several largest classes the draw is over the instances of all of them (the
      same as one tied class at random, then one of its instances);
    - else, with ``m_c`` the stored instances of ``c`` and ``n_c`` "the number of stream
      instances of class c encountered so far" (this one included): draw
      ``u ~ Uniform(0, 1)``; "if u <= m_c / n_c", replace a random stored instance of
      ``c``, otherwise ignore the sample: a reservoir within the class.

    Fullness is recorded from the time the memory is filled, since before that every
    sample is stored whatever its class (were the first class of a stream full from its
    first sample, its later samples could never take space from classes that came after
    it). From then on, after each step every (tied) largest class is marked full, and
    the classes largest when a batch starts are too (after a resize, say).

    Consequences: a class that is not full keeps every sample it has seen (``m_c = n_c``);
    a full class never grows; the largest count never grows once the memory is filled.
    Within one batch a later sample may overwrite the slot an earlier one took; the
    earlier one is then not stored, exactly as if they arrived one at a time.

    :param stored: ``(S,)`` labels of the stored samples, slots ``0 .. S-1``.
    :param new: ``(B,)`` labels of the batch, in stream order.
    :param capacity: buffer size ``M`` (``S <= M``).
    :param seen: ``(K,)`` int64 ``n_c`` before the batch (any length: padded with zeros).
    :param full: ``(K',)`` bool: the classes full before the batch (padded with False).
    :param generator: source of randomness (CPU ``torch.Generator``); each batch draws
        ``2 B`` uniforms, whatever the decisions.
    :param weights: ``(stored_weights (S,), new_weights (B,))``: draw the instance to
        overwrite among the candidates with probability proportional to its weight
        (with the same uniform) instead of uniformly; a sample that takes a slot brings
        its weight with it. ``None``: the paper's uniform draw. Candidates whose weights
        are all zero are drawn uniformly.
    :return: the slots and the bookkeeping after the batch (:class:`CBRSDecision`).
    """
    labels, batch = stored_and_new(stored, new, capacity)
    n_classes = max([len(seen), len(full), *(c + 1 for c in labels), *(c + 1 for c in batch)])
    n_seen = grow(seen.long(), n_classes).tolist()
    is_full = grow(full.bool(), n_classes).tolist()
    counts = class_counts(labels, n_classes)
    draws = torch.rand(len(batch), 2, generator=generator, dtype=torch.float64).tolist()
    slots = [-1] * len(batch)
    owner: dict[int, int] = {}  # slot -> the sample of this batch that holds it
    stored_w = new_w = None
    if weights is not None:
        stored_w = [float(w) for w in weights[0].detach().cpu().double().tolist()]
        new_w = [float(w) for w in weights[1].detach().cpu().double().tolist()]
        if len(stored_w) != len(labels) or len(new_w) != len(batch):
            raise ValueError("weights must have one entry per stored and per new sample")

    def mark_largest() -> None:
        top = max(counts)
        for label, count in enumerate(counts):
            if count == top:
                is_full[label] = True

    for i, c in enumerate(batch):
        n_seen[c] += 1
        if len(labels) < capacity:  # memory not filled: store
            slot = len(labels)
            labels.append(c)
            if stored_w is not None and new_w is not None:
                stored_w.append(new_w[i])
            counts[c] += 1
            if len(labels) == capacity:
                mark_largest()
        else:
            mark_largest()  # the classes largest now are full
            accept, pick = draws[i]
            if not is_full[c]:
                slot = largest_instance(labels, counts, pick, stored_w)
            elif counts[c] > 0 and accept * n_seen[c] <= counts[c]:  # u <= m_c / n_c
                own = [j for j, label in enumerate(labels) if label == c]
                slot = own[weighted_index(pick, len(own), stored_w and [stored_w[j] for j in own])]
            else:
                continue
            counts[labels[slot]] -= 1
            labels[slot] = c
            if stored_w is not None and new_w is not None:
                stored_w[slot] = new_w[i]
            counts[c] += 1
            mark_largest()
        if slot in owner:
            slots[owner[slot]] = -1
        owner[slot] = i
        slots[i] = slot
    return CBRSDecision(torch.tensor(slots, dtype=torch.long),
                        torch.tensor(n_seen, dtype=torch.long),
                        torch.tensor(is_full, dtype=torch.bool))
