"""Where each stored sample came from, and the buffer read as an ``AvalancheDataset``.

Each stored sample remembers its source dataset and its index there, so the buffer's
:attr:`~SourcesMixin.buffer` is a subset of the stream's own datasets: samples keep their
task label, their fields and their transform groups (a random train augmentation is drawn
anew at each read, eval transforms apply in eval mode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from avalanche.benchmarks.utils import AvalancheDataset, concat_datasets
from avalanche.training.storage_policy import ExemplarsBuffer
from torch import Tensor

from avalanche_gss._avalanche import tensor_dataset

if TYPE_CHECKING:
    from avalanche_gss.buffers.base import OnlineBuffer

__all__ = ["BufferView", "SourcesMixin"]


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

    def dataset(self, owner: SourcesMixin) -> AvalancheDataset:
        """The owner's samples in slot order."""
        if self.view is not None:
            return self.view
        n = owner.size
        if self.data is None:
            parts, order = owner._part(owner.src[:n], owner.src_idx[:n], torch.arange(n))
            self.data = parts[0] if len(parts) == 1 else concat_datasets(parts)
            self.pos[torch.cat(order)] = torch.arange(n)
        elif self.pending:
            parts, offset = [self.data], len(self.data)
            for src, idx, slots in self.pending:  # later batches overwrite earlier ones
                new, order = owner._part(src, idx, slots)
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


class BufferView:
    """A read-only view of some of a buffer's samples (one class or one task).

    Offers what Avalanche reads from the groups of its balanced buffers: :attr:`buffer`
    (an ``AvalancheDataset``), ``len()`` and :attr:`max_size` (the whole buffer's).

    :param owner: the buffer.
    :param slots: the slots of the samples in view.
    """

    def __init__(self, owner: OnlineBuffer, slots: Tensor) -> None:
        self.owner = owner
        self.slots = slots
        self.max_size = owner.max_size

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def buffer(self) -> AvalancheDataset:
        """The samples in view, as a subset of the owner's :attr:`OnlineBuffer.buffer`."""
        return self.owner.buffer.subset(self.slots.tolist())


