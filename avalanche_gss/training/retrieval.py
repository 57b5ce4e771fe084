"""Which buffer samples a replay step learns: uniform draws, or Maximally Interfered Retrieval.

Storage (which samples a buffer keeps: Reservoir, GSS, ...) and retrieval (which of them a
replay step uses) are separate choices, so any retrieval combines with any buffer
(ER-MIR is Reservoir with :class:`MIRRetrieval`; GSS-Greedy with it is GSS + MIR).

* :class:`RandomRetrieval`: ``replay_batch_size`` distinct buffer samples drawn uniformly,
  the GSS paper's rehearsal (the default).
* :class:`OtherClassesRetrieval`: the same uniform draw, but the buffer samples whose class
  the incoming batch does not hold come first (it reads labels only, at the cost of the
  uniform draw).
* :class:`MIRRetrieval`: Maximally Interfered Retrieval, from Aljundi, Caccia, Belilovsky,
  Caccia, Lin, Charlin and Tuytelaars, "Online Continual Learning with Maximally
  Interfered Retrieval", NeurIPS 2019 (arXiv:1908.04742): of ``C`` candidates drawn at
  random from the buffer, the ``replay_batch_size`` whose loss the incoming batch's SGD
  step would raise the most.

Every draw uses the generator that the caller passes
(:class:`~avalanche_gss.training.rehearsal.OnlineRehearsalPlugin`'s), so the plugin's
``state_dict`` holds the retrieval's random state too. A retrieval object keeps the
batch it chose until it is replayed: give each plugin its own.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch
from avalanche.models import MultiTaskModule
from avalanche.training.storage_policy import ExemplarsBuffer
from torch import Tensor, nn
from torch.func import functional_call

from avalanche_gss import _host
from avalanche_gss._avalanche import criterion_of
from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.gradients import eval_mode
from avalanche_gss.streams.online import dataset_tensors
from avalanche_gss.training.ace import replay_criterion

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["RETRIEVALS", "Retrieval", "RandomRetrieval", "OtherClassesRetrieval",
           "MIRRetrieval", "make_retrieval", "draw", "draw_slots", "per_sample_loss"]

RETRIEVALS = ("random", "mir", "other-classes")
"""The retrievals named by a string (``retrieval="mir"``)."""

Batch = tuple[Tensor, Tensor, Tensor]
"""``(x, y, t)``: inputs, class labels, task labels."""


def draw(policy: ExemplarsBuffer, k: int, generator: torch.Generator,
         device: torch.device | str) -> Batch | None:
    """Draw ``min(k, len(policy))`` distinct buffer samples uniformly: ``(x, y, t)`` on ``device``.

    A buffer whose stored tensors are what its dataset yields (no transform) is read from
    the tensors; otherwise the drawn samples are read through ``policy.buffer``, so that a
    random augmentation is drawn anew.

    :param policy: the buffer (an :class:`~avalanche_gss.buffers.OnlineBuffer` or any
        Avalanche ``ExemplarsBuffer``).
    :param k: how many samples.
    :param generator: the source of the draw (one ``randperm`` of the buffer's size).
    :param device: where the samples go.
    :return: the samples, or ``None`` while the buffer is empty.
    """
    drawn = draw_slots(policy, k, generator, device)
    return None if drawn is None else drawn[0]


def draw_slots(policy: ExemplarsBuffer, k: int, generator: torch.Generator,
               device: torch.device | str) -> tuple[Batch, Tensor] | None:
    """:func:`draw`, with the drawn slots: ``((x, y, t), slots)``, the same draw.

    For a replay loss that reads per-slot state the buffer keeps beside the samples
    (GCR's weights and stored logits).

    :return: the samples and their ``(k',)`` CPU slot indices, or ``None`` while empty.
    """
    if isinstance(policy, OnlineBuffer):
        if len(policy) == 0:
            return None
        slots = policy.sample_slots(k, generator)
    else:
        if len(policy.buffer) == 0:
            return None
        slots = torch.randperm(len(policy.buffer), generator=generator)[:k]
    return _read(policy, slots, device), slots


def _read(policy: ExemplarsBuffer, idx: Tensor, device: torch.device | str) -> Batch:
    """Buffer samples ``idx``: ``(x, y, t)`` on ``device``.

    From the stored tensors of an :class:`~avalanche_gss.buffers.OnlineBuffer` whose
    tensors are what its dataset yields; otherwise through ``policy.buffer`` (a random
    augmentation is drawn anew).
    """
    if isinstance(policy, OnlineBuffer) and policy.replays_tensors:
        x, y, t = policy.rows(idx)
        return x.to(device), y.to(device), t.to(device)
    return _read_items(policy.buffer, idx, device)


def _read_items(data: Any, idx: Tensor, device: torch.device | str) -> Batch:
    """Read ``data[i]`` for ``i`` in ``idx``: ``(x, y, t)`` on ``device``."""
    x, y, t = dataset_tensors(data, idx.tolist())
    return x.to(device), y.to(device), t.to(device)


def per_sample_loss(criterion: Any, output: Tensor, y: Tensor) -> Tensor:
    """The loss of each sample, ``(N,)``, with the strategy's criterion.

    A criterion with a ``reduction`` attribute (every ``torch.nn`` loss) is called on a
    shallow copy with ``reduction="none"`` (extra dimensions averaged, as ``"mean"``
    would); any other criterion is called on one sample at a time.

    :param criterion: the training loss module (mean over the batch).
    :param output: the model's outputs, ``(N, ...)``.
    :param y: the targets, ``(N, ...)``.
    """
    n = y.shape[0]
    if isinstance(getattr(criterion, "reduction", None), str):
        unreduced = copy.copy(criterion)
        unreduced.reduction = "none"
        loss = unreduced(output, y)
        if loss.dim() >= 1 and loss.shape[0] == n:
            return loss.reshape(n, -1).mean(dim=1) if loss.dim() > 1 else loss
    return torch.stack([criterion(output[i : i + 1], y[i : i + 1]).reshape(()) for i in range(n)])


def _forward(model: nn.Module, x: Tensor, t: Tensor,
             params: dict[str, Tensor] | None = None) -> Tensor:
    """``model(x, t)`` for a ``MultiTaskModule``, else ``model(x)`` (``avalanche_forward``).

    With ``params``, the model is called with those parameters in place of its own
    (``torch.func.functional_call``; the module is left as it was).
    """
    args = (x, t) if isinstance(model, MultiTaskModule) else (x,)
    if params is None:
        return model(*args)
    out: Tensor = functional_call(model, params, args)
    return out


class Retrieval:
    """How a replay step picks its samples from the buffer (the base class).

    :class:`~avalanche_gss.training.rehearsal.OnlineRehearsalPlugin` calls
    :meth:`before_update` before each optimizer step on the incoming batch (its gradient is
    then in ``.grad`` and the parameters are not yet updated), and :meth:`retrieve` for
    the replay step.
    """

    name = ""
    """The retrieval's name in run labels (``"mir"``); empty for the default."""

    def check(self, replay_batch_size: int) -> None:
        """Refuse a replay batch size this retrieval cannot serve (none by default).

        :param replay_batch_size: buffer samples per replay step.
        """

    def before_update(self, strategy: SupervisedTemplate, policy: ExemplarsBuffer, k: int,
                      generator: torch.Generator) -> None:
        """Called with the incoming batch's gradient in ``.grad``, before its step (no-op).

        :param strategy: the strategy (``model``, ``optimizer``, ``device``, criterion).
        :param policy: the buffer.
        :param k: buffer samples per replay step.
        :param generator: the source of any draw.
        """

    def retrieve(self, strategy: SupervisedTemplate, policy: ExemplarsBuffer, k: int,
                 generator: torch.Generator) -> Batch | None:
        """The replay batch: ``(x, y, t)`` on the strategy's device, ``None`` when empty.

        :param strategy: the strategy.
        :param policy: the buffer.
        :param k: buffer samples per replay step (a smaller buffer is replayed whole).
        :param generator: the source of any draw.
        """
        raise NotImplementedError

    def reset(self) -> None:
        """Forget any batch chosen and not yet replayed (on resume)."""


class RandomRetrieval(Retrieval):
    """``replay_batch_size`` distinct buffer samples drawn uniformly (the GSS paper's).

    One ``randperm`` of the buffer's size per replay step, from the plugin's generator.
    """

    def retrieve(self, strategy: SupervisedTemplate, policy: ExemplarsBuffer, k: int,
                 generator: torch.Generator) -> Batch | None:
        """:func:`draw` of ``k`` samples."""
        return draw(policy, k, generator, strategy.device)


class MIRRetrieval(Retrieval):
    """Maximally Interfered Retrieval (MIR; Aljundi, Caccia et al., NeurIPS 2019).

    ER-MIR (the paper's Section 3.1): with ``theta`` the parameters and ``g`` the gradient
    of the incoming batch's loss, take the virtual SGD step ``theta' = theta - lr * g``,
    draw ``C`` = :attr:`candidates` samples from the buffer at random, score each by how
    much that step would raise its loss, ``s(x, y) = l(f(x; theta'), y) - l(f(x; theta), y)``
    (the paper's MI-1 criterion), and replay the ``replay_batch_size`` candidates with the
    largest scores. The authors subsample ``C = 50`` candidates on split MNIST, permuted
    MNIST and split CIFAR-10 (``--subsample 50`` in their ``Scripts/ER_experiments.sh``,
    also their ``er_main.py`` default; 25 on MiniImageNet), so 50 is the default here.

    How this fits the library's rehearsal. The MIR paper and its code learn the incoming
    batch and the retrieved samples in one SGD step (the gradients of both mean losses
    summed). The GSS paper's rehearsal, this library's default, takes a separate replay
    step after each step on the batch; with ``joint=False`` (the default of
    :class:`~avalanche_gss.training.rehearsal.OnlineRehearsalPlugin`) the scores are
    computed in the plugin's ``before_update``, where ``.grad`` holds the batch's gradient
    and ``theta`` is not yet updated, and the chosen samples get the replay step that
    follows the batch's step. With plain SGD (no momentum, no weight decay) the virtual
    step is then exactly the step the batch takes, so MIR replays the candidates the
    batch's step did interfere with most, at the parameters it left. With ``joint=True``
    the plugin adds their loss's gradient to the batch's before that one step: MIR's own
    update.

    Details. The virtual step is a plain SGD step with each parameter's learning rate from
    the optimizer's ``param_groups``, whatever the optimizer (the paper's and the
    authors' ``get_future_step_parameters``); parameters without a gradient, or not in the
    optimizer, stay. It is evaluated with ``torch.func.functional_call``: the model's
    parameters, ``.grad``, buffers and the optimizer's state are not touched. Both losses
    are computed in eval mode (BatchNorm on its running statistics, which stay as they
    are; no dropout), so each score is the sample's own: with the paper's MLP this is the
    authors' train-mode forward. The loss is the strategy's criterion per sample
    (:func:`per_sample_loss`); a multi-head model gets each candidate's task label
    (``model(x, t)``, as ``avalanche_forward``). Ties and non-finite scores (a batch whose
    gradient is not finite) fall back to the candidates' random order. A buffer with no
    more than ``replay_batch_size`` samples is replayed whole, unscored. Unlike the
    authors' task-aware code, no candidate is excluded for sharing the incoming batch's
    task (the stream is task-free), and their ``--compare_to_old_logits`` variant (scores
    against the lower of the current and the stored loss) is not implemented.

    Candidates are read as :func:`draw` reads them (the stored tensors, or the buffer's
    dataset when it has a transform, a new augmentation each read); the chosen ones are
    replayed as they were scored. When :meth:`retrieve` finds no chosen batch (a strategy
    whose loop does not fire ``before_update``), it draws ``replay_batch_size`` samples
    uniformly instead.

    :param candidates: ``C``, buffer samples scored per replay step (at least the replay
        batch size).
    """

    name = "mir"

    def __init__(self, candidates: int = 50) -> None:
        if candidates < 1:
            raise ValueError(f"candidates must be >= 1, got {candidates}")
        self.candidates = candidates
        self._chosen: Batch | None = None

    def check(self, replay_batch_size: int) -> None:
        """Refuse fewer candidates than the replay batch (MIR would then choose nothing).

        :param replay_batch_size: buffer samples per replay step.
        :raises ValueError: ``candidates < replay_batch_size``.
        """
        if self.candidates < replay_batch_size:
            raise ValueError(f"MIR candidates ({self.candidates}) must be >= "
                             f"replay_batch_size ({replay_batch_size})")

    def before_update(self, strategy: SupervisedTemplate, policy: ExemplarsBuffer, k: int,
                      generator: torch.Generator) -> None:
        """Draw the candidates, score them with the batch's gradient, keep the top ``k``."""
        self._chosen = None
        batch = draw(policy, self.candidates, generator, strategy.device)
        if batch is None:
            return
        x, y, t = batch
        if len(y) <= k:
            self._chosen = batch
            return
        scores = self.scores(strategy.model, strategy.optimizer,
                             replay_criterion(criterion_of(strategy)), x, y, t)
        top = torch.argsort(scores, descending=True, stable=True)[:k]
        self._chosen = x[top], y[top], t[top]

    def retrieve(self, strategy: SupervisedTemplate, policy: ExemplarsBuffer, k: int,
                 generator: torch.Generator) -> Batch | None:
        """The batch :meth:`before_update` chose (once), else a uniform draw."""
        chosen, self._chosen = self._chosen, None
        if chosen is not None:
            return chosen
        return draw(policy, k, generator, strategy.device)

    def reset(self) -> None:
        """Forget the chosen batch."""
        self._chosen = None

    @staticmethod
    def scores(model: nn.Module, optimizer: torch.optim.Optimizer, criterion: Any, x: Tensor,
               y: Tensor, t: Tensor) -> Tensor:
        """Each sample's loss increase under the virtual SGD step: ``l(theta') - l(theta)``.

        ``theta' = theta - lr * theta.grad``, with each parameter's ``lr`` from
        ``optimizer.param_groups``. Nothing of the model or the optimizer changes.

        :param model: the network, its ``.grad`` holding the incoming batch's gradient.
        :param optimizer: its optimizer (the learning rates).
        :param criterion: the training loss (see :func:`per_sample_loss`).
        :param x: ``(C, ...)`` candidate inputs, on the model's device.
        :param y: ``(C,)`` their labels.
        :param t: ``(C,)`` their task labels (used by a ``MultiTaskModule``).
        :return: ``(C,)`` scores; a NaN one (a non-finite gradient or loss) is ``-inf``.
        """
        lrs = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
        with torch.no_grad():
            virtual = {
                name: p.detach() - lrs[id(p)] * p.grad.detach()
                for name, p in model.named_parameters()
                if p.grad is not None and id(p) in lrs
            }
            with eval_mode(model):
                before = per_sample_loss(criterion, _forward(model, x, t), y)
                after = per_sample_loss(criterion, _forward(model, x, t, virtual), y)
        scores = after - before
        return scores.masked_fill(torch.isnan(scores), float("-inf"))


class OtherClassesRetrieval(Retrieval):
    """Replay the classes the incoming batch does not hold: uniform draws among them first.

    Each replay step draws one uniform permutation of the buffer (the draw of
    :class:`RandomRetrieval`, from the same generator) and takes, in that order, the
    samples whose class label is not among the incoming batch's labels; only when fewer
    than ``replay_batch_size`` such samples are stored is the batch topped up with the
    others, in the same order. When the batch's classes cover the buffer, this is the
    uniform draw.

    Why: the replay step follows the step on the incoming batch, which has just learnt
    the batch's classes; a replayed sample of those classes repeats that step, while the
    other classes are the ones the step pushed down. MIR (:class:`MIRRetrieval`) leans
    the same way (measured in docs/RESULTS.md), at the price of a virtual step and two
    forward passes over ``C`` candidates. This retrieval takes such samples only,
    reading labels alone, so it costs what the uniform draw costs; it uses class labels,
    not task labels or boundaries. It is the retrieval of this library's ``CB-GSS``
    policy.

    Labels come from an :class:`~avalanche_gss.buffers.OnlineBuffer`'s stored labels, or
    from the ``targets`` of another ``ExemplarsBuffer``'s dataset.
    """

    name = "other-classes"

    def retrieve(self, strategy: SupervisedTemplate, policy: ExemplarsBuffer, k: int,
                 generator: torch.Generator) -> Batch | None:
        """``k`` buffer samples, those of classes absent from ``strategy.mb_y`` first."""
        stored = _stored_labels(policy)
        if stored is None or len(stored) == 0:
            return None
        order = torch.randperm(len(stored), generator=generator)
        batch = strategy.mb_y.detach()
        if _host.on_host(stored, batch):
            labels = (policy.store.label_list() if isinstance(policy, OnlineBuffer)
                      else stored.tolist())
            pick = _absent_first(order.tolist(), labels, set(batch.tolist()), k)
        else:
            pick = _absent_first_on_device(order, stored, batch, k)
        return _read(policy, pick, strategy.device)


def _absent_first_on_device(order: Tensor, labels: Tensor, held: Tensor, k: int) -> Tensor:
    """The first ``k`` of ``order`` by a stable sort on whether their label is ``held``.

    Tensor ops on ``labels``' device, with no sync: for a buffer on an accelerator.

    :param order: a CPU permutation of the slots.
    :param labels: the stored labels, by slot.
    :param held: the incoming batch's labels.
    """
    order = order.to(labels.device, non_blocking=True)
    present = torch.isin(labels[order], held.to(labels.device))
    return order[torch.argsort(present.to(torch.uint8), stable=True)[:k]]


def _absent_first(order: list[int], labels: list[int], held: set[int], k: int) -> Tensor:
    """The first ``k`` of ``order`` whose label is not ``held``, then those whose label is.

    On the host, what :func:`_absent_first_on_device` picks, for a CPU buffer (a few
    tensor ops cost more than this loop, which stops at the ``k``-th absent slot).
    """
    absent: list[int] = []
    present: list[int] = []
    for slot in order:
        if labels[slot] in held:
            present.append(slot)
        else:
            absent.append(slot)
            if len(absent) == k:
                break
    return torch.tensor((absent + present)[:k], dtype=torch.long)


def _stored_labels(policy: ExemplarsBuffer) -> Tensor | None:
    """The buffer's class labels in storage order (int64, where the buffer keeps them)."""
    if isinstance(policy, OnlineBuffer):
        return policy.y[: len(policy)] if policy.y is not None else None
    data = policy.buffer
    if len(data) == 0:
        return None
    return torch.as_tensor(list(data.targets), dtype=torch.long)


def make_retrieval(retrieval: Retrieval | str | None) -> Retrieval:
    """The retrieval an argument names.

    :param retrieval: a :class:`Retrieval`; ``None`` or ``"random"``: :class:`RandomRetrieval`;
        ``"mir"``: :class:`MIRRetrieval` with its default candidates; ``"other-classes"``:
        :class:`OtherClassesRetrieval`.
    :raises ValueError: an unknown name.
    """
    if isinstance(retrieval, Retrieval):
        return retrieval
    if retrieval is None or retrieval == "random":
        return RandomRetrieval()
    if retrieval == "mir":
        return MIRRetrieval()
    if retrieval == "other-classes":
        return OtherClassesRetrieval()
    raise ValueError(f"unknown retrieval {retrieval!r}; choose from {', '.join(RETRIEVALS)} "
                     "or give a Retrieval")
