"""Avalanche storage policies (``ExemplarsBuffer`` subclasses) for the paper's buffers.

:class:`OnlineBuffer` owns the storage and its invariants (never more than ``max_size``
samples, filled contiguously from slot 0); each policy contributes one decision,
:meth:`OnlineBuffer._assign`, that says which slot each new sample takes. The decisions
themselves are the pure tensor code of :mod:`avalanche_gss.selection`.

Every buffer is an Avalanche storage policy in full: give it to Avalanche's
``ReplayPlugin`` (or to :class:`~avalanche_gss.plugins.OnlineRehearsalPlugin`) in any
strategy. Each stored sample remembers where it came from (its dataset and index), so
:attr:`OnlineBuffer.buffer` is a subset of the stream's own datasets: samples keep their
task label, their fields and their transform groups (a random train augmentation is drawn
anew at each read, eval transforms apply in eval mode). Beside it the buffer keeps the
tensors the policy scored (the samples as the model was trained on them), which the fast
replay path uses when the stream's datasets have no transform.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from avalanche.benchmarks import CLExperience
from avalanche.benchmarks.utils import AvalancheDataset, concat_datasets
from avalanche.models import MultiTaskModule
from avalanche.training.storage_policy import ExemplarsBuffer
from torch import Tensor, nn

from avalanche_gss._avalanche import has_transforms, tensor_dataset
from avalanche_gss.benchmarks.online import dataset_tensors
from avalanche_gss.gradients import cosine_from_gram, eval_mode, group_gram, sample_gram
from avalanche_gss.selection.clust import (
    DoublingClustering,
    feature_distance,
    gradient_distance,
)
from avalanche_gss.selection.greedy import CandidateDraw, Gate, greedy_scores, greedy_slots
from avalanche_gss.selection.iqp import IQPResult, select_iqp
from avalanche_gss.selection.rand import rand_slots
from avalanche_gss.selection.reservoir import reservoir_slots

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = [
    "OnlineBuffer",
    "BufferView",
    "ReservoirBuffer",
    "RandBuffer",
    "GSSGreedyBuffer",
    "RecentMergeBuffer",
    "GSSIQPBuffer",
    "GSSClustBuffer",
    "FSSClustBuffer",
    "task_labels_for",
    "model_features",
]

logger = logging.getLogger(__name__)


def task_labels_for(model: nn.Module | None, t: Tensor) -> Tensor | None:
    """The task labels to call ``model`` with: ``t`` for a ``MultiTaskModule``, else None.

    Avalanche's ``avalanche_forward`` calls a ``MultiTaskModule`` as ``model(x, t)`` and any
    other model as ``model(x)``; the gradient engine and the feature scorer do the same.

    :param model: the network.
    :param t: ``(N,)`` task labels of the samples.
    """
    return t if isinstance(model, MultiTaskModule) else None


@dataclass
class _Rows:
    """A batch of samples with everything a buffer keeps about each one.

    ``x``, ``y``, ``t`` live on the samples' device; the provenance columns on the CPU.
    """

    x: Tensor  # (B, *input_shape) the inputs as the model was trained on them
    y: Tensor  # (B,) int64 class labels
    t: Tensor  # (B,) int64 task labels
    src: Tensor  # (B,) int64 id of the source dataset in the buffer's registry, -1: none
    idx: Tensor  # (B,) int64 index of the sample in its source dataset
    plain: Tensor  # (B,) bool: reading the source gives exactly ``x`` (no transform)

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def take(self, index: Tensor) -> _Rows:
        """Rows at ``index`` (a CPU index or boolean mask)."""
        index = index.cpu()
        dev = index.to(self.x.device)
        return _Rows(self.x[dev], self.y[dev], self.t[dev], self.src[index], self.idx[index],
                     self.plain[index])

    @staticmethod
    def cat(a: _Rows, b: _Rows) -> _Rows:
        """``a`` then ``b`` (``b`` moved to ``a``'s device)."""
        dev = a.x.device
        return _Rows(torch.cat([a.x, b.x.to(dev)]), torch.cat([a.y, b.y.to(dev)]),
                     torch.cat([a.t, b.t.to(dev)]), torch.cat([a.src, b.src]),
                     torch.cat([a.idx, b.idx]), torch.cat([a.plain, b.plain]))

    def to(self, device: torch.device | str) -> _Rows:
        """The same rows with ``x``, ``y``, ``t`` on ``device``."""
        return _Rows(self.x.to(device), self.y.to(device), self.t.to(device), self.src,
                     self.idx, self.plain)


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

    def dataset(self, owner: OnlineBuffer) -> AvalancheDataset:
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


class OnlineBuffer(ExemplarsBuffer):
    """A fixed-size replay buffer, updated one incoming batch at a time.

    Subclasses implement :meth:`_assign`. The buffer sees each batch once, through
    :meth:`post_adapt` (Avalanche's storage-policy hook: the plugin calls it after the
    model learnt the experience), :meth:`update_from_dataset` or :meth:`add` (tensors).

    Bad input never reaches the storage: labels must be non-negative integers and inputs
    must have the stored inputs' shape (``ValueError``, the buffer unchanged); samples with
    a NaN or infinite input value are not stored (a ``RuntimeWarning`` says how many).
    :attr:`n_rejected` counts them, with the samples a gradient-scored policy refuses
    because their gradient is not finite.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's own ``torch.Generator`` (saved in :meth:`state_dict`).
    """

    scored = False
    """Whether the policy keeps a meaningful score per stored sample (``self.scores``)."""

    dataset_batch_size = 10
    """Samples offered at once by :meth:`update_from_dataset` (the paper's batch size)."""

    def __init__(self, max_size: int, *, seed: int = 0) -> None:
        if int(max_size) < 1:
            raise ValueError(f"buffer size must be >= 1, got {max_size}")
        m = int(max_size)
        super().__init__(m)
        self.max_size: int = m
        self.generator = torch.Generator().manual_seed(seed)
        self.x: Tensor | None = None  # (M, *input_shape) once the first batch arrived
        self.y: Tensor | None = None  # (M,) class labels
        self.t: Tensor | None = None  # (M,) task labels
        self.scores: Tensor | None = None  # (M,) float, for policies that score samples
        self.src = torch.full((m,), -1, dtype=torch.long)  # (M,) source ids
        self.src_idx = torch.zeros(m, dtype=torch.long)  # (M,) index in source
        self.plain = torch.ones(m, dtype=torch.bool)  # (M,) no transform
        self.size = 0
        self.n_seen = 0
        self.n_rejected = 0  # samples refused for a non-finite input or gradient
        self._sources: dict[int, Any] = {}  # source id -> dataset
        self._source_of: dict[int, int] = {}  # id(dataset) -> source id
        self._next_source = 0
        self._prune_at = 64  # registry size that triggers the next pruning
        self._data = _DatasetIndex(m)
        self.last_slots: Tensor | None = None  # slots taken by the last batch (-1: not stored)

    # ------------------------------------------------------------------ decisions
    def _assign(self, rows: _Rows, model: nn.Module | None) -> Tensor:
        """Return the slot of each new sample (``-1``: not stored); slots are distinct.

        Slots ``< size`` overwrite stored samples; the others must continue the filled
        range without holes. Policies that keep scores set ``self._new_scores`` to the
        ``(B,)`` scores of the new samples.
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ updates
    def add(
        self, x: Tensor, y: Tensor, model: nn.Module | None = None, *,
        task_labels: Tensor | int = 0,
    ) -> Tensor:
        """Offer a batch of tensors to the buffer.

        Samples added this way have no source dataset: :attr:`buffer` yields them as
        ``(x, y, t)`` from the stored tensors.

        :param x: ``(B, *input_shape)`` inputs.
        :param y: ``(B,)`` integer labels.
        :param model: the learner, for policies that score samples by its gradients.
        :param task_labels: ``(B,)`` task labels, or one for the whole batch.
        :return: ``(B,)`` slot taken by each sample, ``-1`` where it was not stored.
        """
        b = int(y.shape[0]) if y.dim() else 0
        t = self._task_tensor(task_labels, b, y.device)
        rows = _Rows(x, y, t, torch.full((b,), -1, dtype=torch.long),
                     torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool))
        slots = self._offer(rows, model)
        self.last_slots = slots
        return slots

    @staticmethod
    def _task_tensor(task_labels: Tensor | int, b: int, device: torch.device) -> Tensor:
        if isinstance(task_labels, Tensor):
            if task_labels.shape != (b,):
                raise ValueError(f"task_labels must have shape ({b},), got "
                                 f"{tuple(task_labels.shape)}")
            return task_labels.to(device, torch.long)
        return torch.full((b,), int(task_labels), dtype=torch.long, device=device)

    def update_from_dataset(
        self, new_data: Any, model: nn.Module | None = None, *,
        device: torch.device | str | None = None, batch_size: int | None = None,
    ) -> None:
        """Offer every sample of a dataset, ``batch_size`` at a time, in order.

        The samples are read through the dataset's current transforms (what the model is
        trained on) and scored as such; the buffer remembers each one's dataset and index.

        :param new_data: an ``AvalancheDataset`` (or any dataset of ``(x, y[, t])`` items).
        :param model: the learner, for policies that score samples by its gradients.
        :param device: where to score; the model's device by default.
        :param batch_size: samples offered at once (:attr:`dataset_batch_size` by default).
        """
        x, y, t = dataset_tensors(new_data)
        self._offer_source(new_data, x, y, t, model, device, batch_size,
                           plain=not has_transforms(new_data))

    def _offer_source(
        self, data: Any, x: Tensor, y: Tensor, t: Tensor, model: nn.Module | None,
        device: torch.device | str | None, batch_size: int | None, *, plain: bool,
    ) -> None:
        step = int(batch_size or self.dataset_batch_size)
        if step < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if device is None and model is not None:
            device = _model_device(model)
        if device is not None:
            x, y, t = x.to(device), y.to(device), t.to(device)
        sid = self._register(data)
        n = len(y)
        for start in range(0, n, step):
            end = min(start + step, n)
            rows = _Rows(x[start:end], y[start:end], t[start:end],
                         torch.full((end - start,), sid, dtype=torch.long),
                         torch.arange(start, end), torch.full((end - start,), plain))
            self.last_slots = self._offer(rows, model)
        self._prune_sources()

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

    def _offer(self, rows: _Rows, model: nn.Module | None) -> Tensor:
        """Validate a batch, drop non-finite samples, let the policy place the rest."""
        finite = self._check_batch(rows.x, rows.y, self.x)
        if len(rows) == 0:
            return torch.empty(0, dtype=torch.long)
        slots = torch.full((len(rows),), -1, dtype=torch.long)
        if finite is not None:  # samples with NaN/inf inputs are not offered
            rows = rows.take(finite)
        if len(rows):
            self._new_scores: Tensor | None = None
            assigned = self._assign(rows, model).cpu()
            self._store(rows, assigned, self._new_scores)
            self.n_seen += len(rows)
            if finite is None:
                slots = assigned
            else:
                slots[finite] = assigned
        return slots

    def _check_batch(self, x: Tensor, y: Tensor, ref: Tensor | None) -> Tensor | None:
        """Validate a batch; return the ``(B,)`` mask of its finite samples (``None``: all).

        :param x: ``(B, *input_shape)`` inputs.
        :param y: ``(B,)`` labels.
        :param ref: stored inputs whose shape ``x`` must match, if any.
        :raises ValueError: sizes or shapes disagree, or labels are not non-negative integers.
        """
        if y.dim() != 1 or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise ValueError(
                f"labels must be a 1-D integer tensor, got {y.dtype} of shape {tuple(y.shape)}"
            )
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"{x.shape[0]} inputs but {y.shape[0]} labels")
        if ref is not None and x.shape[1:] != ref.shape[1:]:
            raise ValueError(
                f"inputs of shape {tuple(x.shape[1:])} do not match the buffer's "
                f"{tuple(ref.shape[1:])}"
            )
        if len(y) == 0:
            return None
        if int(y.min()) < 0:
            raise ValueError(f"labels must be >= 0, got {int(y.min())}")
        if not x.is_floating_point():
            return None
        finite = torch.isfinite(x.reshape(len(y), -1)).all(dim=1).cpu()  # (B,)
        if bool(finite.all()):
            return None
        bad = int((~finite).sum())
        self.n_rejected += bad
        warnings.warn(
            f"{type(self).__name__}: {bad} sample(s) with NaN or infinite inputs not stored",
            RuntimeWarning,
            stacklevel=4,
        )
        return finite

    def _allocate(self, like: _Rows) -> None:
        m, dev = self.max_size, like.x.device
        self.x = torch.zeros((m, *like.x.shape[1:]), dtype=like.x.dtype, device=dev)
        self.y = torch.zeros(m, dtype=torch.long, device=dev)
        self.t = torch.zeros(m, dtype=torch.long, device=dev)
        self.scores = torch.zeros(m, dtype=torch.float32, device=dev)

    def _store(self, rows: _Rows, slots: Tensor, scores: Tensor | None) -> None:
        keep = (slots >= 0).nonzero().flatten()
        target = slots[keep]
        if len(target) != len(torch.unique(target)):
            raise RuntimeError("a policy assigned two samples to one slot")
        new_size = max(self.size, int(target.max()) + 1) if len(target) else self.size
        if new_size > self.max_size:
            raise RuntimeError("a policy assigned a slot beyond max_size")
        appended = target[target >= self.size]
        if len(appended) != new_size - self.size:
            raise RuntimeError("a policy left a hole in the buffer")
        if self.x is None:
            self._allocate(rows)
        assert self.x is not None and self.y is not None and self.t is not None
        dev = self.x.device
        idx = target.to(dev)
        self.x[idx] = rows.x[keep.to(rows.x.device)].to(dev)
        self.y[idx] = rows.y[keep.to(rows.y.device)].to(dev, torch.long)
        self.t[idx] = rows.t[keep.to(rows.t.device)].to(dev, torch.long)
        if scores is not None and self.scores is not None:
            self.scores[idx] = scores[keep.to(scores.device)].to(dev, torch.float32)
        self.src[target] = rows.src[keep]
        self.src_idx[target] = rows.idx[keep]
        self.plain[target] = rows.plain[keep]
        self.size = new_size
        if len(target):
            self._data.stored(rows.src[keep], rows.idx[keep], target, self.max_size)

    def post_adapt(self, agent_state: SupervisedTemplate, exp: Any) -> None:
        """Avalanche's hook: offer the experience's samples, scored with the current model.

        The strategy gives the model (``agent_state.model``, for the scored policies) and
        the device to score on (``agent_state.device``); anything else there is ignored,
        as Avalanche's own buffers read only the experience.
        """
        model = getattr(agent_state, "model", None)
        model = model if isinstance(model, nn.Module) else None
        device = getattr(agent_state, "device", None)
        device = device if isinstance(device, (str, torch.device)) else None
        tensors = getattr(exp, "tensors", None)  # a TensorExperience: no transform, no copy
        if tensors is not None and isinstance(exp, CLExperience):
            x, y = tensors
            t = torch.full((len(y),), int(getattr(exp, "task_label", 0)), dtype=torch.long)
            self._offer_source(exp.dataset, x, y, t, model, device, len(y) or None, plain=True)
            return
        data = exp.dataset if isinstance(exp, CLExperience) else exp
        x, y, t = dataset_tensors(data)
        self._offer_source(data, x, y, t, model, device, None, plain=not has_transforms(data))

    def update(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Offer ``strategy.experience`` (as :meth:`post_adapt`).

        Avalanche's base class warns on every call of this deprecated method;
        ``ReplayPlugin`` still calls it, so it is overridden without the warning.
        """
        self.post_adapt(strategy, strategy.experience)

    def resize(self, strategy: Any, new_size: int) -> None:
        """Change ``max_size``, mid-run if need be.

        Shrinking keeps a uniform random subset of the samples; growing keeps every sample,
        and the next incoming samples fill the free slots before the policy decides again.
        """
        if int(new_size) < 1:
            raise ValueError(f"buffer size must be >= 1, got {new_size}")
        new_size = int(new_size)
        keep = torch.arange(self.size)
        if self.size > new_size:
            keep = torch.randperm(self.size, generator=self.generator)[:new_size].sort().values
        n = len(keep)
        if self.x is not None and self.y is not None and self.t is not None:
            dev = self.x.device
            kd = keep.to(dev)
            columns = {"x": self.x, "y": self.y, "t": self.t, "scores": self.scores}
            for name, old in columns.items():
                if old is None:
                    continue
                new = torch.zeros((new_size, *old.shape[1:]), dtype=old.dtype, device=dev)
                new[:n] = old[kd]
                setattr(self, name, new)
        for name, fill in (("src", -1), ("src_idx", 0), ("plain", True)):
            old = getattr(self, name)
            new = torch.full((new_size,), fill, dtype=old.dtype)
            new[:n] = old[keep]
            setattr(self, name, new)
        self.size = n
        self.max_size = new_size
        self._data.reset(new_size)

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self.size

    def sample_slots(self, k: int, generator: torch.Generator | None = None) -> Tensor:
        """Draw ``min(k, len(self))`` distinct slots uniformly at random (CPU int64).

        :param k: how many.
        :param generator: source of randomness; the buffer's own by default.
        """
        if self.size == 0:
            raise ValueError("the buffer is empty")
        return torch.randperm(self.size, generator=generator or self.generator)[:k]

    def sample(self, k: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``min(k, len(self))`` distinct stored samples uniformly at random.

        :param k: how many samples.
        :param generator: source of randomness; the buffer's own by default.
        :return: ``(x, y)`` on the buffer's device (task labels: :meth:`rows`).
        """
        x, y, _ = self.rows(self.sample_slots(k, generator))
        return x, y

    def rows(self, slots: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The stored ``(x, y, t)`` tensors of ``slots``, on the buffer's device.

        :param slots: ``(K,)`` slot indices below ``len(self)``.
        """
        if self.x is None or self.y is None or self.t is None:
            raise ValueError("the buffer is empty")
        idx = slots.to(self.x.device)
        return self.x[idx], self.y[idx], self.t[idx]

    def tensors(self) -> tuple[Tensor, Tensor]:
        """The stored ``(x, y)``, ``len(self)`` rows each (task labels: :attr:`task_labels`)."""
        if self.x is None or self.y is None:
            raise ValueError("the buffer is empty")
        return self.x[: self.size], self.y[: self.size]

    @property
    def task_labels(self) -> Tensor:
        """The stored samples' task labels, ``(len(self),)``."""
        if self.t is None:
            return torch.zeros(0, dtype=torch.long)
        return self.t[: self.size]

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
        transform groups); samples given as tensors (:meth:`add`, or restored by
        :meth:`load_state_dict`) yield ``(x, y, t)`` from the stored tensors.
        """
        if self.size == 0:
            return super().buffer
        return self._data.dataset(self)

    @buffer.setter
    def buffer(self, new_buffer: AvalancheDataset) -> None:
        if len(new_buffer) == 0:
            self._buffer = new_buffer
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
                x, y, t = self.rows(slots[mask])
                parts.append(tensor_dataset(x.cpu(), y.cpu(), t.cpu()))
            else:
                parts.append(self._sources[sid].subset(idx[mask].tolist()))
            order.append(slots[mask])
        return parts, order

    def _groups(self, labels: Tensor) -> dict[int, BufferView]:
        labels = labels.cpu()
        return {int(v): BufferView(self, (labels == v).nonzero().flatten())
                for v in torch.unique(labels).tolist()}

    @property
    def buffer_groups(self) -> dict[int, BufferView]:
        """The stored samples per class label (as Avalanche's ``ClassBalancedBuffer``)."""
        if self.size == 0 or self.y is None:
            return {}
        return self._groups(self.y[: self.size])

    @property
    def buffer_datasets(self) -> list[AvalancheDataset]:
        """The datasets of :attr:`buffer_groups`, one per class present."""
        return [group.buffer for group in self.buffer_groups.values()]

    @property
    def task_groups(self) -> dict[int, BufferView]:
        """The stored samples per task label."""
        if self.size == 0 or self.t is None:
            return {}
        return self._groups(self.t[: self.size])

    @property
    def task_datasets(self) -> list[AvalancheDataset]:
        """The datasets of :attr:`task_groups`, one per task present."""
        return [group.buffer for group in self.task_groups.values()]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: samples, scores, counters and the RNG state.

        Tensors and plain values only. The source datasets are not part of it: after
        :meth:`load_state_dict` the samples are served from the stored tensors.
        """
        return {
            "max_size": self.max_size,
            "size": self.size,
            "n_seen": self.n_seen,
            "x": None if self.x is None else self.x.cpu(),
            "y": None if self.y is None else self.y.cpu(),
            "t": None if self.t is None else self.t.cpu(),
            "scores": None if self.scores is None else self.scores.cpu(),
            "generator": self.generator.get_state(),
            "n_rejected": self.n_rejected,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (tensors stay on the CPU, see :meth:`to`)."""
        self.max_size = int(state["max_size"])
        self.size = int(state["size"])
        self.n_seen = int(state["n_seen"])
        self.n_rejected = int(state.get("n_rejected", 0))
        self.x, self.y, self.scores = state["x"], state["y"], state["scores"]
        t = state.get("t")
        if t is None and self.y is not None:
            t = torch.zeros_like(self.y)
        self.t = t
        self.src = torch.full((self.max_size,), -1, dtype=torch.long)
        self.src_idx = torch.zeros(self.max_size, dtype=torch.long)
        self.plain = torch.ones(self.max_size, dtype=torch.bool)
        self._sources, self._source_of = {}, {}
        self.generator.set_state(state["generator"])
        self._data.reset(self.max_size)

    def to(self, device: torch.device | str) -> OnlineBuffer:
        """Move the stored tensors to ``device`` in place (e.g. after :meth:`load_state_dict`).

        :param device: where the samples live (normally the strategy's device).
        :return: the buffer.
        """
        for name in self._tensor_names:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.to(device))
        self._data.reset(self.max_size)
        return self

    _tensor_names: tuple[str, ...] = ("x", "y", "t", "scores")


