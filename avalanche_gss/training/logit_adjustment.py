"""Logit-adjusted cross-entropy: the training loss of Logit Adjusted Softmax (LAS).

:class:`LogitAdjustedLoss` is a criterion for any Avalanche strategy
(``criterion=LogitAdjustedLoss()``); :func:`~avalanche_gss.reproduce.runs.training.run` uses it
when a
run's ``logit_adjustment`` is above 0.
"""

from __future__ import annotations

from array import array
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
the training device and as much again on the host (a training call updates only the
counts of the labels it adds and the labels these push out)."""


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
    from the window when a state is loaded, so the state is the window alone. A training
    call touches no tensor but the logits: the window is kept on the host too, and the
    buffers ``recent`` and ``filled`` are written from it when they are read or saved.

    **Refused calls.** Logits that are not ``(N, num_classes)``, labels that are not ``N``
    integers in ``[0, num_classes)`` raise a ``ValueError`` naming the bad value, before
    anything is counted: a refused call changes no state.

    :param tau: the adjustment's strength (the paper's ``tau``; ``1`` is its default and
        the Bayes-optimal one; ``0`` is the plain cross-entropy), at most :data:`MAX_TAU`.
    :param window: how many recent training labels estimate the prior, at most
        :data:`MAX_WINDOW` (8 bytes each, on the module's device and on the host).
    :raises ValueError: a negative, non-finite or too large ``tau``, or a ``window`` below
        1 or too large (:func:`check_tau`, :func:`check_window`).
    """

    eps = 1e-3
    """Added to each count before the log: the adjustment of a class absent from the window."""

    recent: Tensor
    filled: Tensor

    def __init__(self, tau: float = 1.0, window: int = 1000) -> None:
        super().__init__()
        self.tau = check_tau(tau)
        self.window = check_window(window)
        self.register_buffer("recent", torch.full((self.window,), -1, dtype=torch.long))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        # the count of each label in the window (index = label), grown as labels come, on
        # the host; derived from ``recent``, so not saved (rebuilt in _load_from_state_dict)
        self._tally: list[int] = []
        self._filled_host: int | None = 0  # ``filled`` as a host int (None: read it)
        # ``recent`` on the host (None: read it), so that a call reads no label back
        self._ring: array[int] | None = None
        self._synced = True  # ``recent`` and ``filled`` hold what the host copy holds
        # the adjustment of each count, ``tau * log(c + eps)`` as float32 values, grown as
        # counts grow (the key: the tau and eps it was computed with)
        self._table: list[float] = []
        self._table_key: tuple[float, float] | None = None

    @property
    def tally(self) -> Tensor:
        """The count of each label in the window (index = label), int64 on its device."""
        return torch.tensor(self._tally, dtype=torch.long, device=self.recent.device)

    def counts(self, num_classes: int) -> Tensor:
        """The counts ``c_k`` of each label among the recent training labels, ``(num_classes,)``.

        :param num_classes: the number of logits (labels beyond it are not counted).
        """
        # exact: every count is below 2**24
        return torch.tensor(self._counts(num_classes), dtype=torch.float32,
                            device=self.recent.device)

    def _counts(self, num_classes: int) -> list[int]:
        """:meth:`counts` as host ints."""
        counts = self._tally[:num_classes]
        if len(counts) < num_classes:  # classes no label of the window has reached yet
            counts = counts + [0] * (num_classes - len(counts))
        return counts

    def observe(self, y: Tensor) -> None:
        """Add the labels ``y`` to the window (the oldest leave it).

        :param y: class labels, ``(N,)`` integers >= 0.
        :raises ValueError: ``y`` is not that, naming the bad value; nothing is counted then.
        """
        _check_labels(y)
        labels = y.tolist()  # one read of the labels
        low = min(labels, default=0)
        if low < 0:
            raise ValueError(f"labels must be >= 0, got {low}")
        self._push(labels)

    def _push(self, labels: list[int]) -> None:
        """Add the checked ``labels`` (host ints) to the window's host copy.

        The labels the new ones overwrite leave the tally, the new ones enter it. Nothing
        touches a tensor: ``recent`` and ``filled`` are written from the host copy when
        they are read or saved (:meth:`_sync`).
        """
        state = self.__dict__  # (read and written directly: Module.__setattr__ is slow)
        window = self.window
        if len(labels) > window:
            labels = labels[-window:]
        n = len(labels)
        filled = state.get("_filled_host")
        if filled is None:  # one read of the count, after a load (then kept on the host)
            filled = int(self.get_buffer("filled"))
        ring = self._host_ring()
        tally = self._tally
        if labels and max(labels) >= len(tally):  # a label beyond the tally: grow it (rare)
            tally.extend([0] * (max(labels) + 1 - len(tally)))
        start = filled % window
        end = min(start + n, window)
        for old in ring[start:end]:  # -1 where the window is not full yet
            if old >= 0:
                tally[old] -= 1
        ring[start:end] = array("q", labels[: end - start])
        if end - start < n:  # the labels wrap around the window's end
            rest = n - (end - start)
            for old in ring[:rest]:
                if old >= 0:
                    tally[old] -= 1
            ring[:rest] = array("q", labels[end - start :])
        for label in labels:
            tally[label] += 1
        state["_filled_host"] = filled + n
        state["_synced"] = False

    def _host_ring(self) -> array[int]:
        """``recent``'s labels on the host (read once after a load, then kept in step)."""
        ring = self.__dict__.get("_ring")
        if ring is None:
            ring = self._ring = array("q", self.get_buffer("recent").tolist())
        return ring

    def _sync(self) -> None:
        """Write the host copy of the window into ``recent`` and ``filled``, if it moved on."""
        if getattr(self, "_synced", True):
            return
        recent, filled = self._buffers["recent"], self._buffers["filled"]
        assert recent is not None and filled is not None
        assert self._ring is not None and self._filled_host is not None
        recent.copy_(torch.frombuffer(self._ring, dtype=torch.long))
        filled.fill_(self._filled_host)
        self._synced = True

    def __getattr__(self, name: str) -> Any:
        """``recent`` and ``filled`` as the window is now (:meth:`_sync` first)."""
        if name in ("recent", "filled"):
            self._sync()
        return super().__getattr__(name)

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str,
                            keep_vars: bool) -> None:
        """Save the window as it is now (:meth:`_sync` first)."""
        self._sync()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        """Load the window, then rebuild the tally from it (the tally is not saved)."""
        self._sync()  # a key left out of the state keeps the current window
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._filled_host = None  # read again at the next call
        self._ring = None
        seen = self.recent[self.recent >= 0]
        self._tally = torch.bincount(seen).tolist() if len(seen) else []

    def adjustment(self, num_classes: int) -> Tensor:
        """``tau * log(c + 1e-3)``, added to the logits in training, ``(num_classes,)``.

        :param num_classes: the number of logits.
        """
        return torch.tensor(self._adjustments(num_classes), dtype=torch.float32,
                            device=self.recent.device)

    def _adjustments(self, num_classes: int) -> list[float]:
        """:meth:`adjustment`'s values as host floats, looked up by count.

        The table holds ``tau * log(c + eps)`` for the counts ``c`` up to the largest seen,
        computed by the float32 tensor ops of the formula: elementwise, so each value is
        the one those ops give on a tensor of counts, bit for bit.
        """
        counts = self._counts(num_classes)
        key = (self.tau, self.eps)
        same = getattr(self, "_table_key", None) == key  # else tau changed: a new table
        table: list[float] = self._table if same else []
        high = max(counts, default=0)
        if high >= len(table):
            size = min(max(2 * len(table), high + 1, 1024), self.window + 1)
            size = max(size, high + 1)
            table = torch.arange(size, dtype=torch.float32).add_(self.eps).log_() \
                .mul_(self.tau).tolist()
            self._table, self._table_key = table, key
        return [table[c] for c in counts]

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        """The mean cross-entropy of the adjusted logits (of ``logits`` without gradients).

        :param logits: the model's outputs, ``(N, num_classes)``.
        :param y: class labels, ``(N,)`` integers in ``[0, num_classes)``.
        :raises ValueError: ``logits`` or ``y`` is not that, naming the bad value; nothing is
            counted then.
        """
        training = torch.is_grad_enabled() and logits.requires_grad
        labels = _check_call(logits, y, read_all=training)
        if training:
            assert labels is not None
            self._push(labels)
            # a tensor over a new host array: cheaper to build than torch.tensor(list)
            shift = torch.frombuffer(array("f", self._adjustments(logits.shape[1])),
                                     dtype=torch.float32)
            logits = logits + shift.to(logits.device, logits.dtype)
        return F.cross_entropy(logits, y)

    def extra_repr(self) -> str:
        """``tau`` and ``window``, in the module's ``repr``."""
        return f"tau={self.tau}, window={self.window}"