class SourcesMixin:
    """The source registry of :class:`~avalanche_gss.buffers.OnlineBuffer` and its reads.

    ``src`` / ``src_idx`` / ``plain`` (CPU columns, one entry per slot) say where each
    stored sample came from; the registry maps source ids to the datasets.
    """

    max_size: int
    size: int
    src: Tensor
    src_idx: Tensor
    plain: Tensor
    x: Tensor | None
    y: Tensor | None
    t: Tensor | None

    if TYPE_CHECKING:
        def rows(self, slots: Tensor) -> tuple[Tensor, Tensor, Tensor]: ...  # noqa: D102

    def _init_sources(self, m: int) -> None:
        self.src = torch.full((m,), -1, dtype=torch.long)  # (M,) source ids
        self.src_idx = torch.zeros(m, dtype=torch.long)  # (M,) index in source
        self.plain = torch.ones(m, dtype=torch.bool)  # (M,) no transform
        self._sources: dict[int, Any] = {}  # source id -> dataset
        self._source_of: dict[int, int] = {}  # id(dataset) -> source id
        self._next_source = 0
        self._prune_at = 64  # registry size that triggers the next pruning
        self._data = _DatasetIndex(m)

    def _register(self, data: Any) -> int:
        sid = self._source_of.get(id(data))
        if sid is None:
            sid = self._next_source
            self._next_source += 1
            self._sources[sid] = data
            self._source_of[id(data)] = sid
        return sid

    def _referenced_sources(self) -> Tensor:
        """Source ids still referenced by a stored (or waiting) sample."""
        return self.src[: self.size]

    def _prune_sources(self) -> None:
        """Forget the source datasets no stored sample refers to any more.

        Runs when the registry has doubled since the last pruning, so its cost per
        incoming batch stays constant.
        """
        if len(self._sources) <= self._prune_at:
            return
        used = set(torch.unique(self._referenced_sources()).tolist())
        for sid in [s for s in self._sources if s not in used]:
            data = self._sources.pop(sid)
            self._source_of.pop(id(data), None)
        self._prune_at = max(64, 2 * len(self._sources))

    @property
    def replays_tensors(self) -> bool:
        """Whether the stored tensors are what reading :attr:`buffer` gives (no transform).

        Then replay may use the tensors directly; otherwise it reads :attr:`buffer`, so
        that a random augmentation is drawn anew at each read.
        """
        return bool(self.plain[: self.size].all())

    @property
    def buffer(self) -> AvalancheDataset:
        """The stored samples as an ``AvalancheDataset``, ``buffer[i]`` being slot ``i``.

        Samples that came from a dataset are a subset of it (same fields, task labels and
        transform groups); samples given as tensors (``add``, or restored by
        ``load_state_dict``) yield ``(x, y, t)`` from the stored tensors.
        """
        if self.size == 0:
            return super().buffer  # type: ignore[misc]  # Avalanche's empty dataset
        return self._data.dataset(self)

    @buffer.setter
    def buffer(self, new_buffer: AvalancheDataset) -> None:
        if len(new_buffer) == 0:  # Avalanche's base class empties it this way
            ExemplarsBuffer.buffer.fset(self, new_buffer)  # type: ignore[attr-defined]
            return
        raise AttributeError(f"{type(self).__name__} is filled through add()/post_adapt()")

    def _part(self, src: Tensor, idx: Tensor, slots: Tensor) -> tuple[list[Any], list[Tensor]]:
        """Datasets holding the given samples: one subset per source, in source order.

        :return: the parts and, for each, the slots of its samples in order.
        """
        parts: list[Any] = []
        order: list[Tensor] = []
        for sid in torch.unique(src).tolist():
            mask = src == sid
            if sid < 0:  # given as tensors: served from the stored ones
                parts_t, order_t = self._tensor_parts(slots[mask])
                parts += parts_t
                order += order_t
            else:
                parts.append(self._sources[sid].subset(idx[mask].tolist()))
                order.append(slots[mask])
        return parts, order

    def _tensor_parts(self, slots: Tensor) -> tuple[list[Any], list[Tensor]]:
        """Datasets over the stored tensors of ``slots``: one per task label.

        Each has one task label, as the stream's own datasets: Avalanche keeps it as a
        constant sequence, and its concatenation fails when a per-sample label list
        (a dataset built with a task label per sample) comes before such a sequence.
        """
        x, y, t = (v.cpu() for v in self.rows(slots))
        parts: list[Any] = []
        order: list[Tensor] = []
        for task in torch.unique(t).tolist():
            mask = t == task
            parts.append(tensor_dataset(x[mask], y[mask], int(task)))
            order.append(slots[mask])
        return parts, order

    def _groups(self, labels: Tensor) -> dict[int, BufferView]:
        labels = labels.cpu()
        return {int(v): BufferView(self, (labels == v).nonzero().flatten())  # type: ignore[arg-type]
                for v in torch.unique(labels).tolist()}

    @property
    def buffer_groups(self) -> dict[int, BufferView]:
        """The stored samples per class label (as Avalanche's ``ClassBalancedBuffer``)."""
        if self.size == 0 or self.y is None:
            return {}
        return self._groups(self.y[: self.size])

    @property
    def task_groups(self) -> dict[int, BufferView]:
        """The stored samples per task label."""
        if self.size == 0 or self.t is None:
            return {}
        return self._groups(self.t[: self.size])

    @property
    def buffer_datasets(self) -> list[AvalancheDataset]:
        """The datasets of :attr:`buffer_groups`, one per class present."""
        return [group.buffer for group in self.buffer_groups.values()]

    @property
    def task_datasets(self) -> list[AvalancheDataset]:
        """The datasets of :attr:`task_groups`, one per task present."""
        return [group.buffer for group in self.task_groups.values()]
