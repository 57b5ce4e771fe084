"""The storage-policy template: :class:`OnlineBuffer` and its one decision, ``_assign``.

:class:`OnlineBuffer` owns the storage and its invariants (never more than ``max_size``
samples, filled contiguously from slot 0), the validation of incoming batches and the
Avalanche storage-policy interface. A policy contributes one decision,
:meth:`OnlineBuffer._assign`: which slot each new sample takes, and, for policies that
score samples, the new samples' scores. The decisions themselves are the pure tensor code
of :mod:`avalanche_gss.selection`.

Every buffer is an Avalanche storage policy in full: give it to Avalanche's
``ReplayPlugin`` (or to :class:`~avalanche_gss.training.OnlineRehearsalPlugin`) in any
strategy. Beside the samples' provenance (:mod:`~avalanche_gss.buffers.sources`) the buffer
keeps the tensors the policy scored (the samples as the model was trained on them), which
the fast replay path uses when the stream's datasets have no transform.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from avalanche.benchmarks import CLExperience
from avalanche.training.storage_policy import ExemplarsBuffer
from torch import Tensor, nn

from avalanche_gss._avalanche import has_transforms, reading_copy
from avalanche_gss.benchmarks.online import dataset_tensors
from avalanche_gss.buffers.columns import ReadsMixin, check_size
from avalanche_gss.buffers.rows import Rows, model_device

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["OnlineBuffer", "Checked", "check_batch", "reject"]


class _DatasetFeed:
    """How samples reach a buffer from datasets and Avalanche experiences.

    Each batch of them goes to :meth:`OnlineBuffer._offer` with its provenance.
    """

    dataset_batch_size = 10
    """Samples offered at once by :meth:`update_from_dataset` (the paper's batch size)."""

    if TYPE_CHECKING:
        last_slots: Tensor | None

        def _register(self, data: Any) -> int: ...

        def _prune_sources(self) -> None: ...

        def _offer(self, rows: Rows, model: nn.Module | None,
                   checked: Checked | None = None, *, stacklevel: int = 4) -> Tensor: ...

        def _input_like(self) -> Tensor | None: ...

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
        x, y, t = dataset_tensors(reading_copy(new_data))
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
            device = model_device(model)
        hx, hy = x, y  # validated where they are (the host, for a stream's data): no sync
        if device is not None:
            x, y, t = (v.to(device, non_blocking=True) for v in (x, y, t))
        sid = self._register(data)
        n = len(y)
        try:
            for start in range(0, n, step):
                end = min(start + step, n)
                rows = Rows(x[start:end], y[start:end], t[start:end],
                            torch.full((end - start,), sid, dtype=torch.long),
                            torch.arange(start, end), torch.full((end - start,), plain))
                checked = check_batch(self, hx[start:end], hy[start:end],  # type: ignore[arg-type]
                                      self._input_like())
                self.last_slots = self._offer(rows, model, checked, stacklevel=5)
        finally:  # a refused batch leaves the batches before it stored, and no stale source
            self._prune_sources()

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
        x, y, t = dataset_tensors(reading_copy(data))  # the stream may keep `data` for good
        self._offer_source(data, x, y, t, model, device, None, plain=not has_transforms(data))

    def update(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Offer ``strategy.experience`` (as :meth:`post_adapt`).

        Avalanche's base class warns on every call of this deprecated method;
        ``ReplayPlugin`` still calls it, so it is overridden without the warning.
        """
        self.post_adapt(strategy, strategy.experience)


class OnlineBuffer(_DatasetFeed, ReadsMixin, ExemplarsBuffer):
    """A fixed-size replay buffer, updated one incoming batch at a time.

    Subclasses implement :meth:`_assign`. The buffer sees each batch once, through
    :meth:`post_adapt` (Avalanche's storage-policy hook: the plugin calls it after the
    model learnt the experience), :meth:`update_from_dataset` or :meth:`add` (tensors).

    After each batch, :attr:`last_slots` holds the slot each sample took (``-1``: not
    stored) and, for a policy that scores samples (:attr:`scored`), :attr:`last_scores`
    the scores of the samples the policy was offered (those with finite inputs).

    Bad input never reaches the storage: labels must be integers in
    ``[0, label_bound)`` and inputs must have the stored inputs' shape (``ValueError``);
    samples with a NaN or infinite input value are not stored (a ``RuntimeWarning`` says
    how many). :attr:`n_rejected` counts them, with the samples a gradient-scored policy
    refuses because their gradient is not finite.

    A call that raises, whatever the reason (bad input, a policy or a model that fails,
    memory), leaves the buffer exactly as it was: samples, recent buffer, counters and
    every generator's state (:meth:`_snapshot`).

    :param max_size: number of slots ``M``, an integer >= 1 whose columns fit in the
        memory available (else a ``MemoryError`` says how many bytes they need).
    :param seed: seed of the buffer's own ``torch.Generator`` (saved in :meth:`state_dict`).
    """

    scored = False
    """Whether the policy keeps a meaningful score per stored sample (``self.scores``)."""

    label_bound = 2**31
    """Labels must be below it (and >= 0); a policy whose state is indexed by label lowers it."""

    def __init__(self, max_size: int, *, seed: int = 0) -> None:
        m = check_size(max_size)
        ExemplarsBuffer.__init__(self, m)
        self.generator = torch.Generator().manual_seed(seed)
        self._init_columns(m)
        self.n_seen = 0
        self.n_rejected = 0  # samples refused for a non-finite input or gradient
        self.last_slots: Tensor | None = None  # slots taken by the last batch (-1: not stored)
        self.last_scores: Tensor | None = None  # scores of the last batch's finite samples

    def report(self) -> dict[str, Any]:
        """What a run of this policy reports beyond accuracy and class counts.

        Added to the run's ``extras``; none by default: a policy overrides it to add its
        own facts (GSS-IQP: its last surrogate).
        """
        return {}

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
        """Place a validated batch: the policy decides, the storage checks and writes."""
        slots, scores = self._assign(rows, model)
        self.last_scores = scores
        slots = slots.cpu()
        self._store(rows, slots, scores)
        self.n_seen += len(rows)
        return slots

    def _input_like(self) -> Tensor | None:
        """Stored inputs whose shape an incoming batch must match (``None``: any)."""
        return self.x

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
        slots = self._offer(Rows.of_tensors(x, y, _task_tensor(task_labels, b, y.device)), model)
        self.last_slots = slots
        return slots

    def _offer(self, rows: Rows, model: nn.Module | None, checked: Checked | None = None, *,
               stacklevel: int = 4) -> Tensor:
        """Validate a batch, drop non-finite samples, let the policy place the rest.

        Anything that raises from here on leaves the buffer as it was (:meth:`_snapshot`).

        :param checked: what :func:`check_batch` returned for the batch when the caller
            validated it (on the host, before moving it); ``None``: validate here.
        :param stacklevel: the caller's ``stacklevel`` for the warning about non-finite inputs.
        """
        if checked is None:
            checked = check_batch(self, rows.x, rows.y, self._input_like())
        if len(rows) == 0:
            return torch.empty(0, dtype=torch.long)
        before = self._snapshot()
        try:
            self._check_labels(rows, checked.high, model)
            finite = checked.finite
            slots = torch.full((len(rows),), -1, dtype=torch.long)
            if finite is not None:  # samples with NaN/inf inputs are not offered
                bad = int((~finite).sum())
                reject(self, bad, f"{bad} sample(s) with NaN or infinite inputs not stored",
                       stacklevel=stacklevel + 1)
                rows = rows.take(finite)
            if len(rows):
                assigned = self._admit(rows, model)
                if finite is None:
                    slots = assigned
                else:
                    slots[finite] = assigned
        except BaseException:
            self._rollback(before)
            raise
        return slots

    def _check_labels(self, rows: Rows, high: int, model: nn.Module | None) -> None:
        """Refuse labels the policy cannot use with ``model`` (none here), before any change.

        :param rows: the batch.
        :param high: its largest label.
        :param model: the learner given with it.
        :raises ValueError: a label the policy cannot use.
        """

    def _snapshot(self) -> dict[str, Any]:
        """What a call may change before it raises: the attributes and the generators' states.

        Attributes are copied shallowly: what a call changes it replaces (counters, the
        recent buffer, per-class tensors), except the slot columns, written in place last,
        once nothing can fail. A policy with state kept in place elsewhere adds it here and
        restores it in :meth:`_rollback`.
        """
        attrs = dict(self.__dict__)
        return {"attrs": attrs,
                "generators": {name: value.get_state() for name, value in attrs.items()
                               if isinstance(value, torch.Generator)}}

    def _rollback(self, snapshot: dict[str, Any]) -> None:
        """Restore what :meth:`_snapshot` saved."""
        attrs = snapshot["attrs"]
        for name in [name for name in self.__dict__ if name not in attrs]:
            delattr(self, name)
        self.__dict__.update(attrs)
        for name, state in snapshot["generators"].items():
            getattr(self, name).set_state(state)
        self._data.reset(self.max_size)  # the dataset view is rebuilt from the slots



def _task_tensor(task_labels: Tensor | int, b: int, device: torch.device) -> Tensor:
    if isinstance(task_labels, Tensor):
        if task_labels.shape != (b,):
            raise ValueError(f"task_labels must have shape ({b},), got "
                             f"{tuple(task_labels.shape)}")
        return task_labels.to(device, torch.long)
    return torch.full((b,), int(task_labels), dtype=torch.long, device=device)


class Checked(NamedTuple):
    """What :func:`check_batch` found in a valid batch."""

    finite: Tensor | None
    """``(B,)`` CPU mask of the samples whose inputs are all finite (``None``: all are)."""
    high: int
    """The largest label (``-1`` for an empty batch)."""


def check_batch(owner: OnlineBuffer, x: Tensor, y: Tensor, ref: Tensor | None) -> Checked:
    """Validate a batch; return which samples are finite and the largest label.

    Nothing changes here: :meth:`OnlineBuffer._offer` counts the non-finite samples. On a
    GPU it reads values on the host: validate the batch before moving it there.

    :param owner: the buffer the batch is offered to (its :attr:`~OnlineBuffer.label_bound`).
    :param x: ``(B, *input_shape)`` inputs.
    :param y: ``(B,)`` labels.
    :param ref: stored inputs whose shape ``x`` must match, if any.
    :raises ValueError: sizes or shapes disagree, or labels are not integers in
        ``[0, owner.label_bound)``.
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
        return Checked(None, -1)
    low, high = (int(v) for v in torch.stack(torch.aminmax(y)).tolist())  # one read
    if low < 0:
        raise ValueError(f"labels must be >= 0, got {low}")
    if high >= owner.label_bound:
        raise ValueError(f"labels must be < {owner.label_bound} ({type(owner).__name__}"
                         f".label_bound), got {high}")
    if not x.is_floating_point():
        return Checked(None, high)
    finite = torch.isfinite(x.reshape(len(y), -1)).all(dim=1).cpu()  # (B,)
    return Checked(None if bool(finite.all()) else finite, high)


def reject(owner: OnlineBuffer, count: int, message: str, *, stacklevel: int) -> None:
    """Count ``count`` refused samples in ``owner.n_rejected`` and say why (``RuntimeWarning``).

    :param owner: the buffer that refused them.
    :param count: how many.
    :param message: what happened, after the buffer's class name.
    :param stacklevel: the caller's ``stacklevel`` plus one.
    """
    owner.n_rejected += count
    warnings.warn(f"{type(owner).__name__}: {message}", RuntimeWarning, stacklevel=stacklevel)
