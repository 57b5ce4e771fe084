"""Avalanche plugins: the paper's online rehearsal.

Wiring only: the plugin moves samples between the stream, the buffer and the optimizer;
which samples stay is the storage policy's business.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import qpsolvers
import torch
from avalanche.core import SupervisedPlugin
from avalanche.models import avalanche_forward
from avalanche.training.storage_policy import ExemplarsBuffer
from torch import Tensor, nn
from torch.nn import functional as F

from avalanche_gss.benchmarks.online import dataset_tensors
from avalanche_gss.gradients import LossFn, eval_mode, sample_gram
from avalanche_gss.storage import OnlineBuffer, task_labels_for

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["OnlineRehearsalPlugin", "ConstrainedUpdatePlugin", "gem_dual", "finite_loss"]


def finite_loss(loss: Tensor, owner: Any) -> bool:
    """Whether ``loss`` is finite; if not, count a skipped step on ``owner`` and warn.

    A NaN or infinite loss would make every parameter NaN at the next ``optimizer.step()``
    (and every gradient score after it); the caller skips that step instead.

    :param loss: the step's scalar loss.
    :param owner: the object whose ``skipped_steps`` counter is increased.
    """
    if bool(torch.isfinite(loss).all()):
        return True
    owner.skipped_steps += 1
    warnings.warn(
        f"{type(owner).__name__}: non-finite loss ({float(loss.detach().sum())}); "
        "the optimizer step is skipped",
        RuntimeWarning,
        stacklevel=3,
    )
    return False


class OnlineRehearsalPlugin(SupervisedPlugin):
    """Online rehearsal as in the paper and the authors' code.

    After every training iteration on the incoming batch, one more SGD step on
    ``replay_batch_size`` samples drawn from the buffer (new and replayed samples never
    share a step). After the experience, the storage policy sees the batch once, with
    the model that learnt it. With 10-sample experiences and ``train_epochs = n_iter``
    (or :class:`~avalanche_gss.strategies.OnlineTemplate`'s ``n_iter``) this is the
    paper's schedule: ``n_iter`` times (step on the batch, step on the buffer).

    A replay step whose loss is not finite is skipped (:func:`finite_loss`), and counted in
    :attr:`skipped_steps`. A buffer smaller than ``replay_batch_size`` is replayed whole.

    :param storage_policy: the buffer; an :class:`~avalanche_gss.storage.OnlineBuffer`
        (fast tensor path) or any Avalanche ``ExemplarsBuffer``.
    :param replay_batch_size: buffer samples per replay step (the authors' 10).
    :param seed: seed of the replay draws.
    """

    supports_distributed = False

    def __init__(
        self, storage_policy: ExemplarsBuffer, replay_batch_size: int = 10, *, seed: int = 0
    ) -> None:
        super().__init__()
        if replay_batch_size < 1:
            raise ValueError(f"replay_batch_size must be >= 1, got {replay_batch_size}")
        self.storage_policy = storage_policy
        self.replay_batch_size = replay_batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.skipped_steps = 0  # replay steps skipped for a non-finite loss

    def _replay_batch(self, device: torch.device | str) -> tuple[Tensor, Tensor, Tensor] | None:
        """Draw ``replay_batch_size`` distinct buffer samples: ``(x, y, t)`` on ``device``.

        A buffer whose stored tensors are what its dataset yields (no transform) is read
        from the tensors; otherwise the drawn samples are read through
        ``storage_policy.buffer``, so that a random augmentation is drawn anew.
        """
        policy = self.storage_policy
        if isinstance(policy, OnlineBuffer):
            if len(policy) == 0:
                return None
            slots = policy.sample_slots(self.replay_batch_size, self.generator)
            if policy.replays_tensors:
                x, y, t = policy.rows(slots)
                return x.to(device), y.to(device), t.to(device)
            return _read_items(policy.buffer, slots, device)
        data = policy.buffer
        if len(data) == 0:
            return None
        idx = torch.randperm(len(data), generator=self.generator)[: self.replay_batch_size]
        return _read_items(data, idx, device)

    def after_training_iteration(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """One SGD step on a replay batch (skipped while the buffer is empty)."""
        batch = self._replay_batch(strategy.device)
        if batch is None:
            return
        x, y, t = batch
        strategy.optimizer.zero_grad()
        loss = strategy._criterion(avalanche_forward(strategy.model, x, t), y)
        loss.backward()
        if finite_loss(loss, self):
            strategy.optimizer.step()

    def after_training_exp(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """The storage policy sees the experience once, after it was learnt."""
        self.storage_policy.post_adapt(strategy, strategy.experience)

    def state_dict(self) -> dict[str, Any]:
        """The replay generator, the counter and the buffer's :meth:`state_dict`.

        Tensors and plain values only (loadable with ``torch.load(weights_only=True)``).
        :raises TypeError: the storage policy has no ``state_dict`` (an Avalanche buffer).
        """
        policy_state = getattr(self.storage_policy, "state_dict", None)
        if policy_state is None:
            raise TypeError(f"{type(self.storage_policy).__name__} has no state_dict()")
        return {
            "generator": self.generator.get_state(),
            "skipped_steps": self.skipped_steps,
            "storage_policy": policy_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.generator.set_state(state["generator"])
        self.skipped_steps = int(state["skipped_steps"])
        self.storage_policy.load_state_dict(state["storage_policy"])


def gem_dual(gram: Tensor, dots: Tensor, *, margin: float, ridge: float) -> Tensor | None:
    """Solve GEM's dual QP ``min_v 1/2 v^T (G G^T + ridge I) v + (G g)^T v, v >= margin``.

    With ``margin = 0`` and ``ridge -> 0``, ``g + G^T v`` is the Euclidean projection of
    ``g`` onto the cone ``{z : G z >= 0}`` (GEM, Lopez-Paz and Ranzato 2017, Eq. 11-13).

    :param gram: ``(K, K)`` Gram ``G G^T`` of the constraint gradients ``g_i``.
    :param dots: ``(K,)`` inner products ``G g`` with the proposed update ``g``.
    :param margin: lower bound of every dual variable (GEM's ``memory_strength``).
    :param ridge: added to the diagonal, so that the QP is strictly convex (GEM's 1e-3).
    :return: the dual solution ``v`` (float64, ``(K,)``), or ``None`` if quadprog failed.
    """
    p = gram.detach().double().cpu().numpy()
    p = 0.5 * (p + p.T) + ridge * np.eye(len(p))
    q = dots.detach().double().cpu().numpy()
    try:
        v = qpsolvers.solve_qp(p, q, lb=np.full(len(q), margin), solver="quadprog")
    except (qpsolvers.QPError, ValueError) as err:
        warnings.warn(f"GEM dual QP failed ({err})", RuntimeWarning, stacklevel=2)
        return None
    return None if v is None else torch.from_numpy(np.asarray(v, dtype=np.float64))


class ConstrainedUpdatePlugin(SupervisedPlugin):
    """The constrained update of appendix C (``GSS-IQP (Constrained)``) on a buffer.

    Instead of replay steps, every training step projects the incoming batch's gradient
    ``g`` so that, to first order, it increases the loss of no buffer sample: the
    constraints ``<g~, g_i> >= 0`` for every ``(x_i, y_i)`` in ``M_b`` (paper Eq.
    constraint_grad_space), solved as GEM does. If every ``<g, g_i> >= 0`` the step is
    left alone; otherwise :func:`gem_dual` gives ``v`` and the update becomes
    ``g~ = g + G^T v``. ``G G^T`` and ``G g`` come from one per-sample Gram of
    ``[batch; buffer]`` (the gradient engine; ``g`` = mean of the batch's gradients), and
    ``G^T v`` is one weighted backward of ``sum_i v_i loss_i`` over the buffer, added to
    ``.grad`` (so other loss terms a plugin put there are kept). After each experience
    the storage policy sees the batch (e.g. GSS-IQP's selection), as with rehearsal.

    The Gram, the check and the correction use the engine's conventions (eval mode, the
    per-sample ``loss_fn``); they agree with the training step's own gradient when the
    model has no BatchNorm or dropout and the criterion is the mean of ``loss_fn``
    (the paper's MNIST MLP with cross-entropy).

    :param storage_policy: the buffer ``M_b`` whose samples are the constraints.
    :param margin: lower bound of GEM's dual variables, its ``memory_strength``. 0 (the
        default, and the authors' ``--memory_strength`` default that
        ``GSS_IQP_ConsOpt.py`` uses) is the plain projection onto the feasible cone of the
        paper's constraints. GEM's 0.5 was meant for one constraint per task: here every
        buffer sample is a constraint, so ``v >= 0.5`` adds at least ``0.5 * K`` mean
        buffer gradients to every projected step (on 5 x 60 digits, M = 40, it made the
        MLP diverge to 10% accuracy).
    :param ridge: diagonal added to ``G G^T`` (GEM's 1e-3); with it, the update satisfies
        ``<g~, g_i> >= -ridge * v_i``.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters ``theta`` of the constraints; all trainable by default.
    """

    supports_distributed = False

    def __init__(
        self,
        storage_policy: OnlineBuffer,
        *,
        margin: float = 0.0,
        ridge: float = 1e-3,
        loss_fn: LossFn | None = None,
        params: list[nn.Parameter] | None = None,
    ) -> None:
        super().__init__()
        if margin < 0:
            raise ValueError(f"margin must be >= 0, got {margin}")
        if not ridge > 0:
            raise ValueError(f"ridge must be positive, got {ridge}")
        self.storage_policy = storage_policy
        self.margin = float(margin)
        self.ridge = float(ridge)
        self.loss_fn: LossFn = loss_fn if loss_fn is not None else _cross_entropy
        self.params = params
        self.steps = 0  # training steps seen with a non-empty buffer
        self.projections = 0  # of which projected
        self.last_violations = 0  # buffer samples with <g, g_i> < 0 at the last step
        self.last_dual: Tensor | None = None  # v of the last projection

    def after_backward(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Replace ``.grad`` by the projected update when a constraint is violated."""
        policy = self.storage_policy
        if len(policy) == 0:
            return
        model = strategy.model
        x, y = strategy.mb_x, strategy.mb_y
        mbatch = getattr(strategy, "mbatch", None)
        t = mbatch[2] if mbatch is not None and len(mbatch) > 2 else torch.zeros_like(y)
        bx, by = policy.tensors()
        bx, by, bt = bx.to(x.device), by.to(y.device), policy.task_labels.to(y.device)
        b = len(y)
        params = self.params or [p for p in model.parameters() if p.requires_grad]
        labels = task_labels_for(model, torch.cat([t.to(y.device), bt]))
        gram = sample_gram(model, torch.cat([x, bx]), torch.cat([y, by]), loss_fn=self.loss_fn,
                           params=params, task_labels=labels).detach()  # (B+K, B+K)
        if not bool(torch.isfinite(gram).all()):
            warnings.warn("ConstrainedUpdatePlugin: non-finite gradients; the step is not "
                          "projected", RuntimeWarning, stacklevel=2)
            return
        dots = gram[b:, :b].mean(dim=1)  # (K,) <g_i, g>, g = mean batch gradient
        self.steps += 1
        self.last_violations = int((dots < 0).sum())
        if self.last_violations == 0:
            return
        v = gem_dual(gram[b:, b:], dots, margin=self.margin, ridge=self.ridge)  # (K,)
        if v is None:
            return
        with eval_mode(model), torch.enable_grad():
            losses = self.loss_fn(avalanche_forward(model, bx, bt), by)  # (K,)
            weighted = (losses * v.to(losses.device, losses.dtype)).sum()
            correction = torch.autograd.grad(weighted, params, allow_unused=True)  # G^T v
        with torch.no_grad():
            for p, c in zip(params, correction, strict=True):
                if c is None:
                    continue
                if p.grad is None:
                    p.grad = c.detach().clone()
                else:
                    p.grad.add_(c)
        self.projections += 1
        self.last_dual = v

    def after_training_exp(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Show the experience to the storage policy once, after it was learnt."""
        self.storage_policy.post_adapt(strategy, strategy.experience)

    def state_dict(self) -> dict[str, Any]:
        """Counters, the last dual solution and the buffer's :meth:`state_dict`."""
        return {
            "steps": self.steps,
            "projections": self.projections,
            "last_violations": self.last_violations,
            "last_dual": None if self.last_dual is None else self.last_dual.cpu(),
            "storage_policy": self.storage_policy.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.steps = int(state["steps"])
        self.projections = int(state["projections"])
        self.last_violations = int(state["last_violations"])
        self.last_dual = state["last_dual"]
        self.storage_policy.load_state_dict(state["storage_policy"])


def _read_items(
    data: Any, idx: Tensor, device: torch.device | str
) -> tuple[Tensor, Tensor, Tensor]:
    """Read ``data[i]`` for ``i`` in ``idx``: ``(x, y, t)`` on ``device``."""
    x, y, t = dataset_tensors(data, idx.tolist())
    return x.to(device), y.to(device), t.to(device)


def _cross_entropy(logits: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(logits, y, reduction="none")  # (N,)
