"""Momentum knowledge distillation (MKD): an EMA teacher distilled into the learner.

:class:`MKDPlugin` adds MKD (Michel, Wang, Xiao and Yamasaki, *Rethinking Momentum Knowledge
Distillation in Online Continual Learning*, ICML 2024) on top of any replay method: any
buffer, any loss, this library's rehearsal or Avalanche's own strategies and plugins.
:func:`distillation` is its loss term.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from avalanche.core import SupervisedPlugin
from avalanche.models import avalanche_forward
from torch import Tensor, nn

from avalanche_gss.buffers.rows import same_shapes

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["MKDPlugin", "distillation"]


def distillation(student: Tensor, teacher: Tensor, temperature: float) -> Tensor:
    """``tau^2 * mean_i KL(softmax(t_i / tau) || softmax(s_i / tau))``: Hinton's distillation.

    :param student: the learner's logits, ``(N, C)`` (gradients flow through them).
    :param teacher: the teacher's logits, ``(N, C')``; only the first ``min(C, C')`` columns
        of both are compared (a head that grew since the teacher was copied).
    :param temperature: ``tau > 0``.
    """
    width = min(student.shape[1], teacher.shape[1])
    if width < student.shape[1]:
        student = student[:, :width]
    teacher = teacher.detach()
    if width < teacher.shape[1]:
        teacher = teacher[:, :width]
    log_p = F.log_softmax(student / temperature, dim=1)
    log_q = F.log_softmax(teacher.to(student.dtype) / temperature, dim=1)
    # sum_ik q_ik (log q_ik - log p_ik) / N, in one op
    kl = F.kl_div(log_p, log_q, reduction="batchmean", log_target=True)
    return kl * temperature**2


def _check(value: object, name: str, interval: str, ok: Any) -> float:
    """``value`` as a float, if it is a finite number (not a ``bool``) for which ``ok`` holds."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not ok(value)):
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


class MKDPlugin(SupervisedPlugin):
    """Momentum knowledge distillation: the learner is pulled towards its own moving average.

    A teacher network, the exponential moving average (EMA) of the learner's weights,
    ``theta_T <- m * theta_T + (1 - m) * theta_S`` after every training iteration, gives
    logits ``z_T`` on every batch the learner trains on; the training loss gains
    ``lambda * tau^2 * KL(softmax(z_T / tau) || softmax(z_S / tau))`` (:func:`distillation`,
    the mean over the batch). The slowly moving teacher keeps what the learner knew a few
    hundred steps ago, so the learner forgets less of it (the paper's argument), at the cost
    of one teacher forward (no backward) per training forward and one copy of the weights.

    Defaults: ``temperature = 4`` and ``weight = 8`` (``lambda``) are the authors' code's
    command-line defaults (the paper tunes ``lambda`` per method and dataset);
    ``momentum = 0.99`` (the teacher's weight, the student's 0.01 per update) is our
    reading of the paper's setting, not checked against a default of its code.

    **Where the term is added.** On the incoming batch, to the strategy's loss before the
    backward pass (``before_backward``): with Avalanche's ``ReplayPlugin``, whose minibatch
    joins the replayed samples to the incoming ones, that is the whole batch, as in the
    authors' code. With :class:`~avalanche_gss.training.OnlineRehearsalPlugin`, the replay
    batch's loss gains the same term on the replay batch (:meth:`replay_term`, asked by the
    rehearsal plugin), in its separate step or in the joint one.

    Adaptations, stated:

    - one teacher (the paper studies several; its ER-MKD uses one), updated once per
      training iteration, after every step of that iteration (with the library's separate
      replay step, after the replay step): put this plugin after the rehearsal plugin
      (:class:`~avalanche_gss.training.OnlineRehearsal` puts its own plugin first);
    - the teacher starts as a copy of the learner when training starts; the authors' bias
      correction of the first updates is left out (a plain EMA);
    - the teacher runs in eval mode, with the learner's buffers (BatchNorm statistics)
      copied at each update, and without data augmentation (the authors distil on the
      augmented and the raw batch; the library's streams have no augmentation);
    - a model whose parameters change shape (a growing head) restarts the teacher from
      the learner; on the logits, only the classes both have are compared.

    State (the teacher's weights and the update count) is in :meth:`state_dict`, so that a
    checkpoint of this library (:func:`~avalanche_gss.checkpoint.save_state`) resumes it.

    :param momentum: the teacher's EMA weight ``m`` in ``[0, 1)`` (0: the teacher is the
        learner of the last iteration).
    :param temperature: the distillation's temperature ``tau > 0``, at most 100.
    :param weight: the distillation's weight ``lambda >= 0``, at most 1e6.
    :raises ValueError: a value out of its range, naming it.
    """

    model_states = ("teacher",)
    """The entries of :meth:`state_dict` that are a ``state_dict`` of the learner's
    architecture: a checkpoint's are checked against the learner before it is loaded."""

    def __init__(self, momentum: float = 0.99, temperature: float = 4.0,
                 weight: float = 8.0) -> None:
        super().__init__()
        self.momentum = _check(momentum, "momentum", "[0, 1)", lambda v: 0 <= v < 1)
        self.temperature = _check(temperature, "temperature", "(0, 100]",
                                  lambda v: 0 < v <= 100)
        self.weight = _check(weight, "weight", "[0, 1e6]", lambda v: 0 <= v <= 1e6)
        self.teacher: nn.Module | None = None
        self.updates = 0  # EMA updates so far
        self._pending: dict[str, Any] | None = None  # a loaded state, before a model is seen
        # during an experience: (learner, teacher, their parameters and buffers), checked
        self._pairs: tuple[Any, ...] | None = None

    # the teacher

    def _teacher(self, model: nn.Module) -> nn.Module:
        """The teacher, made from ``model`` (or a loaded state) when there is none yet."""
        teacher = self.teacher
        pairs = self._pairs
        if pairs is not None and pairs[0] is model and pairs[1] is teacher:
            return teacher  # checked at the start of this experience (see _pair)
        if teacher is not None and not same_shapes(teacher, model):
            teacher = None  # the learner grew: restart from it
        if teacher is None:
            teacher = copy.deepcopy(model)
            teacher.eval()
            for p in teacher.parameters():
                p.requires_grad_(False)
            if self._pending is not None:
                teacher.load_state_dict(self._pending)
                self._pending = None
            self.teacher = teacher
        return teacher

    def teacher_logits(self, model: nn.Module, x: Tensor, t: Tensor | None) -> Tensor:
        """The teacher's logits on ``x`` (task labels ``t``), without gradients.

        :param model: the learner (the teacher is made from it the first time).
        :param x: the inputs.
        :param t: their task labels (for a multi-head model), or ``None``.
        """
        teacher = self._teacher(model)
        with torch.no_grad():
            out: Tensor = (avalanche_forward(teacher, x, t) if t is not None else teacher(x))
        return out

    def _pair(self, model: nn.Module) -> None:
        """Check the teacher against ``model`` and keep both networks' tensors, in order.

        Called when an experience starts (after Avalanche adapted the model): until it
        ends, :meth:`_teacher` and :meth:`update_teacher` use these lists instead of
        walking both networks at every call. Any other call checks the shapes itself.
        """
        teacher = self._teacher(model)
        tensors = (list(teacher.parameters()), list(model.parameters()),
                   list(teacher.buffers()), list(model.buffers()))
        self._pairs = (model, teacher, *tensors)

    @torch.no_grad()
    def update_teacher(self, model: nn.Module) -> None:
        """One EMA step, ``theta_T <- m theta_T + (1 - m) theta_S``; buffers are copied.

        :param model: the learner.
        """
        teacher = self._teacher(model)
        pairs = self._pairs
        if pairs is not None and pairs[0] is model and pairs[1] is teacher:
            mine, theirs, kept, current = pairs[2:]
        else:
            mine, theirs = list(teacher.parameters()), list(model.parameters())
            kept, current = list(teacher.buffers()), list(model.buffers())
        if mine:  # the same per-tensor ops as mul_ then add_, in two calls
            torch._foreach_mul_(mine, self.momentum)
            torch._foreach_add_(mine, theirs, alpha=1.0 - self.momentum)
        for k, c in zip(kept, current, strict=True):
            k.copy_(c)
        self.updates += 1

    def term(self, model: nn.Module, x: Tensor, t: Tensor | None, out: Tensor) -> Tensor:
        """``lambda *`` :func:`distillation` of the learner's logits ``out`` on ``x``.

        :param model: the learner.
        :param x: the inputs the learner saw.
        :param t: their task labels, or ``None``.
        :param out: the learner's logits on them.
        """
        return self.weight * distillation(out, self.teacher_logits(model, x, t),
                                          self.temperature)

    # the hooks

    def before_training(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Make the teacher from the learner, if there is none yet."""
        self._teacher(strategy.model)

    def before_training_exp(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Check the teacher against the (adapted) learner once for the experience."""
        self._pairs = None
        self._pair(strategy.model)

    def after_training_exp(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Forget the experience's tensor lists (the model may change before the next)."""
        self._pairs = None

    def before_backward(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Add the distillation term on the training minibatch to the strategy's loss."""
        if not self.weight:
            return
        mbatch = strategy.mbatch
        out = strategy.mb_output
        if mbatch is None or not isinstance(out, Tensor) or out.dim() != 2:
            return
        t = mbatch[-1] if len(mbatch) >= 3 else None
        strategy.loss = strategy.loss + self.term(strategy.model, mbatch[0], t, out)

    def replay_term(self, strategy: SupervisedTemplate, x: Tensor, t: Tensor,
                    out: Tensor) -> Tensor | None:
        """The term on a replay batch, for the rehearsal plugin (``None`` with weight 0).

        :param strategy: the strategy.
        :param x: the replayed inputs.
        :param t: their task labels.
        :param out: the learner's logits on them.
        """
        if not self.weight:
            return None
        return self.term(strategy.model, x, t, out)

    def after_training_iteration(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """The teacher's EMA step, after the iteration's updates."""
        self.update_teacher(strategy.model)

    # state

    def state_dict(self) -> dict[str, Any]:
        """The teacher's weights and buffers (empty before it exists) and the update count."""
        teacher = self.teacher
        weights = self._pending if teacher is None else teacher.state_dict()
        return {"teacher": {k: v.detach().clone() for k, v in (weights or {}).items()},
                "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the teacher is built at its next use).

        :param state: what :meth:`state_dict` returned.
        """
        weights = dict(state["teacher"])
        self.updates = int(state["updates"])
        self._pairs = None
        if self.teacher is not None and weights:
            self.teacher.load_state_dict(weights)
            self._pending = None
        else:
            self.teacher = None
            self._pending = weights or None
