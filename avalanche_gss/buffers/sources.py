"""Where each stored sample came from, and the buffer read as an ``AvalancheDataset``.

Each stored sample remembers its source dataset and its index there (the store's ``src``
and ``src_idx`` columns, :class:`~avalanche_gss.buffers.columns.SlotStore`), so the
buffer's ``buffer`` is a subset of the stream's own datasets: samples keep their task
label, their fields and their transform groups (a random train augmentation is drawn anew
at each read, eval transforms apply in eval mode). :class:`ProvenanceIndex` maps source
ids to the datasets and keeps that view up to date.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from avalanche.benchmarks.utils import AvalancheDataset, concat_datasets
from torch import Tensor

from avalanche_gss._avalanche import tensor_dataset
from avalanche_gss.buffers.columns import SlotStore
from avalanche_gss.streams.online import DatasetCell

__all__ = ["BufferView", "ProvenanceIndex"]

_PRUNE_EVERY = 32
"""New source datasets between two prunings of :class:`ProvenanceIndex`'s registry."""

_Parts = Callable[[Tensor, Tensor, Tensor], tuple[list[Any], list[Tensor]]]
"""``(src, idx, slots) -> (datasets, slots of each)``: :meth:`ProvenanceIndex.parts`."""


class _DatasetIndex:
    """The buffer's samples as one ``AvalancheDataset``, kept up to date incrementally.

    ``data`` concatenates the subsets of the source datasets that samples were stored
    from (stale entries included); ``pos[i]`` is where slot ``i``'s sample sits in it.
    Stored batches only queue ``(sources, indices, slots)``; the next read appends their
    subsets with one concatenation, as Avalanche's own buffers update theirs, and drops
    the stale entries once they are as many as the live ones. Batches queue only while
    ``data`` exists, and at most ``capacity`` samples' worth: beyond that the next read
    rebuilds from the slots' provenance instead.
    """

    def __init__(self, capacity: int) -> None:
        self.reset(capacity)

    def reset(self, capacity: int) -> None:
        """Forget the dataset: the next read builds it from the slots."""
        self.data: Any = None
        self.pos = torch.zeros(capacity, dtype=torch.long)
        self.pending: list[tuple[Tensor, Tensor, Tensor]] = []
        self.pending_rows = 0
        self.view: AvalancheDataset | None = None

    def stored(self, src: Tensor, idx: Tensor, slots: Tensor, capacity: int) -> None:
        """Record that ``slots`` now hold samples ``idx`` of sources ``src``."""
        self.view = None
        if self.data is None:
            return
        self.pending.append((src, idx, slots))
        self.pending_rows += len(slots)
        if self.pending_rows > capacity:
            self.reset(capacity)

    def dataset(self, store: SlotStore, part: _Parts) -> AvalancheDataset:
        """The store's samples in slot order.

        :param store: the slots.
        :param part: the datasets holding given samples (:meth:`ProvenanceIndex.parts`).
        """
        if self.view is not None:
            return self.view
        n = store.size
        if self.data is None:
            parts, order = part(store.src[:n], store.src_idx[:n], torch.arange(n))
            self.data = parts[0] if len(parts) == 1 else concat_datasets(parts)
            self.pos[torch.cat(order)] = torch.arange(n)
        elif self.pending:
            parts, offset = [self.data], len(self.data)
            for src, idx, slots in self.pending:  # later batches overwrite earlier ones
                new, order = part(src, idx, slots)
                for where in order:  # the parts' samples, in order
                    self.pos[where] = offset + torch.arange(len(where))
                    offset += len(where)
                parts += new
            self.data = concat_datasets(parts)
            self.pending, self.pending_rows = [], 0
            if len(self.data) > 2 * n:  # as many stale entries as live ones: compact
                self.data = self.data.subset(self.pos[:n].tolist())
                self.pos[:n] = torch.arange(n)
        self.view = self.data.subset(self.pos[:n].tolist())
        return self.view


