"""Logit-adjusted cross-entropy: the training loss of Logit Adjusted Softmax (LAS).

:class:`LogitAdjustedLoss` is a criterion for any Avalanche strategy
(``criterion=LogitAdjustedLoss()``); :func:`~avalanche_gss.reproduce.runs.training.run` uses it
when a
run's ``logit_adjustment`` is above 0.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["MAX_TAU", "MAX_WINDOW", "LogitAdjustedLoss", "check_tau", "check_window"]

MAX_TAU = 100.0
"""The largest ``tau``: the paper's is 1, and ``100 * log(c + 1e-3)`` (at most about 1,800
in size for a window of :data:`MAX_WINDOW` labels) stays finite and far from float32's and
even float16's range; a larger ``tau`` leaves the logits nothing to learn against the prior."""

MAX_WINDOW = 10**7
"""The largest ``window``: its ring of int64 labels takes 8 bytes a label, 80 MB here, on
the training device (a training call updates only the counts of the labels it adds and
the labels these push out)."""


def check_tau(value: object, name: str = "tau") -> float:
    """``value`` as the adjustment's ``tau``, a number in ``[0, MAX_TAU]``.

    :param value: the ``tau`` given.
    :param name: how the caller names it, in the message.
    :return: ``value`` as a float.
    :raises ValueError: not a finite number >= 0 (``bool`` included), or above
        :data:`MAX_TAU`; one line naming it.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value < float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if value > MAX_TAU:
        raise ValueError(f"{name} must be at most {MAX_TAU:g} (the paper's tau is 1; a larger "
                         f"one drowns the logits in the prior), got {value!r}")
    return float(value)


def check_window(value: object, name: str = "window") -> int:
    """``value`` as the prior's ``window``, an integer in ``[1, MAX_WINDOW]``.

    :param value: the ``window`` given.
    :param name: how the caller names it, in the message.
    :return: ``value`` as an int.
    :raises ValueError: not an integer >= 1 (``bool`` included), or above
        :data:`MAX_WINDOW`, with the bytes its labels would take; one line naming it.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if value > MAX_WINDOW:
        raise ValueError(f"{name} must be at most {MAX_WINDOW:,} labels, got {value:,}: its "
                         f"int64 labels would take {8 * value:,} bytes")
    return int(value)


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
    save it with the strategy (:func:`~avalanche_gss.checkpoint.save_state`). The counts
    ``c_k`` are kept as a running tally, updated as labels enter and leave the window
    (``O(N)`` per call of ``N`` labels, not ``O(window)``); they are not saved but rebuilt
    from the window when a state is loaded, so the state is the window alone.

    **Refused calls.** Logits that are not ``(N, num_classes)``, labels that are not ``N``
    integers in ``[0, num_classes)`` raise a ``ValueError`` naming the bad value, before
    anything is counted: a refused call changes no state.

    :param tau: the adjustment's strength (the paper's ``tau``; ``1`` is its default and
        the Bayes-optimal one; ``0`` is the plain cross-entropy), at most :data:`MAX_TAU`.
    :param window: how many recent training labels estimate the prior, at most
        :data:`MAX_WINDOW` (8 bytes each, on the module's device).
    :raises ValueError: a negative, non-finite or too large ``tau``, or a ``window`` below
        1 or too large (:func:`check_tau`, :func:`check_window`).
    """

    eps = 1e-3
    """Added to each count before the log: the adjustment of a class absent from the window."""

    recent: Tensor
    filled: Tensor
    tally: Tensor

    def __init__(self, tau: float = 1.0, window: int = 1000) -> None:
        super().__init__()
        self.tau = check_tau(tau)
        self.window = check_window(window)
        self.register_buffer("recent", torch.full((self.window,), -1, dtype=torch.long))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        # the count of each label in the window (index = label), grown as labels come;
        # derived from ``recent``, so not saved (rebuilt in _load_from_state_dict)
        self.register_buffer("tally", torch.zeros(0, dtype=torch.long), persistent=False)
        self._filled_host: int | None = 0  # ``filled`` as a host int (None: read it)

    def counts(self, num_classes: int) -> Tensor:
        """The counts ``c_k`` of each label among the recent training labels, ``(num_classes,)``.

        :param num_classes: the number of logits (labels beyond it are not counted).
        """
        counts = self.tally[:num_classes]
        if len(counts) < num_classes:  # classes no label of the window has reached yet
            counts = torch.cat([counts, counts.new_zeros(num_classes - len(counts))])
        return counts.to(torch.float32)

    def observe(self, y: Tensor) -> None:
        """Add the labels ``y`` to the window (the oldest leave it).

        :param y: class labels, ``(N,)`` integers >= 0.
        :raises ValueError: ``y`` is not that, naming the bad value; nothing is counted then.
        """
        _check_labels(y)
        low, high = torch.stack([y.min(), y.max()]).tolist() if len(y) else (0, -1)
        if low < 0:
            raise ValueError(f"labels must be >= 0, got {low}")
        self._push(y, int(high))

    def _push(self, y: Tensor, high: int) -> None:
        """Write the checked labels ``y`` (the largest ``high``) into the window and the tally.

        The labels the new ones overwrite leave the tally, the new ones enter it.
        """
        device = self.recent.device
        y = y.detach().to(device, torch.long)
        if len(y) > self.window:
            y = y[-self.window:]
        n = len(y)
        if high >= len(self.tally):  # a label beyond the tally: grow it (rare)
            self.tally = torch.cat([self.tally, self.tally.new_zeros(high + 1 - len(self.tally))])
        filled = getattr(self, "_filled_host", None)
        if filled is None:  # one read of the count, after a load (then kept on the host)
            filled = self._filled_host = int(self.filled)
        start = filled % self.window
        ones = torch.ones_like(y)
        if start + n <= self.window:  # the usual case: one slice of the window
            slot = self.recent[start : start + n]
            if filled >= self.window:  # a full window: each overwritten label leaves
                self.tally.index_add_(0, slot, ones, alpha=-1)
            # (not full: start == filled, and the slice holds no label yet)
            self.tally.index_add_(0, y, ones)
            slot.copy_(y)
        else:  # the labels wrap around the window's end
            positions = (start + torch.arange(n, device=device)) % self.window
            old = self.recent[positions]  # -1 where the window was not full yet
            self.tally.index_add_(0, old.clamp(min=0), -(old >= 0).to(torch.long))
            self.tally.index_add_(0, y, ones)
            self.recent[positions] = y
        self.filled += n
        self._filled_host = filled + n

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        """Load the window, then rebuild the tally from it (the tally is not saved)."""
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._filled_host = None  # read again at the next call
        seen = self.recent[self.recent >= 0]
        self.tally = torch.bincount(seen, minlength=0) if len(seen) else \
            torch.zeros(0, dtype=torch.long, device=self.recent.device)

    def adjustment(self, num_classes: int) -> Tensor:
        """``tau * log(c + 1e-3)``, added to the logits in training, ``(num_classes,)``.

        :param num_classes: the number of logits.
        """
        # in place on the new float tensor: the same ops as tau * log(c + eps)
        return self.counts(num_classes).add_(self.eps).log_().mul_(self.tau)

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        """The mean cross-entropy of the adjusted logits (of ``logits`` without gradients).

        :param logits: the model's outputs, ``(N, num_classes)``.
        :param y: class labels, ``(N,)`` integers in ``[0, num_classes)``.
        :raises ValueError: ``logits`` or ``y`` is not that, naming the bad value; nothing is
            counted then.
        """
        high = _check_call(logits, y)
        if torch.is_grad_enabled() and logits.requires_grad:
            self._push(y, high)
            logits = logits + self.adjustment(logits.shape[1]).to(logits.device, logits.dtype)
        return F.cross_entropy(logits, y)

    def extra_repr(self) -> str:
        """``tau`` and ``window``, in the module's ``repr``."""
        return f"tau={self.tau}, window={self.window}"


def _check_labels(y: Tensor) -> None:
    """Refuse labels that are not a 1-D tensor of integers (no read of their values)."""
    if not isinstance(y, Tensor):
        raise ValueError(f"labels must be a tensor of class indices, got {type(y).__name__}")
    if y.dtype == torch.bool or y.dtype.is_floating_point or y.dtype.is_complex:
        raise ValueError(f"labels must be integer class indices, got dtype {y.dtype}")
    if y.dim() != 1:
        raise ValueError(f"labels must be one class index per sample, shape (N,), got shape "
                         f"{tuple(y.shape)}")


def _check_call(logits: Tensor, y: Tensor) -> int:
    """Refuse a call whose labels the logits cannot score (one read of their least and most).

    :return: the largest label (``-1`` for no label).
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be (N, num_classes), got shape {tuple(logits.shape)}")
    _check_labels(y)
    n, classes = logits.shape
    if len(y) != n:
        raise ValueError(f"{len(y)} labels for {n} rows of logits: one label per row")
    if n:
        low, high = torch.stack(torch.aminmax(y)).tolist()
        bad = low if low < 0 else high if high >= classes else None
        if bad is not None:
            raise ValueError(f"label {bad} is outside the logits' {classes} classes "
                             f"(0 to {classes - 1})")
        return int(high)
    return -1
