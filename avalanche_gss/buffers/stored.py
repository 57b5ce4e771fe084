"""What a buffer holds and how it is read: :class:`StoredSamples`.

The base of :class:`~avalanche_gss.buffers.OnlineBuffer`: the samples live in a
:class:`~avalanche_gss.buffers.columns.SlotStore` and their source datasets in a
:class:`~avalanche_gss.buffers.sources.ProvenanceIndex`; this class reads them for replay
(:meth:`StoredSamples.rows`, :meth:`StoredSamples.tensors`) and for Avalanche
(:attr:`StoredSamples.buffer` and the per-class and per-task groups).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from avalanche.training.storage_policy import ExemplarsBuffer
from torch import Tensor

from avalanche_gss.buffers.columns import SlotStore, check_size
from avalanche_gss.buffers.rows import Rows
from avalanche_gss.buffers.sources import BufferView, ProvenanceIndex

if TYPE_CHECKING:
    from avalanche.benchmarks.utils import AvalancheDataset

__all__ = ["StoredSamples"]


class StoredSamples(ExemplarsBuffer):
    """The stored samples of a buffer, and how replay and Avalanche read them.

    Slots ``0 .. size-1`` of :attr:`store` hold the samples; :attr:`sources` knows their
    source datasets, so that :attr:`buffer` is a subset of the stream's own datasets.

    :param max_size: number of slots ``M``, an integer >= 1 whose columns fit in the
        memory available (else a ``MemoryError`` says how many bytes they need).
    """

    def __init__(self, max_size: int) -> None:
        m = check_size(max_size)
        self.store = SlotStore(m, type(self).__name__)
        ExemplarsBuffer.__init__(self, m)
        self.sources = ProvenanceIndex(m)

    @property
    def size(self) -> int:
        """Number of stored samples (slots ``0 .. size-1``)."""
        return self.store.size

    @property
    def max_size(self) -> int:
        """Number of slots ``M`` (changed by ``resize`` only)."""
        return self.store.max_size

    @max_size.setter
    def max_size(self, value: int) -> None:  # Avalanche's base class sets it once
        if value != self.store.max_size:
            raise AttributeError(f"{type(self).__name__}.max_size changes through resize()")

    @property
    def x(self) -> Tensor | None:
        """``(M, *input_shape)`` stored inputs (``None`` before the first sample)."""
        return self.store.x

    @property
    def y(self) -> Tensor | None:
        """``(M,)`` int64 class labels (``None`` before the first sample)."""
        return self.store.y

    @property
    def t(self) -> Tensor | None:
        """``(M,)`` int64 task labels (``None`` before the first sample)."""
        return self.store.t

    @property
    def scores(self) -> Tensor | None:
        """``(M,)`` float32 scores, meaningful for a policy that keeps them."""
        return self.store.scores

    def __len__(self) -> int:
        return self.store.size

    def rows(self, slots: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The stored ``(x, y, t)`` tensors of ``slots``, on the buffer's device.

        :param slots: ``(K,)`` slot indices below ``len(self)``.
        """
        return self.store.rows(slots)

    def stored_rows(self) -> Rows:
        """The stored samples, slot order, as :class:`~avalanche_gss.buffers.rows.Rows`."""
        n, store = self.size, self.store
        return Rows(*store.rows(torch.arange(n)), store.src[:n], store.src_idx[:n],
                    store.plain[:n])

    def tensors(self) -> tuple[Tensor, Tensor]:
        """The stored ``(x, y)``, ``len(self)`` rows each (task labels: :attr:`task_labels`)."""
        if self.x is None or self.y is None:
            raise ValueError("the buffer is empty")
        return self.x[: self.size], self.y[: self.size]

    @property
    def task_labels(self) -> Tensor:
        """The stored samples' task labels, ``(len(self),)``."""
        return torch.zeros(0, dtype=torch.long) if self.t is None else self.t[: self.size]

    @property
    def replays_tensors(self) -> bool:
        """Whether the stored tensors are what reading :attr:`buffer` gives (no transform).

        Then replay may use the tensors directly; otherwise it reads :attr:`buffer`, so
        that a random augmentation is drawn anew at each read.
        """
        return self.store.all_plain()

    @property
    def buffer(self) -> AvalancheDataset:
        """The stored samples as an ``AvalancheDataset``, ``buffer[i]`` being slot ``i``.

        Samples that came from a dataset are a subset of it (same fields, task labels and
        transform groups); samples given as tensors (``add``, or restored by
        ``load_state_dict``) yield ``(x, y, t)`` from the stored tensors.
        """
        if self.size == 0:
            return super().buffer  # Avalanche's empty dataset
        return self.sources.dataset(self.store)

    @buffer.setter
    def buffer(self, new_buffer: AvalancheDataset) -> None:
        if len(new_buffer) == 0:  # Avalanche's base class empties it this way
            ExemplarsBuffer.buffer.fset(self, new_buffer)
            return
        raise AttributeError(f"{type(self).__name__} is filled through add()/post_adapt()")

    def _groups(self, labels: Tensor | None) -> dict[int, BufferView]:
        if self.size == 0 or labels is None:
            return {}
        labels = labels[: self.size].cpu()
        return {int(v): BufferView(self, (labels == v).nonzero().flatten())
                for v in torch.unique(labels).tolist()}

    @property
    def buffer_groups(self) -> dict[int, BufferView]:
        """The stored samples per class label (as Avalanche's ``ClassBalancedBuffer``)."""
        return self._groups(self.y)

    @property
    def task_groups(self) -> dict[int, BufferView]:
        """The stored samples per task label."""
        return self._groups(self.t)

    @property
    def buffer_datasets(self) -> list[AvalancheDataset]:
        """The datasets of :attr:`buffer_groups`, one per class present."""
        return [group.buffer for group in self.buffer_groups.values()]

    @property
    def task_datasets(self) -> list[AvalancheDataset]:
        """The datasets of :attr:`task_groups`, one per task present."""
        return [group.buffer for group in self.task_groups.values()]
