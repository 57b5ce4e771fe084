"""Logit-adjusted cross-entropy: the training loss of Logit Adjusted Softmax (LAS).

:class:`LogitAdjustedLoss` is a criterion for any Avalanche strategy
(``criterion=LogitAdjustedLoss()``); :func:`~avalanche_gss.experiments.run` uses it when a
run's ``logit_adjustment`` is above 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LogitAdjustedLoss"]


class LogitAdjustedLoss(nn.Module):
    """Cross-entropy of ``z + tau * log(c)``, ``c`` the counts of the recent training labels.

    Huang, Li, Yuan, Wu and Huang, *Online Continual Learning via Logit Adjusted Softmax*,
    TMLR 2024 (after Menon et al.'s logit adjustment, ICLR 2021). A learner trained on a
    stream whose class frequencies move learns those frequencies into its logits: it
    favours the classes it saw last. Training on the logits ``z`` shifted by ``tau`` times
    the log of the label frequencies ``pi`` of the recent training batches, and predicting
    with ``z`` alone, learns the classifier of the class-balanced error instead: a class
    that fills the recent batches needs a smaller margin to be learnt, and is pushed up
    less. It costs no forward or backward pass.

    **The prior.** ``c_k`` counts the label ``k`` among the last ``window`` samples this
    loss was called on with gradients (every training step: the incoming batch's and the
    replay batch's), the batch being learnt included; the adjustment is
    ``tau * log(c_k + 1e-3)`` (softmax is unchanged by the normalisation of ``pi``), so a
    class absent from the window gets ``tau * log(1e-3)`` and is all but left out of the
    softmax, as the authors' ``1e-50`` leaves it. This library's rehearsal learns the
    incoming and the replay batch in separate steps, while the authors' ER-LAS learns
    them joined; so the window counts samples (both steps' labels), not the authors'
    ``window_length`` training batches. ``window = 1000`` is about 17 incoming batches of
    10 samples at 3 iterations each, with their replay batches.

    **Evaluation.** A call without gradients (``torch.no_grad``, as Avalanche evaluates)
    is the plain cross-entropy of ``z`` and counts nothing: the adjustment is a training
    device only, as in the paper.

    State (the window of labels) is in :meth:`state_dict`; checkpoints of this library
    save it with the strategy (:func:`~avalanche_gss.checkpoint.save_state`).

    :param tau: the adjustment's strength (the paper's ``tau``; ``1`` is its default and
        the Bayes-optimal one; ``0`` is the plain cross-entropy).
    :param window: how many recent training labels estimate the prior.
    :raises ValueError: a negative or non-finite ``tau``, or ``window < 1``.
    """

    eps = 1e-3
    """Added to each count before the log: the adjustment of a class absent from the window."""

    recent: Tensor
    filled: Tensor

    def __init__(self, tau: float = 1.0, window: int = 1000) -> None:
        super().__init__()
        if not (isinstance(tau, (int, float)) and 0 <= tau < float("inf")):
            raise ValueError(f"tau must be a finite number >= 0, got {tau!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an integer >= 1, got {window!r}")
        self.tau = float(tau)
        self.window = window
        self.register_buffer("recent", torch.full((window,), -1, dtype=torch.long))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))

    def counts(self, num_classes: int) -> Tensor:
        """The counts ``c_k`` of each label among the recent training labels, ``(num_classes,)``.

        :param num_classes: the number of logits (labels beyond it are not counted).
        """
        seen = self.recent[self.recent >= 0]
        return torch.bincount(seen, minlength=num_classes)[:num_classes].to(torch.float32)

    def observe(self, y: Tensor) -> None:
        """Add the labels ``y`` to the window (the oldest leave it).

        :param y: class labels, ``(N,)``.
        """
        y = y.detach().reshape(-1).to(self.recent.device, torch.long)[-self.window:]
        start = int(self.filled)
        positions = (start + torch.arange(len(y))) % self.window
        self.recent[positions] = y
        self.filled += len(y)

    def adjustment(self, num_classes: int) -> Tensor:
        """``tau * log(c + 1e-3)``, added to the logits in training, ``(num_classes,)``.

        :param num_classes: the number of logits.
        """
        return self.tau * torch.log(self.counts(num_classes) + self.eps)

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        """The mean cross-entropy of the adjusted logits (of ``logits`` without gradients).

        :param logits: the model's outputs, ``(N, num_classes)``.
        :param y: class labels, ``(N,)``.
        """
        if torch.is_grad_enabled() and logits.requires_grad:
            self.observe(y)
            logits = logits + self.adjustment(logits.shape[1]).to(logits.device, logits.dtype)
        return F.cross_entropy(logits, y)

    def extra_repr(self) -> str:
        """``tau`` and ``window``, in the module's ``repr``."""
        return f"tau={self.tau}, window={self.window}"