class ReservoirBuffer(OnlineBuffer):
    """``Reservoir``: reservoir sampling (Vitter's Algorithm R).

    Every sample of the stream is in the buffer with the same probability ``M / n_seen``.
    After :meth:`resize` grew the buffer, the next samples fill the free slots first.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator.
    """

    def _assign(self, rows: _Rows, model: nn.Module | None) -> Tensor:
        b, free = len(rows), self.max_size - self.size
        if free > 0 and self.n_seen > self.size:  # grown by resize(): fill the free slots
            first = min(free, b)
            slots = torch.full((b,), -1, dtype=torch.long)
            slots[:first] = torch.arange(self.size, self.size + first)
            if b > first:
                rest = reservoir_slots(self.n_seen + first, b - first, self.max_size,
                                       generator=self.generator)
                # a later sample may replace one placed just now; slots stay distinct
                taken = rest[rest >= 0]
                clash = torch.isin(slots[:first], taken)
                slots[:first][clash] = -1
                slots[first:] = rest
            return slots
        return reservoir_slots(self.n_seen, b, self.max_size, generator=self.generator)


class RandBuffer(OnlineBuffer):
    """``Rand`` (paper section 5.1): a uniform random ``M`` of buffer and batch.

    Every batch joins; when the buffer overflows, a uniform random ``M`` of buffer and
    batch is kept.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator.
    """

    def _assign(self, rows: _Rows, model: nn.Module | None) -> Tensor:
        return rand_slots(self.size, len(rows), self.max_size, generator=self.generator)