def _check_labels(y: Tensor) -> None:
    """Refuse labels that are not a 1-D tensor of integers (no read of their values)."""
    if not isinstance(y, Tensor):
        raise ValueError(f"labels must be a tensor of class indices, got {type(y).__name__}")
    dtype = y.dtype
    if dtype is not torch.long and (dtype == torch.bool or dtype.is_floating_point
                                    or dtype.is_complex):
        raise ValueError(f"labels must be integer class indices, got dtype {dtype}")
    if y.dim() != 1:
        raise ValueError(f"labels must be one class index per sample, shape (N,), got shape "
                         f"{tuple(y.shape)}")


def _check_call(logits: Tensor, y: Tensor, *, read_all: bool = False) -> list[int] | None:
    """Refuse a call whose labels the logits cannot score (one read of the labels).

    :param read_all: read every label on the host (and return them); else only the least
        and the most.
    :return: the labels as host ints with ``read_all``, else ``None``.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be (N, num_classes), got shape {tuple(logits.shape)}")
    _check_labels(y)
    n, classes = logits.shape
    if len(y) != n:
        raise ValueError(f"{len(y)} labels for {n} rows of logits: one label per row")
    labels = None
    if read_all:
        labels = y.tolist()
        low, high = (min(labels), max(labels)) if n else (0, -1)
    elif n:
        low, high = torch.stack(torch.aminmax(y)).tolist()
    else:
        low, high = 0, -1
    bad = low if low < 0 else high if high >= classes else None
    if bad is not None:
        raise ValueError(f"label {bad} is outside the logits' {classes} classes "
                         f"(0 to {classes - 1})")
    return labels
