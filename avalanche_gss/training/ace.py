"""ER-ACE's asymmetric cross-entropy: a criterion for the rehearsal of any buffer.

:class:`AsymmetricCrossEntropy` is the loss of ER-ACE (Caccia, Aljundi, Asadi, Tuytelaars,
Pineau and Belilovsky, *New Insights on Reducing Abrupt Representation Change in Online
Continual Learning*, ICLR 2022). Give it as the strategy's ``criterion`` with
:class:`~avalanche_gss.training.OnlineRehearsal` (any buffer) or with
:class:`~avalanche_gss.training.OnlineRehearsalPlugin` in any Avalanche strategy: the
plugin learns the incoming batch with the criterion itself and the replay batch with
:func:`replay_criterion` of it, so each gets its half of the loss.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["AsymmetricCrossEntropy", "replay_criterion"]


class AsymmetricCrossEntropy(nn.CrossEntropyLoss):
    """ER-ACE's loss: the incoming batch against its own classes, the replay batch against all.

    For an incoming batch ``(x_i, y_i)`` whose labels hold the classes ``C_in``, the loss
    is the cross-entropy of the logits restricted to ``C_in``,
    ``mean_i [ log sum_{k in C_in} exp z_ik - z_iy_i ]`` (the logits of the classes absent
    from the batch are masked out: the incoming samples do not push down the logits of
    the classes that only the buffer holds, which is what makes the old classes'
    representations drift when new ones arrive). A replay batch is learnt with the
    ordinary cross-entropy over all the logits (:meth:`replay`; the rehearsal plugin asks
    for it through :func:`replay_criterion`). With the rehearsal's ``joint=True``
    (one SGD step on the incoming and the replay batch) this is ER-ACE's step,
    ``L_ACE = L_in + L_replay``; with the default separate steps, each step learns its
    half. It costs what the plain cross-entropy costs: one mask of the batch's classes,
    built on the device (no read of the labels on the host).

    Adaptations, stated:

    - the incoming loss is masked from the first step on, as the paper's equation says;
      the authors' code and Avalanche's ``ER_ACE`` (which learns whole experiences) use
      the plain cross-entropy on the first task, a boundary a task-free stream does not
      have (on an incoming batch of a single class the masked loss is 0: that batch is
      learnt through the buffer only);
    - the authors' code also leaves unmasked the classes above the largest seen so far
      (the future ones, in their fixed class order); no class order is assumed here: every
      class absent from the batch is masked, as in Avalanche's ``ACECriterion``;
    - the two terms are summed, as in the authors' code (Avalanche's ``ACECriterion``
      averages them: the same step at twice the learning rate);
    - the replay term is the cross-entropy over all the model's outputs (the authors' and
      Avalanche's code); outputs of classes not seen yet are pushed down by it.

    Without gradients (``torch.no_grad``, as Avalanche evaluates), or on logits that do
    not require them, it is the plain cross-entropy: the masking is a training device.
    With Avalanche's ``ReplayPlugin``, which joins the replayed samples to the incoming
    minibatch, the two cannot be told apart: use
    :class:`~avalanche_gss.training.OnlineRehearsalPlugin` (``joint=True`` for ER-ACE's
    single step) with any buffer, ours or Avalanche's.

    :param reduction: ``"mean"`` (the default), ``"sum"`` or ``"none"``, as
        ``nn.CrossEntropyLoss``'s.
    """

    def __init__(self, reduction: str = "mean") -> None:
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        super().__init__(reduction=reduction)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002 (torch's name)
        """The incoming batch's loss when training, else the plain cross-entropy.

        :param input: the logits, ``(N, num_classes)``.
        :param target: class labels, ``(N,)``.
        """
        if torch.is_grad_enabled() and input.requires_grad:
            return self.incoming(input, target)
        return self.replay(input, target)

    def incoming(self, logits: Tensor, y: Tensor) -> Tensor:
        """The cross-entropy of ``logits`` restricted to the classes ``y`` holds.

        :param logits: ``(N, num_classes)``.
        :param y: class labels, ``(N,)`` integers in ``[0, num_classes)``.
        """
        if logits.dim() != 2:
            raise ValueError(f"logits must be (N, num_classes), got shape {tuple(logits.shape)}")
        present = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
        present[y] = True
        masked = logits.masked_fill(~present, float("-inf"))
        return F.cross_entropy(masked, y, reduction=self.reduction)

    def replay(self, logits: Tensor, y: Tensor) -> Tensor:
        """The ordinary cross-entropy over all the logits (the replay batch's loss).

        :param logits: ``(N, num_classes)``.
        :param y: class labels, ``(N,)``.
        """
        return F.cross_entropy(logits, y, reduction=self.reduction)

    def for_replay(self) -> nn.CrossEntropyLoss:
        """The loss of replayed samples, as a module: the plain cross-entropy."""
        return nn.CrossEntropyLoss(reduction=self.reduction)


def replay_criterion(criterion: Any) -> Any:
    """The loss a replay batch is learnt with, for the strategy's ``criterion``.

    A criterion that learns replayed samples differently from incoming ones says so with a
    ``for_replay()`` method (:class:`AsymmetricCrossEntropy`); any other is used as it is.

    :param criterion: the strategy's loss module.
    """
    # looked up on the class: a module's missing attribute raises (and formats) an error
    if callable(getattr(type(criterion), "for_replay", None)):
        return criterion.for_replay()
    return criterion