MemoryGrads = Literal["samples", "groups"]

Variant = Literal["paper", "authors"]
"""``"paper"``: a method as the paper writes it; ``"authors"``: as the authors' code does it.

The authors' code is what produced the paper's published numbers, so ``"authors"`` is the
default of every buffer that has both (GSS-Greedy, GSS-Clust, FSS-Clust).
"""


def _check_variant(variant: str) -> bool:
    """Return whether ``variant`` is ``"authors"``; raise on anything but the two names."""
    if variant not in ("paper", "authors"):
        raise ValueError(f"variant must be 'paper' or 'authors', got {variant!r}")
    return variant == "authors"


class GSSGreedyBuffer(OnlineBuffer):
    """``GSS-Greedy`` (paper Algorithm 2).

    Each new sample's score is its largest gradient cosine to ``n`` gradients drawn
    from the buffer, plus one (lines 5-7); a full buffer lets a sample in only when its
    score is below one, replacing a candidate drawn by score (lines 8-15, see
    :func:`~avalanche_gss.selection.greedy.greedy_slots`). Scoring runs with the model in
    eval mode and leaves no trace on it (parameters, ``.grad``, BatchNorm statistics and
    the train/eval mode are restored).

    ``variant="authors"`` (the default: it reproduces the paper's published numbers) is
    what the authors' code does: the ``n`` buffer gradients are each the mean gradient of
    ``group_size`` buffer samples, the gate is applied once to the batch's mean gradient,
    candidates are drawn with min-max normalised scores. ``variant="paper"`` is Algorithm
    2 as written. Each of the three can also be set alone with ``memory_grads``, ``gate``
    and ``candidate_draw``.

    :param max_size: number of slots ``M``.
    :param n: number of buffer gradients a new sample is compared with (paper ``n``, 10).
    :param variant: ``"authors"`` (default) or ``"paper"``: the defaults of the three
        options below.
    :param memory_grads: ``"samples"`` (paper: ``n`` per-sample gradients) or ``"groups"``
        (authors: ``n`` mean gradients of ``group_size`` samples each).
    :param gate: ``"sample"`` (paper: per-sample ``c < 1``) or ``"batch"`` (authors).
    :param candidate_draw: ``"proportional"`` (paper ``P(i) = C_i / sum C``) or
        ``"minmax"`` (authors).
    :param group_size: samples per buffer gradient with ``memory_grads="groups"`` (10).
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's generator.
    """

    scored = True  # keeps a score per stored sample (Algorithm 2's C_i)

    def __init__(
        self,
        max_size: int,
        *,
        n: int = 10,
        variant: Variant = "authors",
        memory_grads: MemoryGrads | None = None,
        gate: Gate | None = None,
        candidate_draw: CandidateDraw | None = None,
        group_size: int = 10,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(max_size, seed=seed)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        authors = _check_variant(variant)
        self.variant: Variant = variant
        self.n = n
        self.memory_grads: MemoryGrads = memory_grads or ("groups" if authors else "samples")
        self.gate: Gate = gate or ("batch" if authors else "sample")
        self.candidate_draw: CandidateDraw = candidate_draw or (
            "minmax" if authors else "proportional"
        )
        if self.memory_grads not in ("samples", "groups"):
            raise ValueError(f"memory_grads must be 'samples' or 'groups', got {memory_grads!r}")
        self.group_size = group_size
        self.loss_fn = loss_fn
        self.params = params

    def _assign(self, rows: _Rows, model: nn.Module | None) -> Tensor:
        if model is None:
            raise ValueError("GSS-Greedy scores samples by the model's gradients: pass model=")
        _require_gradients(model, self.params, "GSS-Greedy")
        x, y = rows.x, rows.y
        new_scores, batch_score = self._score(x, y, rows.t, model)
        self._new_scores = new_scores
        assert self.scores is not None or self.size == 0
        stored = self.scores[: self.size] if self.scores is not None else torch.zeros(0)
        finite = torch.isfinite(new_scores)  # (B,) a NaN/inf gradient gives a NaN score
        if not bool(finite.all()):
            bad = int((~finite).sum())
            self.n_rejected += bad
            warnings.warn(
                f"GSSGreedyBuffer: {bad} sample(s) with a non-finite gradient score not stored",
                RuntimeWarning,
                stacklevel=3,
            )
        slots = torch.full((len(y),), -1, dtype=torch.long)
        slots[finite] = greedy_slots(
            stored,
            new_scores[finite],
            self.max_size,
            generator=self.generator,
            candidate_draw=self.candidate_draw,
            gate=self.gate,
            batch_score=batch_score,
        )[0]
        return slots

    def _score(
        self, x: Tensor, y: Tensor, t: Tensor, model: nn.Module
    ) -> tuple[Tensor, float | None]:
        """Lines 5-7: scores ``c`` of the new samples (and of their mean, for the batch gate)."""
        b = len(y)
        groups = self.memory_grads == "groups"
        per_group = self.group_size if groups else 1
        k = min(self.size, self.n * per_group)
        if k == 0:
            return greedy_scores(torch.zeros(b, 0)), 1.0
        bx, by, bt = self.rows(self.sample_slots(k))
        xs = torch.cat([x.to(bx.device), bx])
        ys = torch.cat([y.to(by.device), by])
        ts = torch.cat([t.to(bt.device), bt]) if isinstance(model, MultiTaskModule) else None
        # The engine is state-neutral (parameters, .grad, BN statistics, train/eval mode).
        gram = sample_gram(model, xs, ys, loss_fn=self.loss_fn, params=self.params,
                           task_labels=ts).detach()
        # A non-finite gradient (NaN/inf loss) makes its sample's score NaN (not stored);
        # if a buffer gradient is not finite, every score is NaN.
        finite = torch.isfinite(gram.diagonal()).cpu()  # (B+k,)
        if not bool(finite[b:].all()):
            return torch.full((b,), float("nan")), float("nan")
        if not bool(finite.all()):  # scrub the bad rows so that they stay out of the sums
            ok = finite.to(gram.device)
            gram = gram.masked_fill(~(ok[:, None] & ok[None, :]), 0.0)
        if not groups and self.gate == "sample":  # Algorithm 2: per-sample cosines only
            scores = greedy_scores(cosine_from_gram(gram)[:b, b:].float().cpu())  # (B,)
            scores[~finite[:b]] = float("nan")
            return scores, None
        # Rows: the B new samples, their mean (batch gate), then the buffer gradients.
        n_mem = max(1, k // per_group) if groups else k
        member = (torch.arange(k) // per_group).clamp(max=n_mem - 1)  # group of each drawn row
        ids = torch.cat([torch.arange(b), member + b + 1])
        weights = torch.zeros(b + 1 + n_mem, b + k, dtype=gram.dtype)
        weights[ids, torch.arange(b + k)] = 1.0
        weights[b, :b] = finite[:b].to(gram.dtype)  # the batch mean of the finite gradients
        weights = weights / weights.sum(dim=1, keepdim=True).clamp_min(1.0)
        cos = cosine_from_gram(group_gram(gram, weights.to(gram.device)))  # (B+1+n, B+1+n)
        to_memory = cos[: b + 1, b + 1 :]  # (B+1, n_mem)
        scores = greedy_scores(to_memory.float().cpu())
        scores[: b][~finite[:b]] = float("nan")
        if not bool(finite[:b].any()):
            scores[b] = float("nan")
        return scores[:b], float(scores[b])


class RecentMergeBuffer(OnlineBuffer):
    """A buffer updated as in Algorithm 1, through a recent buffer ``M_r``.

    Incoming samples wait in the recent buffer; once it holds ``recent_size`` samples,
    one selection over ``M_b U M_r`` decides what the buffer keeps, and the recent
    buffer is emptied.

    Subclasses implement :meth:`_select`. Kept buffer samples stay in their slots; kept
    recent samples take the freed slots, then the free ones (through
    :meth:`OnlineBuffer._store`); a selection that keeps fewer samples than the buffer
    held moves the last kept ones down so that the buffer stays contiguous. Waiting
    samples are not replayed (:meth:`sample`, :meth:`tensors` and :attr:`buffer` see
    ``M_b`` only), as in Algorithm 1 and the authors' ``GSS_IQP_Rehearse.py``; they are
    part of :meth:`state_dict`.

    :param max_size: number of slots ``M`` (Alg. 1's ``M_b``).
    :param recent_size: size of the recent buffer ``M_r`` (100 in the authors' scripts).
    :param seed: seed of the buffer's generator.
    """

    def __init__(self, max_size: int, *, recent_size: int = 100, seed: int = 0) -> None:
        super().__init__(max_size, seed=seed)
        if int(recent_size) < 1:
            raise ValueError(f"recent_size must be >= 1, got {recent_size}")
        self.recent_size = int(recent_size)
        self.recent: _Rows | None = None  # R < recent_size waiting samples between calls

    @property
    def n_recent(self) -> int:
        """Number of samples waiting in the recent buffer."""
        return 0 if self.recent is None else len(self.recent)

    @property
    def recent_x(self) -> Tensor | None:
        """Inputs of the waiting samples, ``(R, *input_shape)`` (``None``: none wait)."""
        return None if self.recent is None else self.recent.x

    @property
    def recent_y(self) -> Tensor | None:
        """Labels of the waiting samples, ``(R,)`` (``None``: none wait)."""
        return None if self.recent is None else self.recent.y

    def _select(self, union: _Rows, n_stored: int, model: nn.Module | None) -> Tensor:
        """Return the ascending indices of ``M_b U M_r`` to keep, at most ``max_size``.

        :param union: the ``K`` samples of the union: the ``n_stored`` buffer samples
            first, then the recent ones (``union.x``, ``union.y``, ``union.t``).
        :param n_stored: number of buffer samples at the head of the union.
        :param model: the learner.
        """
        raise NotImplementedError

    def _referenced_sources(self) -> Tensor:
        stored = super()._referenced_sources()
        return stored if self.recent is None else torch.cat([stored, self.recent.src])

    def _offer(self, rows: _Rows, model: nn.Module | None) -> Tensor:
        """Queue a batch in the recent buffer; merge once ``recent_size`` samples wait.

        :return: ``(B,)`` slot of each sample when this batch triggered a merge, ``-1``
            where a sample was not kept or still waits.
        """
        ref = self.x if self.x is not None else self.recent_x
        finite = self._check_batch(rows.x, rows.y, ref)
        if len(rows) == 0:
            return torch.empty(0, dtype=torch.long)
        slots = torch.full((len(rows),), -1, dtype=torch.long)
        if finite is not None:  # samples with NaN/inf inputs are not offered
            rows = rows.take(finite)
        b = len(rows)
        if b == 0:
            return slots
        before = (self.recent, self.n_seen)
        rows = _Rows(rows.x.detach().clone(), rows.y.detach().clone().long(),
                     rows.t.detach().clone().long(), rows.src, rows.idx, rows.plain)
        self.recent = rows if self.recent is None else _Rows.cat(self.recent, rows)
        self.n_seen += b
        if self.n_recent < self.recent_size:
            return slots
        try:
            merged = self.merge_recent(model)[-b:]
        except Exception:  # a failed selection leaves the buffer as it was before the call
            self.recent, self.n_seen = before
            raise
        if finite is None:
            return merged
        slots[finite] = merged
        return slots

    def _usable(self, valid: Tensor, n_stored: int, what: str = "gradient") -> Tensor | None:
        """Indices of ``M_b U M_r`` a selection may use, given which ones it can score.

        Waiting samples whose gradient (or feature) is not finite are dropped; if a stored
        sample's is not finite (a diverged model), nothing is selected: ``None``, the
        buffer stays as it is and every waiting sample is dropped. A ``RuntimeWarning``
        says which, and :attr:`n_rejected` counts the dropped samples.

        :param valid: ``(K,)`` whether each union sample has a finite gradient/feature.
        :param n_stored: number of buffer samples at the head of the union.
        :param what: ``"gradient"`` or ``"feature"``, for the warning.
        """
        if bool(valid.all()):
            return torch.arange(len(valid))
        name = type(self).__name__
        if not bool(valid[:n_stored].all()):
            dropped = len(valid) - n_stored
            self.n_rejected += dropped
            warnings.warn(
                f"{name}: stored samples have a non-finite {what}; the buffer is left "
                f"unchanged and {dropped} waiting sample(s) are dropped",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        dropped = int((~valid).sum())
        self.n_rejected += dropped
        warnings.warn(
            f"{name}: {dropped} waiting sample(s) with a non-finite {what} not stored",
            RuntimeWarning,
            stacklevel=3,
        )
        return valid.nonzero().flatten()

    def _stored_rows(self) -> _Rows:
        assert self.x is not None and self.y is not None and self.t is not None
        n = self.size
        return _Rows(self.x[:n], self.y[:n], self.t[:n], self.src[:n], self.src_idx[:n],
                     self.plain[:n])

    def merge_recent(self, model: nn.Module | None = None) -> Tensor:
        """Run the selection on ``M_b U M_r`` now, whatever the recent buffer holds.

        :param model: the learner.
        :return: ``(R,)`` slot taken by each recent sample, ``-1`` where it was dropped.
        """
        recent = self.recent
        if recent is None:
            return torch.empty(0, dtype=torch.long)
        union = recent if self.x is None else _Rows.cat(self._stored_rows(), recent)
        n = self.size
        keep = self._select(union, n, model).cpu().long()
        if len(keep) > self.max_size or (len(keep) > 1 and not bool((keep[1:] > keep[:-1]).all())):
            raise RuntimeError("a selection returned unsorted indices or more than max_size")
        new = keep[keep >= n] - n
        slots = torch.full((len(recent),), -1, dtype=torch.long)
        slots[new] = self._replace(keep[keep < n], recent.take(new))
        self.recent = None
        return slots

    def _replace(self, keep_stored: Tensor, new_rows: _Rows) -> Tensor:
        """Keep the stored slots ``keep_stored``, drop the others, store the new samples.

        :return: ``(len(new_rows),)`` slot of each new sample.
        """
        new_size = len(keep_stored) + len(new_rows)
        stay = keep_stored[keep_stored < new_size]
        movers = keep_stored[keep_stored >= new_size]  # only when the buffer shrinks
        occupied = torch.zeros(new_size, dtype=torch.bool)
        occupied[stay] = True
        vacant = (~occupied).nonzero().flatten()  # dropped slots, then the free ones
        if len(movers) and self.x is not None:
            dest, vacant = vacant[: len(movers)], vacant[len(movers) :]
            dev = self.x.device
            for name in ("x", "y", "t", "scores"):
                column = getattr(self, name)
                if column is not None:
                    column[dest.to(dev)] = column[movers.to(dev)]
            for name in ("src", "src_idx", "plain"):
                column = getattr(self, name)
                column[dest] = column[movers]
        self.size = min(self.size, new_size)  # the slots past the kept ones count as free
        if len(movers):
            self._data.reset(self.max_size)
        self._store(new_rows, vacant, torch.zeros(len(new_rows)))
        self.size = new_size
        return vacant

    def state_dict(self) -> dict[str, Any]:
        """:meth:`OnlineBuffer.state_dict` plus the waiting samples."""
        state = super().state_dict()
        recent = self.recent
        state["recent_x"] = None if recent is None else recent.x.cpu()
        state["recent_y"] = None if recent is None else recent.y.cpu()
        state["recent_t"] = None if recent is None else recent.t.cpu()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        rx, ry = state.get("recent_x"), state.get("recent_y")
        if rx is None or ry is None:
            self.recent = None
            return
        rt = state.get("recent_t")
        b = len(ry)
        self.recent = _Rows(rx, ry, torch.zeros_like(ry) if rt is None else rt,
                            torch.full((b,), -1, dtype=torch.long),
                            torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool))

    def to(self, device: torch.device | str) -> OnlineBuffer:
        """Move the stored and the waiting tensors to ``device`` in place.

        :param device: where the samples live (normally the strategy's device).
        :return: the buffer.
        """
        super().to(device)
        if self.recent is not None:
            self.recent = self.recent.to(device)
        return self


def _model_device(model: nn.Module) -> torch.device | None:
    param = next(model.parameters(), None)
    return None if param is None else param.device


def _require_gradients(model: nn.Module, params: list[nn.Parameter] | None, method: str) -> None:
    """Raise if there is no parameter to take gradients with (every score would be 0)."""
    if params is None and not any(p.requires_grad for p in model.parameters()):
        raise ValueError(
            f"{method} scores samples by their loss gradients, but {type(model).__name__} "
            "has no trainable parameter; pass params= or use a policy that needs none "
            "(Reservoir, Rand, FSS-Clust)"
        )
    if params is not None and len(params) == 0:
        raise ValueError(f"{method}: params= is empty, there is no gradient to compare")


IQPSolver = Literal["fast", "exact"]


class GSSIQPBuffer(RecentMergeBuffer):
    """``GSS-IQP`` (paper Algorithm 1, appendix B).

    When the recent buffer holds ``recent_size`` samples and the union ``M_b U M_r``
    exceeds ``M``, the cosine Gram of the union's per-sample loss gradients (the
    gradient engine, model in eval mode, state untouched) goes to
    :func:`~avalanche_gss.selection.iqp.select_iqp`, which keeps the ``M`` samples
    minimising the surrogate ``sum_{i,j in S} cos(g_i, g_j)``; while the union fits,
    everything is kept and nothing is computed. A failing exact solver falls back to the
    fast one with a warning, so a selection always keeps exactly ``M`` samples.

    :param max_size: number of slots ``M`` (Alg. 1's ``M_b``).
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param solver: ``"fast"`` (swap local search) or ``"exact"`` (SCIP under
        ``time_limit``), see :func:`~avalanche_gss.selection.iqp.select_iqp`.
    :param time_limit: SCIP's time limit in seconds per selection (exact solver).
    :param restarts: restarts of the fast solver.
    :param slack: gradients with norm ``<= slack`` have no usable direction and are left
        out of the IQP (kept only if too few others remain), as in the authors' code;
        ``0`` leaves out exactly-zero gradients, ``None`` keeps every candidate.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's generator (also the fast solver's restarts).
    """

    def __init__(
        self,
        max_size: int,
        *,
        recent_size: int = 100,
        solver: IQPSolver = "fast",
        time_limit: float = 60.0,
        restarts: int = 16,
        slack: float | None = 0.0,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(max_size, recent_size=recent_size, seed=seed)
        if solver not in ("fast", "exact"):
            raise ValueError(f"solver must be 'fast' or 'exact', got {solver!r}")
        if not time_limit > 0:
            raise ValueError(f"time_limit must be positive, got {time_limit}")
        if restarts < 0:
            raise ValueError(f"restarts must be >= 0, got {restarts}")
        self.solver: IQPSolver = solver
        self.time_limit = float(time_limit)
        self.restarts = restarts
        self.slack = slack
        self.loss_fn = loss_fn
        self.params = params
        self.last_result: IQPResult | None = None

    @property
    def last_surrogate(self) -> float | None:
        """Surrogate ``x^T G x`` of the last selection (``None`` before the first one)."""
        return None if self.last_result is None else self.last_result.objective

    def _select(self, union: _Rows, n_stored: int, model: nn.Module | None) -> Tensor:
        x, y = union.x, union.y
        if len(y) <= self.max_size:
            return torch.arange(len(y))
        if model is None:
            raise ValueError("GSS-IQP selects by the model's gradients: pass model=")
        _require_gradients(model, self.params, "GSS-IQP")
        dev = _model_device(model) or x.device
        # The engine is state-neutral (parameters, .grad, BN statistics, train/eval mode).
        gram = sample_gram(
            model, x.to(dev), y.to(dev), loss_fn=self.loss_fn, params=self.params,
            task_labels=_labels_on(model, union.t, dev),
        ).detach()  # (K, K)
        usable = self._usable(torch.isfinite(gram.diagonal()).cpu(), n_stored)  # (K',)
        if usable is None:
            return torch.arange(n_stored)
        if len(usable) == len(y):
            return self._solve(gram)
        if len(usable) <= self.max_size:
            return usable
        idx = usable.to(dev)
        return usable[self._solve(gram[idx[:, None], idx[None, :]])]  # (K', K') sub-Gram

    def _solve(self, gram: Tensor) -> Tensor:
        """Keep ``max_size`` of the samples whose gradient Gram is ``gram`` (appendix B)."""
        cos = cosine_from_gram(gram).cpu()  # (K, K), Alg. 1 line 5's matrix
        invalid = None
        if self.slack is not None:
            invalid = gram.diagonal().clamp_min(0).sqrt().cpu() <= self.slack  # (K,)
            invalid = invalid if bool(invalid.any()) else None
        self.last_result = select_iqp(
            cos, self.max_size, solver=self.solver, time_limit=self.time_limit,
            restarts=self.restarts, generator=self.generator, invalid=invalid,
        )
        return self.last_result.indices

    def state_dict(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer.state_dict` plus the last selection's outcome."""
        state = super().state_dict()
        state["last_result"] = None if self.last_result is None else asdict(self.last_result)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        last = state.get("last_result")
        self.last_result = None if last is None else IQPResult(**last)


ClustFeatures = Literal["penultimate", "logits"]


class _ClustBuffer(RecentMergeBuffer):
    """The doubling algorithm over ``M_b U M_r`` at each merge (GSS-Clust, FSS-Clust).

    The buffer samples are the cluster centres; their distances are recomputed with the
    current model at each merge. Stored centres the model no longer tells apart
    (distance 0) are merged first, since the doubling algorithm needs distinct centres.
    """

    def __init__(
        self, max_size: int, *, recent_size: int = 100, growth: float = 2.0, seed: int = 0
    ) -> None:
        super().__init__(max_size, recent_size=recent_size, seed=seed)
        self.clustering = DoublingClustering(self.max_size, growth=growth, seed=seed)

    _measures = "gradient"  # what the distances are between, for warnings

    def _distances(self, union: _Rows, model: nn.Module) -> tuple[Tensor, Tensor]:
        """Return the union's ``(K, K)`` distances and its ``(K,)`` finiteness mask.

        The mask is False for samples whose gradient or feature is not finite (their
        distances are not either).
        """
        raise NotImplementedError

    def _select(self, union: _Rows, n_stored: int, model: nn.Module | None) -> Tensor:
        if model is None:
            raise ValueError(f"{type(self).__name__} measures distances with the model: "
                             "pass model=")
        dist, valid = self._distances(union, model)  # (K, K), (K,)
        usable = self._usable(valid.cpu(), n_stored, self._measures)  # (K',)
        if usable is None:
            return torch.arange(n_stored)
        dist = dist.detach().cpu()[usable[:, None], usable[None, :]]  # (K', K')
        alive = torch.ones(len(usable), dtype=torch.bool)
        coincide = dist[:n_stored, :n_stored] <= 0  # (n, n)
        coincide.fill_diagonal_(False)
        if bool(coincide.any()):  # keep the first of each group of coinciding centres
            for i in range(n_stored):
                if alive[i]:
                    alive[i + 1 : n_stored] &= ~coincide[i, i + 1 :]
        idx = alive.nonzero().flatten()
        keep = self.clustering.update(dist[idx[:, None], idx[None, :]], int(alive[:n_stored].sum()))
        return usable[idx[keep]]

    def resize(self, strategy: Any, new_size: int) -> None:
        """Change ``max_size`` and the clustering's capacity with it."""
        super().resize(strategy, new_size)
        self.clustering.capacity = self.max_size

    def state_dict(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer.state_dict` plus the clustering's threshold and RNG."""
        state = super().state_dict()
        state["clustering"] = self.clustering.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.clustering.capacity = self.max_size
        self.clustering.load_state_dict(state["clustering"])


class GSSClustBuffer(_ClustBuffer):
    """``GSS-Clust`` (paper section 4.1): online clustering of normalised loss gradients.

    Every ``recent_size`` samples, the Euclidean distances ``||u_i - u_j||`` between the
    unit gradients of ``M_b U M_r`` (from the gradient engine's cosine Gram, model in
    eval mode, state untouched) feed
    :class:`~avalanche_gss.selection.clust.DoublingClustering`, which keeps at most ``M``
    cluster centres (Charikar et al.'s doubling algorithm); the centres are stored.

    The threshold only grows, and these distances are at most 2: with ``growth=2`` it
    soon exceeds most of them and the buffer shrinks to a few centres (disjoint MNIST,
    5 x 400 digits, ``M = 300``, one seed: 1 centre left, 28% accuracy; ``growth=1.01``:
    282 centres, 82%; ``Rand`` 57%, ``GSS-IQP`` 80%).

    :param max_size: number of slots ``M``.
    :param variant: ``"authors"`` (default: it reproduces the paper's published numbers)
        grows the threshold by 1.01 per merge round, as the authors' ``GSS_Clust.py``;
        ``"paper"`` doubles it (the doubling algorithm as the paper writes it).
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param growth: threshold factor per merge round; ``None``: by ``variant``.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's and the clustering's generators.
    """

    def __init__(
        self,
        max_size: int,
        *,
        variant: Variant = "authors",
        recent_size: int = 100,
        growth: float | None = None,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        authors = _check_variant(variant)
        growth = growth if growth is not None else (1.01 if authors else 2.0)
        super().__init__(max_size, recent_size=recent_size, growth=growth, seed=seed)
        self.variant: Variant = variant
        self.loss_fn = loss_fn
        self.params = params

    def _distances(self, union: _Rows, model: nn.Module) -> tuple[Tensor, Tensor]:
        _require_gradients(model, self.params, "GSS-Clust")
        dev = _model_device(model) or union.x.device
        gram = sample_gram(model, union.x.to(dev), union.y.to(dev), loss_fn=self.loss_fn,
                           params=self.params, task_labels=_labels_on(model, union.t, dev),
                           ).detach()  # (K, K), state-neutral engine
        valid = torch.isfinite(gram.diagonal())  # (K,)
        return gradient_distance(cosine_from_gram(gram)), valid  # (K, K), (K,)


class FSSClustBuffer(_ClustBuffer):
    """``FSS-Clust`` (paper section 4.1): online clustering of the samples' features.

    Every ``recent_size`` samples, the distances between the features of
    ``M_b U M_r`` (model in eval mode, no gradient, state preserved) feed
    :class:`~avalanche_gss.selection.clust.DoublingClustering`, which keeps at most ``M``
    cluster centres (Charikar et al.'s doubling algorithm); the centres are stored.
    As the threshold only grows, the buffer may hold far fewer than ``M`` centres
    (disjoint MNIST, 5 x 400 digits, ``M = 300``: 48 with the paper's Euclidean
    distances between penultimate features, 183 with the authors' squared distances
    between logits).

    :param max_size: number of slots ``M``.
    :param variant: ``"authors"`` (default: it reproduces the paper's published numbers)
        clusters squared Euclidean distances between logits, as the authors'
        ``FSS_Clust.py``; ``"paper"`` Euclidean distances between penultimate features.
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param features: ``"penultimate"`` (paper: "the last layer before classification",
        the input of the model's classifier, see :func:`model_features`) or ``"logits"``
        (the authors'); ``None``: by ``variant``.
    :param squared: squared Euclidean distances, as the authors' code (not a metric: the
        clustering's radius bound no longer holds); ``None``: by ``variant``.
    :param growth: threshold factor per merge round (2: doubling, also the authors').
    :param seed: seed of the buffer's and the clustering's generators.
    """

    def __init__(
        self,
        max_size: int,
        *,
        variant: Variant = "authors",
        recent_size: int = 100,
        features: ClustFeatures | None = None,
        squared: bool | None = None,
        growth: float = 2.0,
        seed: int = 0,
    ) -> None:
        authors = _check_variant(variant)
        features = features if features is not None else ("logits" if authors else "penultimate")
        squared = squared if squared is not None else authors
        super().__init__(max_size, recent_size=recent_size, growth=growth, seed=seed)
        self.variant: Variant = variant
        if features not in ("penultimate", "logits"):
            raise ValueError(f"features must be 'penultimate' or 'logits', got {features!r}")
        self.features: ClustFeatures = features
        self.squared = squared

    _measures = "feature"

    def _distances(self, union: _Rows, model: nn.Module) -> tuple[Tensor, Tensor]:
        dev = _model_device(model) or union.x.device
        out = model_features(model, union.x.to(dev), union.t.to(dev),
                             penultimate=self.features == "penultimate")  # (K, D)
        valid = torch.isfinite(out).all(dim=1)  # (K,)
        return feature_distance(out, squared=self.squared), valid  # (K, K), (K,)


def _labels_on(model: nn.Module, t: Tensor, device: torch.device | str) -> Tensor | None:
    labels = task_labels_for(model, t)
    return None if labels is None else labels.to(device)


def _classifier(model: nn.Module) -> nn.Module:
    """The module whose input is the model's feature: ``model.classifier``, or its last Linear."""
    head = getattr(model, "classifier", None)
    if isinstance(head, nn.Module):
        return head
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if linears:
        return linears[-1]
    raise TypeError(
        f"{type(model).__name__} has no `classifier` module and no nn.Linear, so the "
        "features before its classifier cannot be found; name the last layer `classifier` "
        "or use features='logits'"
    )


def model_features(
    model: nn.Module, x: Tensor, t: Tensor | None = None, *, penultimate: bool = True
) -> Tensor:
    """The features of ``x`` before the model's classifier (or its logits), ``(N, D)``.

    The features are the input of ``model.classifier`` (or of the model's last
    ``nn.Linear``), captured while the model runs its own ``forward``, so any model works
    whatever its input shape (Avalanche's ``SimpleMLP`` flattens inside ``forward``). A
    ``MultiTaskModule`` is called once per task label, as ``model(x, t)``. Eval mode, no
    gradient; the model's modes are restored.

    :param model: the network.
    :param x: ``(N, ...)`` inputs.
    :param t: ``(N,)`` task labels (used for a ``MultiTaskModule`` only).
    :param penultimate: the classifier's input (True) or the model's output (False).
    :raises TypeError: the classifier cannot be found, or it is called other than once per
        forward on the whole batch.
    """
    labels = None if t is None else task_labels_for(model, t)
    groups = [torch.arange(len(x), device=x.device)] if labels is None else [
        (labels == v).nonzero().flatten() for v in torch.unique(labels)]
    head = _classifier(model) if penultimate else None
    parts: list[Tensor] = []
    seen: list[Tensor] = []  # the classifier's input at each call
    with eval_mode(model), torch.no_grad():
        for rows in groups:
            seen.clear()
            handle = None if head is None else head.register_forward_pre_hook(
                lambda _m, args: seen.append(args[0]))
            try:
                if labels is None:
                    out = model(x)
                else:
                    out = model(x[rows], labels[rows])
            finally:
                if handle is not None:
                    handle.remove()
            if head is not None:
                if len(seen) != 1 or seen[0].shape[0] != len(rows):
                    raise TypeError(
                        f"the classifier {type(head).__name__} of {type(model).__name__} ran "
                        f"{len(seen)} time(s) on other rows than the batch; FSS-Clust needs it "
                        "to run once on the whole batch (or use features='logits')")
                out = seen[0]
            parts.append(out.flatten(1))
    if len(parts) == 1:
        return parts[0]
    feats = torch.empty(len(x), parts[0].shape[1], dtype=parts[0].dtype, device=x.device)
    for rows, part in zip(groups, parts, strict=True):
        feats[rows] = part
    return feats
