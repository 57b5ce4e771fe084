"""Class-balancing reservoir sampling (CBRS) as slot assignments.

Chrysakis and Moens, *Online Continual Learning from Imbalanced Data*, ICML 2020,
Algorithm 1. The rule reads class labels only: no task label, no task boundary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import Tensor

from avalanche_gss.selection.classes import (
    check_capacity,
    largest_instance,
    stored_and_new,
    weighted_index,
)

__all__ = ["CBRSDecision", "CBRSPlan", "cbrs_slots", "cbrs_plan", "place_by_weight"]

_FREE, _OTHER, _OWN = "free", "other", "own"  # how a sample is stored (see _Classes.arrive)


class CBRSDecision(NamedTuple):
    """What :func:`cbrs_slots` decided for a batch, and the bookkeeping after it.

    :param slots: ``(B,)`` int64 slot of each sample, ``-1`` where it is not stored.
    :param seen: ``(K,)`` int64 ``n_c``: stream samples of each class seen so far.
    :param full: ``(K,)`` bool: the classes that are full.
    """

    slots: Tensor
    seen: Tensor
    full: Tensor


class CBRSPlan(NamedTuple):
    """The class-level half of CBRS's decisions for a batch (:func:`cbrs_plan`).

    :param victims: ``(B,)`` int64: ``-2`` the sample is not stored, ``-1`` it takes the
        next free slot, else the class one of whose stored instances it overwrites.
    :param draws: ``(B,)`` float64 uniform in ``[0, 1)``: which instance of that class,
        for :func:`place_by_weight`.
    :param seen: ``(K,)`` int64 ``n_c`` after the batch.
    :param full: ``(K,)`` bool: the classes full after the batch.
    """

    victims: Tensor
    draws: Tensor
    seen: Tensor
    full: Tensor

    @property
    def admitted(self) -> Tensor:
        """``(B,)`` bool: the samples that take a slot (a later one may take it again)."""
        return self.victims >= -1


class _Classes:
    """CBRS's per-class bookkeeping along a batch: ``n_c``, ``m_c``, the full classes."""

    def __init__(self, stored: Tensor, batch: list[int], capacity: int, seen: Tensor,
                 full: Tensor) -> None:
        stored = stored.detach().cpu().long()
        counts: list[int] = torch.bincount(stored).tolist() if len(stored) else []
        n_seen: list[int] = seen.detach().cpu().long().tolist()
        is_full: list[bool] = full.detach().cpu().bool().tolist()
        n_classes = max(len(n_seen), len(is_full), len(counts), max(batch, default=-1) + 1)
        self.capacity = capacity
        self.size = len(stored)
        self.n_seen = n_seen + [0] * (n_classes - len(n_seen))
        self.is_full = is_full + [False] * (n_classes - len(is_full))
        self.counts = counts + [0] * (n_classes - len(counts))

    def mark_largest(self) -> None:
        top = max(self.counts)
        for label, count in enumerate(self.counts):
            if count == top:
                self.is_full[label] = True

    def largest(self) -> list[int]:
        """The classes tied for the most stored instances, in label order."""
        top = max(self.counts)
        return [label for label, count in enumerate(self.counts) if count == top]

    def arrive(self, c: int, accept: float) -> str | None:
        """A sample of class ``c`` arrives: how it is stored (``None``: it is not).

        ``"free"``: the memory is not filled; ``"other"``: ``c`` is not full, an instance
        of the largest class leaves; ``"own"``: ``u <= m_c / n_c``, an instance of ``c``
        leaves.
        """
        self.n_seen[c] += 1
        if self.size < self.capacity:
            return _FREE
        self.mark_largest()  # the classes largest now are full
        if not self.is_full[c]:
            return _OTHER
        if self.counts[c] > 0 and accept * self.n_seen[c] <= self.counts[c]:  # u <= m_c/n_c
            return _OWN
        return None

    def moved(self, c: int, victim: int | None) -> None:
        """A sample of ``c`` took a free slot (``victim=None``) or one of class ``victim``."""
        self.counts[c] += 1
        if victim is None:
            self.size += 1
            if self.size == self.capacity:
                self.mark_largest()
        else:
            self.counts[victim] -= 1
            self.mark_largest()

    def walk(self, batch: list[int], generator: torch.Generator | None
             ) -> Iterator[tuple[int, int, str, float]]:
        """Each stored sample of ``batch`` in order: ``(i, c, how, u)`` (see :meth:`arrive`).

        Draws the batch's ``2 B`` uniforms first (whatever the decisions): per sample one
        for the reservoir test, and ``u`` for the instance to overwrite. The caller calls
        :meth:`moved` for each sample before taking the next.
        """
        draws = torch.rand(len(batch), 2, generator=generator, dtype=torch.float64).tolist()
        for i, c in enumerate(batch):
            accept, pick = draws[i]
            how = self.arrive(c, accept)
            if how is not None:
                yield i, c, how, pick

    def result(self) -> tuple[Tensor, Tensor]:
        return (torch.tensor(self.n_seen, dtype=torch.long),
                torch.tensor(self.is_full, dtype=torch.bool))