class ProvenanceIndex:
    """The source datasets of a buffer's samples, and the samples as one dataset.

    A source id (the store's ``src``, ``-1``: given as tensors) names a dataset of
    :attr:`datasets`; :meth:`dataset` reads the store's samples through them.

    :param capacity: the store's number of slots.
    """

    def __init__(self, capacity: int) -> None:
        self.datasets: dict[int, Any] = {}  # source id -> dataset
        self._source_of: dict[int, int] = {}  # id(dataset) -> source id
        self._next_source = 0
        self._prune_at = _PRUNE_EVERY  # registry size that triggers the next pruning
        self._view = _DatasetIndex(capacity)

    def register(self, data: Any) -> int:
        """The source id of ``data``, a new one the first time it is seen."""
        sid = self._source_of.get(id(data))
        if sid is None:
            sid = self._next_source
            self._next_source += 1
            self.datasets[sid] = data
            self._source_of[id(data)] = sid
        return sid

    def prune(self, referenced: Callable[[], Tensor]) -> None:
        """Forget the source datasets no sample refers to any more.

        Runs once every :data:`_PRUNE_EVERY` new sources: one pass over the referenced
        ids, shared by that many incoming batches. The registry then holds at most that
        many sources beyond those still referenced, so its peak does not creep up along
        the stream (a doubling rule let it float up to twice the referenced ones, and the
        resident memory grew with the peak).

        :param referenced: gives the source ids still referenced (stored or waiting).
        """
        if len(self.datasets) <= self._prune_at:
            return
        used = set(torch.unique(referenced()).tolist())
        for sid in [s for s in self.datasets if s not in used]:
            data = self.datasets.pop(sid)
            self._source_of.pop(id(data), None)
        self._prune_at = len(self.datasets) + _PRUNE_EVERY

    def stored(self, src: Tensor, idx: Tensor, slots: Tensor, capacity: int) -> None:
        """Record that ``slots`` now hold samples ``idx`` of sources ``src``."""
        if len(slots):
            self._view.stored(src, idx, slots, capacity)

    def reset(self, capacity: int) -> None:
        """Forget the dataset view: the next read builds it from the slots."""
        self._view.reset(capacity)

    def dataset(self, store: SlotStore) -> AvalancheDataset:
        """The store's samples as an ``AvalancheDataset``, in slot order (``size >= 1``)."""
        return self._view.dataset(store, lambda src, idx, slots: self.parts(store, src, idx,
                                                                            slots))

    def parts(self, store: SlotStore, src: Tensor, idx: Tensor,
              slots: Tensor) -> tuple[list[Any], list[Tensor]]:
        """Datasets holding the given samples: one subset per source, in source order.

        :return: the parts and, for each, the slots of its samples in order.
        """
        parts: list[Any] = []
        order: list[Tensor] = []
        for sid in torch.unique(src).tolist():
            mask = src == sid
            if sid < 0:  # given as tensors: served from the stored ones
                parts_t, order_t = _tensor_parts(store, slots[mask])
                parts += parts_t
                order += order_t
            else:
                source = self.datasets[sid]
                if isinstance(source, DatasetCell):  # an experience's, built now
                    source = source.dataset()
                parts.append(source.subset(idx[mask].tolist()))
                order.append(slots[mask])
        return parts, order


def _tensor_parts(store: SlotStore, slots: Tensor) -> tuple[list[Any], list[Tensor]]:
    """Datasets over the stored tensors of ``slots``: one per task label.

    Each has one task label, as the stream's own datasets: Avalanche keeps it as a
    constant sequence, and its concatenation fails when a per-sample label list
    (a dataset built with a task label per sample) comes before such a sequence.
    """
    x, y, t = (v.cpu() for v in store.rows(slots))
    parts: list[Any] = []
    order: list[Tensor] = []
    for task in torch.unique(t).tolist():
        mask = t == task
        parts.append(tensor_dataset(x[mask], y[mask], int(task)))
        order.append(slots[mask])
    return parts, order


class _Buffered(Protocol):
    """What a :class:`BufferView` reads of its buffer."""

    @property
    def max_size(self) -> int: ...  # noqa: D102

    @property
    def buffer(self) -> AvalancheDataset: ...  # noqa: D102


class BufferView:
    """A read-only view of some of a buffer's samples (one class or one task).

    Offers what Avalanche reads from the groups of its balanced buffers: :attr:`buffer`
    (an ``AvalancheDataset``), ``len()`` and :attr:`max_size` (the whole buffer's).

    :param owner: the buffer.
    :param slots: the slots of the samples in view.
    """

    def __init__(self, owner: _Buffered, slots: Tensor) -> None:
        self.owner = owner
        self.slots = slots
        self.max_size = owner.max_size

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def buffer(self) -> AvalancheDataset:
        """The samples in view, as a subset of the owner's ``buffer``."""
        return self.owner.buffer.subset(self.slots.tolist())
