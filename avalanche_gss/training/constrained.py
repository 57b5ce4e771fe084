"""The constrained update of appendix C: the buffer as GEM constraints instead of replay."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import qpsolvers
import torch
from avalanche.core import SupervisedPlugin
from avalanche.models import avalanche_forward
from torch import Tensor, nn

from avalanche_gss.buffers import OnlineBuffer, task_labels_for
from avalanche_gss.gradients import LossFn, cross_entropy_per_sample, eval_mode, sample_gram

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["ConstrainedUpdatePlugin", "gem_dual"]


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
        self.loss_fn: LossFn = loss_fn if loss_fn is not None else cross_entropy_per_sample
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