def cbrs_slots(
    stored: Tensor, new: Tensor, capacity: int, seen: Tensor, full: Tensor, *,
    generator: torch.Generator | None = None,
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
    :return: the slots and the bookkeeping after the batch (:class:`CBRSDecision`).
    """
    labels, batch = stored_and_new(stored, new, capacity)
    classes = _Classes(stored, batch, capacity, seen, full)
    slots = [-1] * len(batch)
    owner: dict[int, int] = {}  # slot -> the sample of this batch that holds it
    for i, c, how, pick in classes.walk(batch, generator):
        victim = None
        if how == _FREE:
            slot = len(labels)
            labels.append(c)
        else:
            if how == _OTHER:
                slot = largest_instance(labels, classes.counts, pick)
            else:
                own = [j for j, label in enumerate(labels) if label == c]
                slot = own[weighted_index(pick, len(own))]
            victim, labels[slot] = labels[slot], c
        classes.moved(c, victim)
        _take(slots, owner, i, slot)
    return CBRSDecision(torch.tensor(slots, dtype=torch.long), *classes.result())


def cbrs_plan(
    stored: Tensor, new: Tensor, capacity: int, seen: Tensor, full: Tensor, *,
    generator: torch.Generator | None = None,
) -> CBRSPlan:
    """CBRS's rule (:func:`cbrs_slots`) decided per class, before any instance is chosen.

    Whether each sample is stored and which class gives up a slot depend on the class
    counts only, so they can be decided first; :func:`place_by_weight` then chooses the
    instances. One difference from :func:`cbrs_slots`: when several classes are tied for
    largest, one of them is drawn uniformly (label order) and then one of its instances,
    instead of one instance among all of theirs in slot order. The distribution is the
    same (tied classes hold the same number of instances), and the class decisions no
    longer depend on which instances were chosen before. The uniform left over from the
    class draw (``u * n_tied`` less its integer part, uniform again) chooses the instance.

    :param stored: ``(S,)`` labels of the stored samples, slots ``0 .. S-1``.
    :param new: ``(B,)`` labels of the batch, in stream order.
    :param capacity: buffer size ``M`` (``S <= M``).
    :param seen: ``(K,)`` int64 ``n_c`` before the batch.
    :param full: ``(K',)`` bool: the classes full before the batch.
    :param generator: source of randomness; each batch draws ``2 B`` uniforms, as
        :func:`cbrs_slots`.
    :return: the class decisions and the bookkeeping after the batch (:class:`CBRSPlan`).
    """
    check_capacity(len(stored), capacity)  # the stored labels are only counted here
    batch: list[int] = new.detach().cpu().long().tolist()
    classes = _Classes(stored, batch, capacity, seen, full)
    victims, picks = [-2] * len(batch), [0.0] * len(batch)
    for i, c, how, pick in classes.walk(batch, generator):
        victim = None
        if how == _OTHER:
            tied = classes.largest()
            k = min(int(pick * len(tied)), len(tied) - 1)
            victim, pick = tied[k], min(max(pick * len(tied) - k, 0.0), 1.0)
        elif how == _OWN:
            victim = c
        classes.moved(c, victim)
        victims[i], picks[i] = -1 if victim is None else victim, pick
    return CBRSPlan(torch.tensor(victims, dtype=torch.long),
                    torch.tensor(picks, dtype=torch.float64), *classes.result())


def place_by_weight(plan: CBRSPlan, stored: Tensor, new: Tensor,
                    weights: tuple[Tensor, Tensor]) -> Tensor:
    """Carry out :func:`cbrs_plan`'s decisions, choosing each overwritten instance by weight.

    The instance of the planned class that a sample overwrites is drawn with probability
    proportional to its weight (:func:`~avalanche_gss.selection.classes.weighted_index`
    with the plan's uniform; all-zero weights: uniformly); a sample that takes a slot
    brings its weight with it, so a later sample of the batch may overwrite it.

    :param plan: the batch's plan.
    :param stored: ``(S,)`` labels of the stored samples (as given to :func:`cbrs_plan`).
    :param new: ``(B,)`` labels of the batch.
    :param weights: ``(stored_weights (S,), new_weights (B,))``; only the entries of the
        admitted new samples (:attr:`CBRSPlan.admitted`) are read.
    :return: ``(B,)`` int64 slot of each sample, ``-1`` where it is not stored.
    """
    labels, batch = stored.detach().cpu().long().tolist(), new.detach().cpu().long().tolist()
    stored_w: list[float] = weights[0].detach().cpu().double().tolist()
    new_w: list[float] = weights[1].detach().cpu().double().tolist()
    if len(stored_w) != len(labels) or len(new_w) != len(batch) or len(plan.victims) != len(batch):
        raise ValueError("weights must have one entry per stored and per new sample")
    slots = [-1] * len(batch)
    owner: dict[int, int] = {}
    for i, (victim, u) in enumerate(zip(plan.victims.tolist(), plan.draws.tolist(),
                                        strict=True)):
        if victim == -2:
            continue
        c, w = batch[i], new_w[i]
        if victim == -1:
            slot = len(labels)
            labels.append(c)
            stored_w.append(w)
        else:
            own = [j for j, label in enumerate(labels) if label == victim]
            slot = own[weighted_index(u, len(own), [stored_w[j] for j in own])]
            labels[slot], stored_w[slot] = c, w
        _take(slots, owner, i, slot)
    return torch.tensor(slots, dtype=torch.long)


def _take(slots: list[int], owner: dict[int, int], i: int, slot: int) -> None:
    """Sample ``i`` takes ``slot``; an earlier sample of the batch that held it is not stored."""
    if slot in owner:
        slots[owner[slot]] = -1
    owner[slot] = i
    slots[i] = slot
