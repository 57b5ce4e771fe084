"""The storage-policy template: :class:`OnlineBuffer` and its one decision, ``_assign``.

:class:`OnlineBuffer` owns the storage and its invariants (never more than ``max_size``
samples, filled contiguously from slot 0), the validation of incoming batches and the
Avalanche storage-policy interface. A policy contributes one decision,
:meth:`OnlineBuffer._assign`: which slot each new sample takes, and, for policies that
score samples, the new samples' scores. The decisions themselves are the pure tensor code
of :mod:`avalanche_gss.selection`.

Every buffer is an Avalanche storage policy in full: give it to Avalanche's
``ReplayPlugin`` (or to :class:`~avalanche_gss.training.OnlineRehearsalPlugin`) in any
strategy. What a policy reads is here and in :class:`~avalanche_gss.buffers.stored.StoredSamples`
(``size``, ``max_size``, ``rows``, ``scores``): :class:`SlotBuffer` adds the buffer's
generator, counters, resizing and state to the stored samples, :class:`OnlineBuffer` how
samples come in. The samples live in a :class:`~avalanche_gss.buffers.columns.SlotStore`
(the tensors the policy scored, as the model was trained on them, which the fast replay
path uses when the stream's datasets have no transform), their source datasets in a
:class:`~avalanche_gss.buffers.sources.ProvenanceIndex`.

Bad input never reaches the storage: labels must be integers in ``[0, label_bound)`` and
inputs must have the stored inputs' shape (``ValueError``); samples with a NaN or infinite
input value are not stored (a ``RuntimeWarning`` says how many). ``n_rejected`` counts
them, with the samples a gradient-scored policy refuses because their gradient is not
finite. A call that raises, whatever the reason (bad input, a policy or a model that
fails, memory), leaves the buffer exactly as it was: samples, recent buffer, counters and
every generator's state (:meth:`SlotBuffer._snapshot`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from typing_extensions import Self  # typing.Self is Python 3.11+

from avalanche_gss.buffers.checks import Checked, check_batch, reject
from avalanche_gss.buffers.columns import check_size
from avalanche_gss.buffers.feed import Samples, batches, dataset_samples, experience_samples
from avalanche_gss.buffers.rows import Rows, model_device
from avalanche_gss.buffers.sources import ProvenanceIndex
from avalanche_gss.buffers.stored import StoredSamples

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["OnlineBuffer", "SlotBuffer", "Checked", "check_batch", "reject"]


class SlotBuffer(StoredSamples):
    """Stored samples with the buffer's generator and counters, resizable and saved whole.

    :param max_size: number of slots ``M``, an integer >= 1 whose columns fit in the
        memory available (else a ``MemoryError`` says how many bytes they need).
    :param seed: seed of the buffer's own ``torch.Generator`` (saved in :meth:`state_dict`).
    """

    def __init__(self, max_size: int, *, seed: int = 0) -> None:
        super().__init__(max_size)
        self.generator = torch.Generator().manual_seed(seed)
        self.n_seen = 0
        self.n_rejected = 0  # samples refused for a non-finite input or gradient
        self.last_slots: Tensor | None = None  # slots taken by the last batch (-1: not stored)
        self.last_scores: Tensor | None = None  # scores of the last batch's finite samples

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

    def _kept_on_shrink(self, new_size: int) -> Tensor:
        """The slots :meth:`resize` keeps when ``new_size < size``, in increasing order.

        A uniform random subset; a policy with its own notion of which samples to give up
        first overrides this.
        """
        return torch.randperm(self.size, generator=self.generator)[:new_size].sort().values

    def resize(self, strategy: Any, new_size: int) -> None:
        """Change ``max_size``, mid-run if need be.

        Shrinking keeps a uniform random subset of the samples (:meth:`_kept_on_shrink`);
        growing keeps every sample, and the next incoming samples fill the free slots before
        the policy decides again. The new columns are all allocated before any is replaced:
        a resize that raises changes nothing.

        :param strategy: the strategy (unused; Avalanche's signature).
        :param new_size: the new ``max_size``, an integer >= 1.
        :raises ValueError: ``new_size`` is not an integer >= 1.
        :raises MemoryError: the columns of ``new_size`` slots do not fit in the memory
            available (:func:`~avalanche_gss.buffers.columns.available_bytes`) or could not
            be allocated.
        """
        new_size = check_size(new_size)
        columns = self.store.allocate(new_size)
        drawn = self.generator.get_state()
        try:
            keep = torch.arange(self.size)
            if self.size > new_size:
                keep = self._kept_on_shrink(new_size)
            self.store.copy_kept(columns, keep)
            self.sources.reset(new_size)
        except BaseException:
            self.generator.set_state(drawn)
            self.sources.reset(self.max_size)
            raise
        self.store.replace(columns, len(keep))

    def report(self) -> dict[str, Any]:
        """What a run of this policy reports beyond accuracy and class counts (its extras).

        None by default; a policy overrides it with its own facts (GSS-IQP: its surrogate).
        """
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: samples, scores, counters and the RNG state.

        Tensors and plain values only. The source datasets are not part of it: after
        :meth:`load_state_dict` the samples are served from the stored tensors.
        """
        return {"max_size": self.max_size, "size": self.size, "n_seen": self.n_seen,
                **self.store.state_dict(), "generator": self.generator.get_state(),
                "n_rejected": self.n_rejected}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (tensors stay on the CPU, see :meth:`to`)."""
        self.store.load_state_dict(state)
        self.sources = ProvenanceIndex(self.max_size)
        self.n_seen = int(state["n_seen"])
        self.n_rejected = int(state["n_rejected"])
        self.generator.set_state(state["generator"])

    def to(self, device: torch.device | str) -> Self:
        """Move the stored tensors to ``device`` in place (e.g. after :meth:`load_state_dict`).

        :param device: where the samples live (normally the strategy's device).
        :return: the buffer.
        """
        self.store.to(device)
        self.sources.reset(self.max_size)
        return self

    def _snapshot(self) -> dict[str, Any]:
        """What a call may change before it raises: the attributes and the generators' states.

        Attributes are copied shallowly (the buffer's and the store's): what a call changes
        it replaces (counters, the recent buffer, per-class tensors), except the slot
        columns, written in place last, once nothing can fail. A policy with state kept in
        place elsewhere adds it here and restores it in :meth:`_rollback`.
        """
        attrs = dict(self.__dict__)
        return {"attrs": attrs, "store": self.store.snapshot(),
                "generators": {name: value.get_state() for name, value in attrs.items()
                               if isinstance(value, torch.Generator)}}

    def _rollback(self, snapshot: dict[str, Any]) -> None:
        """Restore what :meth:`_snapshot` saved."""
        attrs = snapshot["attrs"]
        for name in [name for name in self.__dict__ if name not in attrs]:
            delattr(self, name)
        self.__dict__.update(attrs)
        self.store.restore(snapshot["store"])
        for name, state in snapshot["generators"].items():
            getattr(self, name).set_state(state)
        self.sources.reset(self.max_size)  # the dataset view is rebuilt from the slots

    def _referenced_sources(self) -> Tensor:
        """Source ids still referenced by a stored (or waiting) sample."""
        return self.store.src[: self.size]

    def _input_like(self) -> Tensor | None:
        """Stored inputs whose shape an incoming batch must match (``None``: any)."""
        return self.x

    def _write(self, rows: Rows, target: Tensor, scores: Tensor | None) -> None:
        """Write ``rows`` into the CPU slot indices ``target`` (no check) and index them."""
        self.store.write(rows, target, scores)
        self.sources.stored(rows.src, rows.idx, target, self.max_size)

    def _move(self, dest: Tensor, source: Tensor) -> None:
        """Copy the samples of slots ``source`` into slots ``dest`` (CPU indices)."""
        self.store.move(dest, source)
        self.sources.reset(self.max_size)


class OnlineBuffer(SlotBuffer):
    """A fixed-size replay buffer, updated one incoming batch at a time.

    Subclasses implement :meth:`_assign`. The buffer sees each batch once, through
    :meth:`post_adapt` (Avalanche's storage-policy hook: the plugin calls it after the
    model learnt the experience), :meth:`update_from_dataset` or :meth:`add` (tensors).
    After each batch, :attr:`last_slots` holds the slot each sample took (``-1``: not
    stored) and, for a policy that scores samples (:attr:`scored`), :attr:`last_scores`
    the scores of the samples the policy was offered (those with finite inputs). What it
    refuses, and how a failed call leaves it as it was: see the module's docstring.

    :param max_size: number of slots ``M``, an integer >= 1 whose columns fit in the
        memory available (else a ``MemoryError`` says how many bytes they need).
    :param seed: seed of the buffer's own ``torch.Generator`` (saved in :meth:`state_dict`).
    """

    scored = False
    """Whether the policy keeps a meaningful score per stored sample (:attr:`scores`)."""
    label_bound = 2**31
    """Labels must be below it (and >= 0); a policy whose state is indexed by label lowers it."""
    dataset_batch_size = 10
    """Samples offered at once by :meth:`update_from_dataset` (the paper's batch size)."""
    model_states: tuple[str, ...] = ()
    """The entries of :meth:`state_dict` that are a ``state_dict`` of a network of the
    learner's architecture (CSReL's coreset model): a checkpoint's are checked against the
    learner's tensors (names, shapes, kinds of dtype) before it is loaded."""

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, Tensor | None]:
        """The policy's decision: the slot of each new sample, and their scores.

        :param rows: the ``B`` incoming samples (validated, finite inputs).
        :param model: the learner (``None`` when the caller gave none).
        :return: ``(slots, scores)``: ``(B,)`` int64 slots, ``-1`` for a sample not
            stored, distinct; slots ``< size`` overwrite stored samples, the others must
            continue the filled range without holes. ``scores``: ``(B,)`` scores of the
            new samples for a policy that keeps them (:attr:`scored`), else ``None``.
        """
        raise NotImplementedError

    def _admit(self, rows: Rows, model: nn.Module | None) -> Tensor:
        """Place a validated batch: the policy decides, the store checks and writes.

        :raises RuntimeError: the policy answered another number of slots (or of scores)
            than the batch has samples, or broke the store's invariants
            (:meth:`~avalanche_gss.buffers.columns.SlotStore.check_slots`).
        """
        slots, scores = self._assign(rows, model)
        b = len(rows)
        for what, answer in (("slots", slots), ("scores", scores)):
            if answer is not None and tuple(answer.shape) != (b,):  # shapes: no device read
                raise RuntimeError(f"{type(self).__name__}._assign answered {what} of shape "
                                   f"{tuple(answer.shape)} for {b} samples (one per sample)")
        self.last_scores = scores
        slots = slots.cpu()
        keep, target, new_size = self.store.check_slots(slots)  # the slot map's invariants
        if len(keep):  # (once the buffer is full, most batches store no sample: no write)
            self._write(rows.take(keep) if len(keep) < len(rows) else rows, target,
                        None if scores is None
                        else scores[keep.to(scores.device, non_blocking=True)])
        self.store.size = new_size
        self.n_seen += len(rows)
        return slots

    def add(self, x: Tensor, y: Tensor, model: nn.Module | None = None, *,
            task_labels: Tensor | int = 0) -> Tensor:
        """Offer a batch of tensors to the buffer (no source dataset: :attr:`buffer` reads them).

        :param x: ``(B, *input_shape)`` inputs.
        :param y: ``(B,)`` integer labels.
        :param model: the learner, for policies that score samples by its gradients.
        :param task_labels: ``(B,)`` task labels, or one for the whole batch.
        :return: ``(B,)`` slot taken by each sample, ``-1`` where it was not stored.
        """
        b = int(y.shape[0]) if y.dim() else 0
        slots = self._offer(Rows.of_tensors(x, y, _task_tensor(task_labels, b, y.device)), model)
        self.last_slots = slots
        return slots

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
        self._offer_source(dataset_samples(new_data, batch_size), model, device)

    def post_adapt(self, agent_state: SupervisedTemplate, exp: Any) -> None:
        """Avalanche's hook: offer the experience's samples, scored with the current model.

        The strategy gives the model (``agent_state.model``, for the scored policies) and
        the device to score on (``agent_state.device``); nothing else is read there.
        """
        model = getattr(agent_state, "model", None)
        device = getattr(agent_state, "device", None)
        self._offer_source(experience_samples(exp),
                           model if isinstance(model, nn.Module) else None,
                           device if isinstance(device, (str, torch.device)) else None)

    def update(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Offer ``strategy.experience`` as :meth:`post_adapt`, without Avalanche's warning.

        ``ReplayPlugin`` still calls this method, deprecated in Avalanche's base class.
        """
        self.post_adapt(strategy, strategy.experience)

    def _offer_source(self, samples: Samples, model: nn.Module | None,
                      device: torch.device | str | None) -> None:
        step = int(samples.batch_size or self.dataset_batch_size)
        if step < 1:
            raise ValueError(f"batch_size must be >= 1, got {samples.batch_size}")
        if device is None and model is not None:
            device = model_device(model)
        sid = self.sources.register(samples.data)
        try:
            for rows, hx, hy in batches(samples, sid, step, device):
                checked = check_batch(self, hx, hy, self._input_like())
                self.last_slots = self._offer(rows, model, checked, stacklevel=5)
        finally:  # a refused batch leaves the batches before it stored, and no stale source
            self.sources.prune(self._referenced_sources)

    def _offer(self, rows: Rows, model: nn.Module | None, checked: Checked | None = None, *,
               stacklevel: int = 4) -> Tensor:
        """Validate a batch, drop non-finite samples, let the policy place the rest.

        :param checked: what :func:`check_batch` returned for the batch when the caller
            validated it (on the host, before moving it); ``None``: validate here.
        :param stacklevel: the caller's ``stacklevel`` for the warning about non-finite inputs.
        """
        if checked is None:
            checked = check_batch(self, rows.x, rows.y, self._input_like())
        if len(rows) == 0:
            return torch.empty(0, dtype=torch.long)
        before = self._snapshot()  # anything that raises from here on changes nothing
        try:
            self._check_labels(rows, checked.high, model)
            finite = checked.finite
            if finite is None:  # every input is finite (the usual case)
                slots = self._admit(rows, model)
            else:  # samples with NaN/inf inputs are not offered
                slots = torch.full((len(rows),), -1, dtype=torch.long)
                bad = int((~finite).sum())
                reject(self, bad, f"{bad} sample(s) with NaN or infinite inputs not stored",
                       stacklevel=stacklevel + 1)
                rows = rows.take(finite)
                if len(rows):
                    slots[finite] = self._admit(rows, model)
        except BaseException:
            self._rollback(before)
            raise
        return slots

    def _check_labels(self, rows: Rows, high: int, model: nn.Module | None) -> None:
        """Refuse (``ValueError``) a label of ``rows`` the policy cannot use with ``model``.

        None here; ``high`` is the batch's largest label. Runs before anything changes.
        """


def _task_tensor(task_labels: Tensor | int, b: int, device: torch.device) -> Tensor:
    if isinstance(task_labels, Tensor):
        if task_labels.shape != (b,):
            raise ValueError(f"task_labels must have shape ({b},), got "
                             f"{tuple(task_labels.shape)}")
        return task_labels.to(device, torch.long)
    return torch.full((b,), int(task_labels), dtype=torch.long, device=device)
