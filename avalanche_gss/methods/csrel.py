"""``CSReL`` (Coreset Selection via Reducible Loss, Tong et al., ICLR 2025): buffer and strategy."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avalanche_gss.buffers import GradientScored, OnlineBuffer, Rows
from avalanche_gss.buffers.base import reject
from avalanche_gss.buffers.rows import labels_on, model_device, same_shapes
from avalanche_gss.gradients import eval_mode
from avalanche_gss.selection.csrel import admission_weights, reducible_loss, streaming_slots
from avalanche_gss.training.rehearsal import BufferStrategy, single_sample_norm

__all__ = ["CSReLBuffer", "CSReL"]


class CSReLBuffer(GradientScored, OnlineBuffer):
    """``CSReL``: samples kept by their reducible loss, the streaming variant, task-free.

    Tong et al., "Coreset Selection via Reducible Loss in Continual
    Learning", ICLR 2025. A sample's reducible loss is the loss of a model trained on the
    coreset minus the loss of a model trained on all the data
    (:func:`~avalanche_gss.selection.csrel.reducible_loss`): high for a sample the coreset
    has not taught yet and that can be learnt, low for one already learnt and for a noisy
    or ambiguous one. Scoring takes two forward passes of the batch, no gradient.

    In the streaming variant (the authors' online buffer), the model trained on all the data
    is the learner itself (it has seen the whole stream, through the incoming and the
    replay batches), and the coreset model is a separate network trained on the buffer's
    contents alone. Each incoming batch is scored; the batch's scores become weights
    ``w = B * softmax(rl)`` (:func:`~avalanche_gss.selection.csrel.admission_weights`), and
    a sample enters a full buffer with probability ``min(1, M w_i / (n_i + 1))`` (reservoir
    sampling scaled by its weight), replacing a uniformly drawn stored sample
    (:func:`~avalanche_gss.selection.csrel.streaming_slots`). Every ``refit_every`` stored
    samples, the coreset model is trained again, from a fresh initialisation, on the
    buffer.

    Adaptations to a task-free stream and to this library, stated:

    - the authors retrain the coreset model on the current task's samples of the buffer
      and reset it at each task boundary; with no tasks, it is trained on the whole buffer
      and never reset otherwise; the authors refit after ``M / (tasks + 1) /
      selection_steps`` stored samples; here after ``refit_every`` (``M // 10`` by default);
    - the coreset model is the learner's architecture (a copy of the learner) with every
      module that has ``reset_parameters`` re-initialised from a seed drawn from the
      buffer's generator (without touching the global random state); modules without it
      keep the learner's weights. It is trained with ``refit_steps`` steps of plain SGD
      (learning rate ``refit_lr``) on minibatches of ``refit_batch_size`` samples drawn
      uniformly from the buffer, in train mode, with the cross-entropy; the authors train
      it for a number of epochs with their training loop;
    - the learner's loss is its cross-entropy in eval mode, after it learnt the batch
      (the buffer sees a batch after the learner); the authors use the per-sample loss of
      the learner's training step (train mode, on the augmented batch, before the update);
    - the authors' probability is ``randint(0, n + 1) < M w``; here a uniform ``u`` in
      ``[0, 1)`` with ``u (n + 1) < M w``, the same up to the rounding of ``M w``;
    - a learner whose parameters change shape (a growing head) restarts the coreset model
      from a fresh initialisation.

    The stored scores are the samples' reducible losses when they entered. A sample whose
    score is not finite is not stored (counted in ``n_rejected``). The coreset model's
    weights, the count of samples stored since the last refit and the generator are in
    :meth:`state_dict`: a loaded buffer decides as the original.

    :param max_size: number of slots ``M``.
    :param refit_every: stored samples between two trainings of the coreset model (``None``:
        ``max(1, M // 10)``).
    :param refit_steps: SGD steps of each training of the coreset model.
    :param refit_batch_size: samples per step of that training.
    :param refit_lr: its learning rate.
    :param seed: seed of the buffer's generator (its draws, the coreset model's init).
    """

    scored = True  # each stored sample's reducible loss when it entered
    method = "CSReL"
    model_states = ("coreset_model",)  # checked against the learner before a load

    def __init__(self, max_size: int, *, refit_every: int | None = None, refit_steps: int = 50,
                 refit_batch_size: int = 32, refit_lr: float = 0.05, seed: int = 0) -> None:
        super().__init__(max_size, seed=seed)
        for name, value in (("refit_steps", refit_steps), ("refit_batch_size", refit_batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if refit_every is not None and (isinstance(refit_every, bool)
                                        or not isinstance(refit_every, int) or refit_every < 1):
            raise ValueError(f"refit_every must be an integer >= 1 or None, got {refit_every!r}")
        if isinstance(refit_lr, bool) or not isinstance(refit_lr, (int, float)) \
                or not 0 < refit_lr < float("inf"):
            raise ValueError(f"refit_lr must be a finite number > 0, got {refit_lr!r}")
        self.refit_every = refit_every
        self.refit_steps = int(refit_steps)
        self.refit_batch_size = int(refit_batch_size)
        self.refit_lr = float(refit_lr)
        self.since_refit = 0  # samples stored since the coreset model was last trained
        self.refits = 0  # trainings of the coreset model so far
        self._coreset: nn.Module | None = None
        self._pending: dict[str, Tensor] | None = None  # loaded weights, before a model

    @property
    def refit_period(self) -> int:
        """Stored samples between two trainings of the coreset model."""
        return self.refit_every if self.refit_every is not None else max(1, self.max_size // 10)

    # the coreset model

    def _fresh(self, model: nn.Module) -> nn.Module:
        """The learner's architecture, re-initialised from a seed of the buffer's generator."""
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        device = model_device(model)
        net = copy.deepcopy(model).cpu()
        with torch.random.fork_rng(devices=[]):  # the global CPU state is restored after
            torch.default_generator.manual_seed(seed)
            for module in net.modules():
                reset = getattr(module, "reset_parameters", None)
                if callable(reset):
                    reset()
        if device is not None:
            net = net.to(device)
        net.eval()
        for p in net.parameters():
            p.requires_grad_(False)
            p.grad = None
        return net

    def coreset_model(self, model: nn.Module) -> nn.Module:
        """The network trained on the buffer's contents (made from ``model`` the first time).

        :param model: the learner (its architecture, and its device).
        """
        net = self._coreset
        if net is not None and not same_shapes(net, model):
            net = None  # the learner grew: start again
        if net is None:
            if self._pending is not None:
                net = copy.deepcopy(model)
                net.load_state_dict(self._pending)
                net.eval()
                for p in net.parameters():
                    p.requires_grad_(False)
                self._pending = None
            else:
                net = self._fresh(model)
            self._coreset = net
        return net

    def refit(self, model: nn.Module) -> None:
        """Train a fresh coreset model on the buffer's samples (``refit_steps`` SGD steps).

        :param model: the learner (the architecture and device of the coreset model).
        """
        net = self._fresh(model)
        self._coreset = net
        self.since_refit = 0
        self.refits += 1
        if self.size == 0:
            return
        dev = model_device(net)
        params = list(net.parameters())
        for p in params:
            p.requires_grad_(True)
        net.train()
        k = min(self.refit_batch_size, self.size)
        for _ in range(self.refit_steps):
            x, y, t = self.rows(self.sample_slots(k))
            dev = dev or x.device
            x, y = x.to(dev), y.to(dev)
            labels = labels_on(net, t, dev)
            with single_sample_norm(net, k):  # one sample: BatchNorm on running statistics
                out = net(x) if labels is None else net(x, labels)
            loss: Tensor = F.cross_entropy(out, y)
            _sgd_step(params, loss, self.refit_lr)
        net.eval()
        for p in net.parameters():
            p.requires_grad_(False)
            p.grad = None

    # the policy

    def _check_model(self, model: nn.Module | None) -> nn.Module:
        """Return ``model``; CSReL scores with the learner's loss, so it needs one.

        :raises ValueError: no model.
        """
        if model is None:
            raise ValueError("CSReL scores samples by the learner's loss: pass model=")
        return model

    def scores_of(self, rows: Rows, model: nn.Module) -> Tensor:
        """The reducible loss of each of ``rows``, ``(B,)`` float32 on the model's device.

        Two forward passes without gradients: the coreset model's and the learner's (in eval
        mode, its state untouched).

        :param rows: the samples.
        :param model: the learner.
        """
        net = self.coreset_model(model)
        dev = model_device(model) or rows.x.device
        x, y = rows.x.to(dev), rows.y.to(dev)
        labels = labels_on(model, rows.t, dev)
        with torch.no_grad():
            with eval_mode(model):
                full = model(x) if labels is None else model(x, labels)
            coreset = net(x) if labels is None else net(x, labels)
        return reducible_loss(coreset, full, y)

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, Tensor]:
        model = self._check_model(model)
        scores = self.scores_of(rows, model)
        finite = torch.isfinite(scores).cpu()
        if not bool(finite.all()):
            bad = int((~finite).sum())
            reject(self, bad, f"{bad} sample(s) with a non-finite reducible loss not stored",
                   stacklevel=5)
        slots = streaming_slots(admission_weights(scores), self.n_seen, self.size,
                                self.max_size, self.generator)
        self.since_refit += int((slots >= 0).sum())
        return slots, scores.float()

    def _admit(self, rows: Rows, model: nn.Module | None) -> Tensor:
        """Store the batch, then train the coreset model again once enough samples came."""
        slots = super()._admit(rows, model)
        if model is not None and self.since_refit >= self.refit_period:
            self.refit(model)
        return slots

    # state

    def state_dict(self) -> dict[str, Any]:
        """:meth:`OnlineBuffer.state_dict`, the coreset model's weights and the counters."""
        state = super().state_dict()
        net = self._coreset
        weights = net.state_dict() if net is not None else (self._pending or {})
        state["coreset_model"] = {k: v.detach().cpu().clone() for k, v in weights.items()}
        state["since_refit"] = self.since_refit
        state["refits"] = self.refits
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the coreset model is rebuilt at its next use)."""
        super().load_state_dict(state)
        self._coreset = None
        self._pending = dict(state["coreset_model"]) or None
        self.since_refit = int(state["since_refit"])
        self.refits = int(state["refits"])

    def report(self) -> dict[str, Any]:
        """How many times the coreset model was trained; a warning where it refused samples.

        ``warnings``, present where samples were refused: the run's result and report
        carry it (a frozen buffer otherwise shows in the log only).
        """
        report: dict[str, Any] = {"coreset_refits": self.refits}
        if self.n_rejected:
            report["warnings"] = [
                f"CSReL refused {self.n_rejected} sample(s) with a non-finite input or "
                f"reducible loss and holds {self.size} of {self.max_size}: the coreset model "
                f"or the learner diverged (refit_lr={self.refit_lr:g}: try a smaller one)"]
        return report


def _sgd_step(params: Sequence[Tensor], loss: Tensor, lr: float) -> None:
    """One step of plain SGD on ``loss``: ``p <- p - lr * grad`` for each parameter with one.

    The update of ``torch.optim.SGD`` without momentum or weight decay (the same
    ``add_(grad, alpha=-lr)`` per parameter), without its per-step bookkeeping; the
    gradients are not kept in ``.grad``. (``torch.autograd.grad`` would leave a tuple of
    ``len(params)`` in CPython's free list at each step.)
    """
    torch.autograd.backward(loss)
    used = [p for p in params if p.grad is not None]
    if used:
        grads = [cast(Tensor, p.grad) for p in used]
        with torch.no_grad():
            torch._foreach_add_(used, grads, alpha=-lr)
        for p in used:
            p.grad = None


class CSReL(BufferStrategy):
    """Online rehearsal with the ``CSReL`` buffer (Tong et al., ICLR 2025).

    The buffer's options (``refit_every``, ``refit_steps``, ``refit_batch_size``,
    ``refit_lr``) are those of :class:`CSReLBuffer`, with its defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = CSReLBuffer

    def __init__(
        self, *, mem_size: int, seed: int = 0, refit_every: int | None = None,
        refit_steps: int = 50, refit_batch_size: int = 32, refit_lr: float = 0.05,
        **options: Any,
    ) -> None:
        buffer = CSReLBuffer(mem_size, refit_every=refit_every, refit_steps=refit_steps,
                             refit_batch_size=refit_batch_size, refit_lr=refit_lr, seed=seed)
        self.rehearse(buffer, seed, options)
