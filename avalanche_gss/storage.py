"""Avalanche storage policies (``ExemplarsBuffer`` subclasses) for the paper's buffers.

:class:`OnlineBuffer` owns the storage (tensors of inputs, labels and scores), its
invariants (never more than ``max_size`` samples, filled contiguously from slot 0) and
its state; each policy contributes one decision, :meth:`OnlineBuffer._assign`, that says
which slot each new sample takes. The decisions themselves are the pure tensor code of
:mod:`avalanche_gss.selection`.

The buffers work with :class:`~avalanche_gss.plugins.OnlineRehearsalPlugin` (the paper's
online rehearsal), and also as ``storage_policy`` of Avalanche's own ``ReplayPlugin``,
which reads :attr:`OnlineBuffer.buffer` as an ``AvalancheDataset``.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal

import torch
from avalanche.benchmarks.utils import AvalancheDataset
from avalanche.benchmarks.utils.classification_dataset import (
    _make_taskaware_tensor_classification_dataset,
)
from avalanche.training.storage_policy import ExemplarsBuffer
from torch import Tensor, nn

from avalanche_gss.benchmarks.online import experience_tensors
from avalanche_gss.gradients import cosine_from_gram, eval_mode, group_gram, sample_gram
from avalanche_gss.selection.clust import (
    DoublingClustering,
    feature_distance,
    gradient_distance,
)
from avalanche_gss.selection.greedy import CandidateDraw, Gate, greedy_scores, greedy_slots
from avalanche_gss.selection.iqp import IQPResult, select_iqp
from avalanche_gss.selection.rand import rand_slots
from avalanche_gss.selection.reservoir import reservoir_slots

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = [
    "OnlineBuffer",
    "ReservoirBuffer",
    "RandBuffer",
    "GSSGreedyBuffer",
    "RecentMergeBuffer",
    "GSSIQPBuffer",
    "GSSClustBuffer",
    "FSSClustBuffer",
]

logger = logging.getLogger(__name__)


class OnlineBuffer(ExemplarsBuffer):
    """A fixed-size replay buffer of tensors, updated one incoming batch at a time.

    Subclasses implement :meth:`_assign`. The buffer sees each batch once, through
    :meth:`post_adapt` (Avalanche's storage-policy hook: the plugin calls it after the
    model learnt the batch) or directly through :meth:`add`.

    Bad input never reaches the storage: labels must be non-negative integers and inputs
    must have the stored inputs' shape (``ValueError``, the buffer unchanged); samples with
    a NaN or infinite input value are not stored (a ``RuntimeWarning`` says how many).
    :attr:`n_rejected` counts them, with the samples a gradient-scored policy refuses
    because their gradient is not finite.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's own ``torch.Generator`` (saved in :meth:`state_dict`).
    """

    scored = False
    """Whether the policy keeps a meaningful score per stored sample (``self.scores``)."""

    def __init__(self, max_size: int, *, seed: int = 0) -> None:
        if int(max_size) < 1:
            raise ValueError(f"buffer size must be >= 1, got {max_size}")
        super().__init__(int(max_size))
        self.generator = torch.Generator().manual_seed(seed)
        self.x: Tensor | None = None  # (M, *input_shape) once the first batch arrived
        self.y: Tensor | None = None  # (M,)
        self.scores: Tensor | None = None  # (M,) float, for policies that score samples
        self.size = 0
        self.n_seen = 0
        self.n_rejected = 0  # samples refused for a non-finite input or gradient
        self._dataset: AvalancheDataset | None = None
        self.last_slots: Tensor | None = None  # slots taken by the last batch (-1: not stored)

    # ------------------------------------------------------------------ decisions
    def _assign(self, x: Tensor, y: Tensor, model: nn.Module | None) -> Tensor:
        """Return the slot of each new sample (``-1``: not stored); slots are distinct.

        Slots ``< size`` overwrite stored samples; the others must continue the filled
        range without holes. Policies that keep scores set ``self._new_scores`` to the
        ``(B,)`` scores of the new samples.
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ updates
    def add(self, x: Tensor, y: Tensor, model: nn.Module | None = None) -> Tensor:
        """Offer a batch to the buffer.

        :param x: ``(B, *input_shape)`` inputs.
        :param y: ``(B,)`` integer labels.
        :param model: the learner, for policies that score samples by its gradients.
        :return: ``(B,)`` slot taken by each sample, ``-1`` where it was not stored.
        """
        finite = self._check_batch(x, y, self.x)
        if len(y) == 0:
            return torch.empty(0, dtype=torch.long)
        slots = torch.full((len(y),), -1, dtype=torch.long)
        if finite is not None:  # samples with NaN/inf inputs are not offered
            x, y = x[finite.to(x.device)], y[finite.to(y.device)]
        if len(y):
            self._new_scores: Tensor | None = None
            assigned = self._assign(x, y, model).cpu()
            self._store(x, y, assigned, self._new_scores)
            self.n_seen += len(y)
            if finite is None:
                slots = assigned
            else:
                slots[finite] = assigned
        self.last_slots = slots
        return slots

    def _check_batch(self, x: Tensor, y: Tensor, ref: Tensor | None) -> Tensor | None:
        """Validate a batch; return the ``(B,)`` mask of its finite samples (``None``: all).

        :param x: ``(B, *input_shape)`` inputs.
        :param y: ``(B,)`` labels.
        :param ref: stored inputs whose shape ``x`` must match, if any.
        :raises ValueError: sizes or shapes disagree, or labels are not non-negative integers.
        """
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"{x.shape[0]} inputs but {y.shape[0]} labels")
        if ref is not None and x.shape[1:] != ref.shape[1:]:
            raise ValueError(
                f"inputs of shape {tuple(x.shape[1:])} do not match the buffer's "
                f"{tuple(ref.shape[1:])}"
            )
        if y.dim() != 1 or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise ValueError(
                f"labels must be a 1-D integer tensor, got {y.dtype} of shape {tuple(y.shape)}"
            )
        if len(y) == 0:
            return None
        if int(y.min()) < 0:
            raise ValueError(f"labels must be >= 0, got {int(y.min())}")
        if not x.is_floating_point():
            return None
        finite = torch.isfinite(x.reshape(len(y), -1)).all(dim=1).cpu()  # (B,)
        if bool(finite.all()):
            return None
        bad = int((~finite).sum())
        self.n_rejected += bad
        warnings.warn(
            f"{type(self).__name__}: {bad} sample(s) with NaN or infinite inputs not stored",
            RuntimeWarning,
            stacklevel=3,
        )
        return finite

    def _store(self, x: Tensor, y: Tensor, slots: Tensor, scores: Tensor | None) -> None:
        keep = (slots >= 0).nonzero().flatten()
        target = slots[keep]
        if len(target) != len(torch.unique(target)):
            raise RuntimeError("a policy assigned two samples to one slot")
        new_size = max(self.size, int(target.max()) + 1) if len(target) else self.size
        if new_size > self.max_size:
            raise RuntimeError("a policy assigned a slot beyond max_size")
        appended = target[target >= self.size]
        if len(appended) != new_size - self.size:
            raise RuntimeError("a policy left a hole in the buffer")
        if self.x is None or self.y is None:
            self.x = torch.zeros((self.max_size, *x.shape[1:]), dtype=x.dtype, device=x.device)
            self.y = torch.zeros(self.max_size, dtype=torch.long, device=x.device)
            self.scores = torch.zeros(self.max_size, dtype=torch.float32, device=x.device)
        dev = self.x.device
        idx = target.to(dev)
        self.x[idx] = x[keep.to(x.device)].to(dev)
        self.y[idx] = y[keep.to(y.device)].to(dev, torch.long)
        if scores is not None and self.scores is not None:
            self.scores[idx] = scores[keep.to(scores.device)].to(dev, torch.float32)
        self.size = new_size
        if len(target):
            self._dataset = None

    def post_adapt(self, agent_state: SupervisedTemplate, exp: Any) -> None:
        """Avalanche's hook: offer the experience's samples, scored with the current model."""
        x, y = experience_tensors(exp)
        device = getattr(agent_state, "device", None)
        if device is not None:
            x, y = x.to(device), y.to(device)
        self.add(x, y, getattr(agent_state, "model", None))

    def update(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Offer ``strategy.experience`` (as :meth:`post_adapt`).

        Avalanche's base class warns on every call of this deprecated method;
        ``ReplayPlugin`` still calls it, so it is overridden without the warning.
        """
        self.post_adapt(strategy, strategy.experience)

    def resize(self, strategy: Any, new_size: int) -> None:
        """Change ``max_size``; shrinking keeps a uniform random subset of the samples."""
        if int(new_size) < 1:
            raise ValueError(f"buffer size must be >= 1, got {new_size}")
        new_size = int(new_size)
        if self.x is not None and self.y is not None and self.scores is not None:
            keep = torch.arange(self.size)
            if self.size > new_size:
                keep = torch.randperm(self.size, generator=self.generator)[:new_size].sort().values
            keep = keep.to(self.x.device)
            x = torch.zeros((new_size, *self.x.shape[1:]), dtype=self.x.dtype, device=self.x.device)
            y = torch.zeros(new_size, dtype=torch.long, device=self.x.device)
            s = torch.zeros(new_size, dtype=torch.float32, device=self.x.device)
            x[: len(keep)], y[: len(keep)], s[: len(keep)] = (
                self.x[keep],
                self.y[keep],
                self.scores[keep],
            )
            self.x, self.y, self.scores, self.size = x, y, s, len(keep)
        self.max_size = new_size
        self._dataset = None

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self.size

    def sample(self, k: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``min(k, len(self))`` distinct stored samples uniformly at random.

        :param k: how many samples.
        :param generator: source of randomness; the buffer's own by default.
        :return: ``(x, y)`` on the buffer's device.
        """
        if self.size == 0 or self.x is None or self.y is None:
            raise ValueError("the buffer is empty")
        idx = torch.randperm(self.size, generator=generator or self.generator)[:k]
        idx = idx.to(self.x.device)
        return self.x[idx], self.y[idx]

    def tensors(self) -> tuple[Tensor, Tensor]:
        """The stored ``(x, y)``, ``len(self)`` rows each."""
        if self.x is None or self.y is None:
            raise ValueError("the buffer is empty")
        return self.x[: self.size], self.y[: self.size]

    @property
    def buffer(self) -> AvalancheDataset:
        """The stored samples as an ``AvalancheDataset`` (for Avalanche's ``ReplayPlugin``)."""
        if self._dataset is None:
            if self.size == 0:
                return super().buffer
            x, y = self.tensors()
            self._dataset = _make_taskaware_tensor_classification_dataset(
                x.cpu(), y.cpu(), task_labels=0
            )
        return self._dataset

    @buffer.setter
    def buffer(self, new_buffer: AvalancheDataset) -> None:
        if len(new_buffer) == 0:
            self._buffer = new_buffer
            return
        raise AttributeError(f"{type(self).__name__} is filled through add()/post_adapt()")

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: samples, scores, counters and the RNG state."""
        return {
            "max_size": self.max_size,
            "size": self.size,
            "n_seen": self.n_seen,
            "x": None if self.x is None else self.x.cpu(),
            "y": None if self.y is None else self.y.cpu(),
            "scores": None if self.scores is None else self.scores.cpu(),
            "generator": self.generator.get_state(),
            "n_rejected": self.n_rejected,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (tensors stay on the CPU, see :meth:`to`)."""
        self.max_size = int(state["max_size"])
        self.size = int(state["size"])
        self.n_seen = int(state["n_seen"])
        self.n_rejected = int(state.get("n_rejected", 0))
        self.x, self.y, self.scores = state["x"], state["y"], state["scores"]
        self.generator.set_state(state["generator"])
        self._dataset = None

    def to(self, device: torch.device | str) -> OnlineBuffer:
        """Move the stored tensors to ``device`` in place (e.g. after :meth:`load_state_dict`).

        :param device: where the samples live (normally the strategy's device).
        :return: the buffer.
        """
        for name in self._tensor_names:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.to(device))
        self._dataset = None
        return self

    _tensor_names: tuple[str, ...] = ("x", "y", "scores")


class ReservoirBuffer(OnlineBuffer):
    """``Reservoir``: reservoir sampling (Vitter's Algorithm R).

    Every sample of the stream is in the buffer with the same probability ``M / n_seen``.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator.
    """

    def _assign(self, x: Tensor, y: Tensor, model: nn.Module | None) -> Tensor:
        return reservoir_slots(self.n_seen, len(y), self.max_size, generator=self.generator)


class RandBuffer(OnlineBuffer):
    """``Rand`` (paper section 5.1): a uniform random ``M`` of buffer and batch.

    Every batch joins; when the buffer overflows, a uniform random ``M`` of buffer and
    batch is kept.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator.
    """

    def _assign(self, x: Tensor, y: Tensor, model: nn.Module | None) -> Tensor:
        return rand_slots(self.size, len(y), self.max_size, generator=self.generator)


MemoryGrads = Literal["samples", "groups"]


class GSSGreedyBuffer(OnlineBuffer):
    """``GSS-Greedy`` (paper Algorithm 2).

    Each new sample's score is its largest gradient cosine to ``n`` gradients drawn
    from the buffer, plus one (lines 5-7); a full buffer lets a sample in only when its
    score is below one, replacing a candidate drawn by score (lines 8-15, see
    :func:`~avalanche_gss.selection.greedy.greedy_slots`). Scoring runs with the model in
    eval mode and leaves no trace on it (parameters, ``.grad``, BatchNorm statistics and
    the train/eval mode are restored).

    The defaults follow the paper. ``variant="authors"`` switches to what the authors'
    code does (PEERS.md 1a): the ``n`` buffer gradients are each the mean gradient of
    ``group_size`` buffer samples, the gate is applied once to the batch's mean gradient,
    candidates are drawn with min-max normalised scores. Each of these can also be set
    alone with ``memory_grads``, ``gate`` and ``candidate_draw``.

    :param max_size: number of slots ``M``.
    :param n: number of buffer gradients a new sample is compared with (paper ``n``, 10).
    :param variant: ``"paper"`` or ``"authors"``: the defaults of the three options below.
    :param memory_grads: ``"samples"`` (paper: ``n`` per-sample gradients) or ``"groups"``
        (authors: ``n`` mean gradients of ``group_size`` samples each).
    :param gate: ``"sample"`` (paper: per-sample ``c < 1``) or ``"batch"`` (authors).
    :param candidate_draw: ``"proportional"`` (paper ``P(i) = C_i / sum C``) or
        ``"minmax"`` (authors).
    :param group_size: samples per buffer gradient with ``memory_grads="groups"`` (10).
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's generator.
    """

    scored = True  # keeps a score per stored sample (Algorithm 2's C_i)

    def __init__(
        self,
        max_size: int,
        *,
        n: int = 10,
        variant: Literal["paper", "authors"] = "paper",
        memory_grads: MemoryGrads | None = None,
        gate: Gate | None = None,
        candidate_draw: CandidateDraw | None = None,
        group_size: int = 10,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(max_size, seed=seed)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        if variant not in ("paper", "authors"):
            raise ValueError(f"variant must be 'paper' or 'authors', got {variant!r}")
        authors = variant == "authors"
        self.n = n
        self.memory_grads: MemoryGrads = memory_grads or ("groups" if authors else "samples")
        self.gate: Gate = gate or ("batch" if authors else "sample")
        self.candidate_draw: CandidateDraw = candidate_draw or (
            "minmax" if authors else "proportional"
        )
        if self.memory_grads not in ("samples", "groups"):
            raise ValueError(f"memory_grads must be 'samples' or 'groups', got {memory_grads!r}")
        self.group_size = group_size
        self.loss_fn = loss_fn
        self.params = params

    def _assign(self, x: Tensor, y: Tensor, model: nn.Module | None) -> Tensor:
        if model is None:
            raise ValueError("GSS-Greedy scores samples by the model's gradients: pass model=")
        _require_gradients(model, self.params, "GSS-Greedy")
        new_scores, batch_score = self._score(x, y, model)
        self._new_scores = new_scores
        assert self.scores is not None or self.size == 0
        stored = self.scores[: self.size] if self.scores is not None else torch.zeros(0)
        finite = torch.isfinite(new_scores)  # (B,) a NaN/inf gradient gives a NaN score
        if not bool(finite.all()):
            bad = int((~finite).sum())
            self.n_rejected += bad
            warnings.warn(
                f"GSSGreedyBuffer: {bad} sample(s) with a non-finite gradient score not stored",
                RuntimeWarning,
                stacklevel=3,
            )
        slots = torch.full((len(y),), -1, dtype=torch.long)
        slots[finite] = greedy_slots(
            stored,
            new_scores[finite],
            self.max_size,
            generator=self.generator,
            candidate_draw=self.candidate_draw,
            gate=self.gate,
            batch_score=batch_score,
        )[0]
        return slots

    def _score(self, x: Tensor, y: Tensor, model: nn.Module) -> tuple[Tensor, float | None]:
        """Lines 5-7: scores ``c`` of the new samples (and of their mean, for the batch gate)."""
        b = len(y)
        groups = self.memory_grads == "groups"
        per_group = self.group_size if groups else 1
        k = min(self.size, self.n * per_group)
        if k == 0:
            return greedy_scores(torch.zeros(b, 0)), 1.0
        bx, by = self.sample(k)
        xs = torch.cat([x.to(bx.device), bx])
        ys = torch.cat([y.to(by.device), by])
        # The engine is state-neutral (parameters, .grad, BN statistics, train/eval mode).
        gram = sample_gram(model, xs, ys, loss_fn=self.loss_fn, params=self.params).detach()
        # A non-finite gradient (NaN/inf loss) makes its sample's score NaN (not stored);
        # if a buffer gradient is not finite, every score is NaN.
        finite = torch.isfinite(gram.diagonal()).cpu()  # (B+k,)
        if not bool(finite[b:].all()):
            return torch.full((b,), float("nan")), float("nan")
        if not bool(finite.all()):  # scrub the bad rows so that they stay out of the sums
            ok = finite.to(gram.device)
            gram = gram.masked_fill(~(ok[:, None] & ok[None, :]), 0.0)
        if not groups and self.gate == "sample":  # Algorithm 2: per-sample cosines only
            scores = greedy_scores(cosine_from_gram(gram)[:b, b:].float().cpu())  # (B,)
            scores[~finite[:b]] = float("nan")
            return scores, None
        # Rows: the B new samples, their mean (batch gate), then the buffer gradients.
        n_mem = max(1, k // per_group) if groups else k
        member = (torch.arange(k) // per_group).clamp(max=n_mem - 1)  # group of each drawn row
        ids = torch.cat([torch.arange(b), member + b + 1])
        weights = torch.zeros(b + 1 + n_mem, b + k, dtype=gram.dtype)
        weights[ids, torch.arange(b + k)] = 1.0
        weights[b, :b] = finite[:b].to(gram.dtype)  # the batch mean of the finite gradients
        weights = weights / weights.sum(dim=1, keepdim=True).clamp_min(1.0)
        cos = cosine_from_gram(group_gram(gram, weights.to(gram.device)))  # (B+1+n, B+1+n)
        to_memory = cos[: b + 1, b + 1 :]  # (B+1, n_mem)
        scores = greedy_scores(to_memory.float().cpu())
        scores[: b][~finite[:b]] = float("nan")
        if not bool(finite[:b].any()):
            scores[b] = float("nan")
        return scores[:b], float(scores[b])


class RecentMergeBuffer(OnlineBuffer):
    """A buffer updated as in Algorithm 1, through a recent buffer ``M_r``.

    Incoming samples wait in the recent buffer; once it holds ``recent_size`` samples,
    one selection over ``M_b U M_r`` decides what the buffer keeps, and the recent
    buffer is emptied.

    Subclasses implement :meth:`_select`. Kept buffer samples stay in their slots; kept
    recent samples take the freed slots, then the free ones (through
    :meth:`OnlineBuffer._store`); a selection that keeps fewer samples than the buffer
    held moves the last kept ones down so that the buffer stays contiguous. Waiting
    samples are not replayed (:meth:`sample`, :meth:`tensors` and :attr:`buffer` see
    ``M_b`` only), as in Algorithm 1 and the authors' ``GSS_IQP_Rehearse.py``; they are
    part of :meth:`state_dict`.

    :param max_size: number of slots ``M`` (Alg. 1's ``M_b``).
    :param recent_size: size of the recent buffer ``M_r`` (100 in the authors' scripts).
    :param seed: seed of the buffer's generator.
    """

    def __init__(self, max_size: int, *, recent_size: int = 100, seed: int = 0) -> None:
        super().__init__(max_size, seed=seed)
        if int(recent_size) < 1:
            raise ValueError(f"recent_size must be >= 1, got {recent_size}")
        self.recent_size = int(recent_size)
        self.recent_x: Tensor | None = None  # (R, *input_shape), R < recent_size between calls
        self.recent_y: Tensor | None = None  # (R,)

    @property
    def n_recent(self) -> int:
        """Number of samples waiting in the recent buffer."""
        return 0 if self.recent_y is None else len(self.recent_y)

    def _select(self, x: Tensor, y: Tensor, n_stored: int, model: nn.Module | None) -> Tensor:
        """Return the ascending indices of ``M_b U M_r`` to keep, at most ``max_size``.

        :param x: ``(K, *input_shape)`` the union: the ``n_stored`` buffer samples first,
            then the recent ones.
        :param y: ``(K,)`` their labels.
        :param n_stored: number of buffer samples at the head of the union.
        :param model: the learner.
        """
        raise NotImplementedError

    def add(self, x: Tensor, y: Tensor, model: nn.Module | None = None) -> Tensor:
        """Offer a batch: it joins the recent buffer, merged once ``recent_size`` wait.

        :param x: ``(B, *input_shape)`` inputs.
        :param y: ``(B,)`` integer labels.
        :param model: the learner (the selections score samples with it).
        :return: ``(B,)`` slot of each sample when this batch triggered a merge, ``-1``
            where a sample was not kept or still waits.
        """
        slots = self._offer(x, y, model)
        self.last_slots = slots
        return slots

    def _offer(self, x: Tensor, y: Tensor, model: nn.Module | None) -> Tensor:
        finite = self._check_batch(x, y, self.x if self.x is not None else self.recent_x)
        if len(y) == 0:
            return torch.empty(0, dtype=torch.long)
        slots = torch.full((len(y),), -1, dtype=torch.long)
        if finite is not None:  # samples with NaN/inf inputs are not offered
            x, y = x[finite.to(x.device)], y[finite.to(y.device)]
        b = len(y)
        if b == 0:
            return slots
        before = (self.recent_x, self.recent_y, self.n_seen)
        if self.recent_x is None or self.recent_y is None:
            self.recent_x, self.recent_y = x.detach().clone(), y.detach().clone().long()
        else:
            dev = self.recent_x.device
            self.recent_x = torch.cat([self.recent_x, x.detach().to(dev)])
            self.recent_y = torch.cat([self.recent_y, y.detach().to(dev, torch.long)])
        self.n_seen += b
        if self.n_recent < self.recent_size:
            return slots
        try:
            merged = self.merge_recent(model)[-b:]
        except Exception:  # a failed selection leaves the buffer as it was before the call
            self.recent_x, self.recent_y, self.n_seen = before
            raise
        if finite is None:
            return merged
        slots[finite] = merged
        return slots

    def _usable(self, valid: Tensor, n_stored: int, what: str = "gradient") -> Tensor | None:
        """Indices of ``M_b U M_r`` a selection may use, given which ones it can score.

        Waiting samples whose gradient (or feature) is not finite are dropped; if a stored
        sample's is not finite (a diverged model), nothing is selected: ``None``, the
        buffer stays as it is and every waiting sample is dropped. A ``RuntimeWarning``
        says which, and :attr:`n_rejected` counts the dropped samples.

        :param valid: ``(K,)`` whether each union sample has a finite gradient/feature.
        :param n_stored: number of buffer samples at the head of the union.
        :param what: ``"gradient"`` or ``"feature"``, for the warning.
        """
        if bool(valid.all()):
            return torch.arange(len(valid))
        name = type(self).__name__
        if not bool(valid[:n_stored].all()):
            dropped = len(valid) - n_stored
            self.n_rejected += dropped
            warnings.warn(
                f"{name}: stored samples have a non-finite {what}; the buffer is left "
                f"unchanged and {dropped} waiting sample(s) are dropped",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        dropped = int((~valid).sum())
        self.n_rejected += dropped
        warnings.warn(
            f"{name}: {dropped} waiting sample(s) with a non-finite {what} not stored",
            RuntimeWarning,
            stacklevel=3,
        )
        return valid.nonzero().flatten()

    def merge_recent(self, model: nn.Module | None = None) -> Tensor:
        """Run the selection on ``M_b U M_r`` now, whatever the recent buffer holds.

        :param model: the learner.
        :return: ``(R,)`` slot taken by each recent sample, ``-1`` where it was dropped.
        """
        if self.recent_x is None or self.recent_y is None:
            return torch.empty(0, dtype=torch.long)
        rx, ry = self.recent_x, self.recent_y
        if self.x is not None and self.y is not None:
            sx, sy = self.tensors()
            ux = torch.cat([sx, rx.to(sx.device)])  # (K, *input_shape)
            uy = torch.cat([sy, ry.to(sy.device)])  # (K,)
        else:
            ux, uy = rx, ry
        n = self.size
        keep = self._select(ux, uy, n, model).cpu().long()
        if len(keep) > self.max_size or (len(keep) > 1 and not bool((keep[1:] > keep[:-1]).all())):
            raise RuntimeError("a selection returned unsorted indices or more than max_size")
        new = keep[keep >= n] - n
        slots = torch.full((len(ry),), -1, dtype=torch.long)
        slots[new] = self._replace(keep[keep < n], rx[new.to(rx.device)], ry[new.to(ry.device)])
        self.recent_x = self.recent_y = None
        return slots

    def _replace(self, keep_stored: Tensor, x_new: Tensor, y_new: Tensor) -> Tensor:
        """Keep the stored slots ``keep_stored``, drop the others, store the new samples.

        :return: ``(len(y_new),)`` slot of each new sample.
        """
        new_size = len(keep_stored) + len(y_new)
        stay = keep_stored[keep_stored < new_size]
        movers = keep_stored[keep_stored >= new_size]  # only when the buffer shrinks
        occupied = torch.zeros(new_size, dtype=torch.bool)
        occupied[stay] = True
        vacant = (~occupied).nonzero().flatten()  # dropped slots, then the free ones
        if len(movers) and self.x is not None and self.y is not None and self.scores is not None:
            dest, vacant = vacant[: len(movers)], vacant[len(movers) :]
            dev = self.x.device
            self.x[dest.to(dev)] = self.x[movers.to(dev)]
            self.y[dest.to(dev)] = self.y[movers.to(dev)]
            self.scores[dest.to(dev)] = self.scores[movers.to(dev)]
        self.size = min(self.size, new_size)
        self._dataset = None
        self._store(x_new, y_new, vacant, torch.zeros(len(y_new)))
        self.size = new_size
        return vacant

    def state_dict(self) -> dict[str, Any]:
        """:meth:`OnlineBuffer.state_dict` plus the waiting samples."""
        state = super().state_dict()
        state["recent_x"] = None if self.recent_x is None else self.recent_x.cpu()
        state["recent_y"] = None if self.recent_y is None else self.recent_y.cpu()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.recent_x, self.recent_y = state.get("recent_x"), state.get("recent_y")

    _tensor_names = (*OnlineBuffer._tensor_names, "recent_x", "recent_y")


def _model_device(model: nn.Module) -> torch.device | None:
    param = next(model.parameters(), None)
    return None if param is None else param.device


def _require_gradients(model: nn.Module, params: list[nn.Parameter] | None, method: str) -> None:
    """Raise if there is no parameter to take gradients with (every score would be 0)."""
    if params is None and not any(p.requires_grad for p in model.parameters()):
        raise ValueError(
            f"{method} scores samples by their loss gradients, but {type(model).__name__} "
            "has no trainable parameter; pass params= or use a policy that needs none "
            "(Reservoir, Rand, FSS-Clust)"
        )
    if params is not None and len(params) == 0:
        raise ValueError(f"{method}: params= is empty, there is no gradient to compare")


IQPSolver = Literal["fast", "exact"]


class GSSIQPBuffer(RecentMergeBuffer):
    """``GSS-IQP`` (paper Algorithm 1, appendix B).

    When the recent buffer holds ``recent_size`` samples and the union ``M_b U M_r``
    exceeds ``M``, the cosine Gram of the union's per-sample loss gradients (the
    gradient engine, model in eval mode, state untouched) goes to
    :func:`~avalanche_gss.selection.iqp.select_iqp`, which keeps the ``M`` samples
    minimising the surrogate ``sum_{i,j in S} cos(g_i, g_j)``; while the union fits,
    everything is kept and nothing is computed. A failing exact solver falls back to the
    fast one with a warning, so a selection always keeps exactly ``M`` samples.

    :param max_size: number of slots ``M`` (Alg. 1's ``M_b``).
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param solver: ``"fast"`` (swap local search) or ``"exact"`` (SCIP under
        ``time_limit``), see :func:`~avalanche_gss.selection.iqp.select_iqp`.
    :param time_limit: SCIP's time limit in seconds per selection (exact solver).
    :param restarts: restarts of the fast solver.
    :param slack: gradients with norm ``<= slack`` have no usable direction and are left
        out of the IQP (kept only if too few others remain), as in the authors' code;
        ``0`` leaves out exactly-zero gradients, ``None`` keeps every candidate.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's generator (also the fast solver's restarts).
    """

    def __init__(
        self,
        max_size: int,
        *,
        recent_size: int = 100,
        solver: IQPSolver = "fast",
        time_limit: float = 60.0,
        restarts: int = 16,
        slack: float | None = 0.0,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(max_size, recent_size=recent_size, seed=seed)
        if solver not in ("fast", "exact"):
            raise ValueError(f"solver must be 'fast' or 'exact', got {solver!r}")
        if not time_limit > 0:
            raise ValueError(f"time_limit must be positive, got {time_limit}")
        if restarts < 0:
            raise ValueError(f"restarts must be >= 0, got {restarts}")
        self.solver: IQPSolver = solver
        self.time_limit = float(time_limit)
        self.restarts = restarts
        self.slack = slack
        self.loss_fn = loss_fn
        self.params = params
        self.last_result: IQPResult | None = None

    @property
    def last_surrogate(self) -> float | None:
        """Surrogate ``x^T G x`` of the last selection (``None`` before the first one)."""
        return None if self.last_result is None else self.last_result.objective

    def _select(self, x: Tensor, y: Tensor, n_stored: int, model: nn.Module | None) -> Tensor:
        if len(y) <= self.max_size:
            return torch.arange(len(y))
        if model is None:
            raise ValueError("GSS-IQP selects by the model's gradients: pass model=")
        _require_gradients(model, self.params, "GSS-IQP")
        dev = _model_device(model) or x.device
        # The engine is state-neutral (parameters, .grad, BN statistics, train/eval mode).
        gram = sample_gram(
            model, x.to(dev), y.to(dev), loss_fn=self.loss_fn, params=self.params
        ).detach()  # (K, K)
        usable = self._usable(torch.isfinite(gram.diagonal()).cpu(), n_stored)  # (K',)
        if usable is None:
            return torch.arange(n_stored)
        if len(usable) == len(y):
            return self._solve(gram)
        if len(usable) <= self.max_size:
            return usable
        idx = usable.to(dev)
        return usable[self._solve(gram[idx[:, None], idx[None, :]])]  # (K', K') sub-Gram

    def _solve(self, gram: Tensor) -> Tensor:
        """Keep ``max_size`` of the samples whose gradient Gram is ``gram`` (appendix B)."""
        cos = cosine_from_gram(gram).cpu()  # (K, K), Alg. 1 line 5's matrix
        invalid = None
        if self.slack is not None:
            invalid = gram.diagonal().clamp_min(0).sqrt().cpu() <= self.slack  # (K,)
            invalid = invalid if bool(invalid.any()) else None
        self.last_result = select_iqp(
            cos, self.max_size, solver=self.solver, time_limit=self.time_limit,
            restarts=self.restarts, generator=self.generator, invalid=invalid,
        )
        return self.last_result.indices

    def state_dict(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer.state_dict` plus the last selection's outcome."""
        state = super().state_dict()
        state["last_result"] = None if self.last_result is None else asdict(self.last_result)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        last = state.get("last_result")
        self.last_result = None if last is None else IQPResult(**last)


ClustFeatures = Literal["penultimate", "logits"]


class _ClustBuffer(RecentMergeBuffer):
    """The doubling algorithm over ``M_b U M_r`` at each merge (GSS-Clust, FSS-Clust).

    The buffer samples are the cluster centres; their distances are recomputed with the
    current model at each merge. Stored centres the model no longer tells apart
    (distance 0) are merged first, since the doubling algorithm needs distinct centres.
    """

    def __init__(
        self, max_size: int, *, recent_size: int = 100, growth: float = 2.0, seed: int = 0
    ) -> None:
        super().__init__(max_size, recent_size=recent_size, seed=seed)
        self.clustering = DoublingClustering(self.max_size, growth=growth, seed=seed)

    _measures = "gradient"  # what the distances are between, for warnings

    def _distances(self, x: Tensor, y: Tensor, model: nn.Module) -> tuple[Tensor, Tensor]:
        """Return the union's ``(K, K)`` distances and its ``(K,)`` finiteness mask.

        The mask is False for samples whose gradient or feature is not finite (their
        distances are not either).
        """
        raise NotImplementedError

    def _select(self, x: Tensor, y: Tensor, n_stored: int, model: nn.Module | None) -> Tensor:
        if model is None:
            raise ValueError(f"{type(self).__name__} measures distances with the model: "
                             "pass model=")
        dist, valid = self._distances(x, y, model)  # (K, K), (K,)
        usable = self._usable(valid.cpu(), n_stored, self._measures)  # (K',)
        if usable is None:
            return torch.arange(n_stored)
        dist = dist.detach().cpu()[usable[:, None], usable[None, :]]  # (K', K')
        alive = torch.ones(len(usable), dtype=torch.bool)
        coincide = dist[:n_stored, :n_stored] <= 0  # (n, n)
        coincide.fill_diagonal_(False)
        if bool(coincide.any()):  # keep the first of each group of coinciding centres
            for i in range(n_stored):
                if alive[i]:
                    alive[i + 1 : n_stored] &= ~coincide[i, i + 1 :]
        idx = alive.nonzero().flatten()
        keep = self.clustering.update(dist[idx[:, None], idx[None, :]], int(alive[:n_stored].sum()))
        return usable[idx[keep]]

    def resize(self, strategy: Any, new_size: int) -> None:
        """Change ``max_size`` and the clustering's capacity with it."""
        super().resize(strategy, new_size)
        self.clustering.capacity = self.max_size

    def state_dict(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer.state_dict` plus the clustering's threshold and RNG."""
        state = super().state_dict()
        state["clustering"] = self.clustering.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.clustering.capacity = self.max_size
        self.clustering.load_state_dict(state["clustering"])


class GSSClustBuffer(_ClustBuffer):
    """``GSS-Clust`` (paper section 4.1): online clustering of normalised loss gradients.

    Every ``recent_size`` samples, the Euclidean distances ``||u_i - u_j||`` between the
    unit gradients of ``M_b U M_r`` (from the gradient engine's cosine Gram, model in
    eval mode, state untouched) feed
    :class:`~avalanche_gss.selection.clust.DoublingClustering`, which keeps at most ``M``
    cluster centres (Charikar et al.'s doubling algorithm); the centres are stored.

    The threshold only grows, and these distances are at most 2: with ``growth=2`` it
    soon exceeds most of them and the buffer shrinks to a few centres (disjoint MNIST,
    5 x 400 digits, ``M = 300``, one seed: 1 centre left, 28% accuracy; ``growth=1.01``:
    282 centres, 82%; ``Rand`` 57%, ``GSS-IQP`` 80%).

    :param max_size: number of slots ``M``.
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param growth: threshold factor per merge round: 2 is the doubling algorithm (paper);
        the authors' ``GSS_Clust.py`` grew it by 1.01 (on ``1 - cos``).
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's and the clustering's generators.
    """

    def __init__(
        self,
        max_size: int,
        *,
        recent_size: int = 100,
        growth: float = 2.0,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(max_size, recent_size=recent_size, growth=growth, seed=seed)
        self.loss_fn = loss_fn
        self.params = params

    def _distances(self, x: Tensor, y: Tensor, model: nn.Module) -> tuple[Tensor, Tensor]:
        _require_gradients(model, self.params, "GSS-Clust")
        dev = _model_device(model) or x.device
        gram = sample_gram(model, x.to(dev), y.to(dev), loss_fn=self.loss_fn,
                           params=self.params).detach()  # (K, K), state-neutral engine
        valid = torch.isfinite(gram.diagonal())  # (K,)
        return gradient_distance(cosine_from_gram(gram)), valid  # (K, K), (K,)


class FSSClustBuffer(_ClustBuffer):
    """``FSS-Clust`` (paper section 4.1): online clustering of the samples' features.

    Every ``recent_size`` samples, the distances between the features of
    ``M_b U M_r`` (model in eval mode, no gradient, state preserved) feed
    :class:`~avalanche_gss.selection.clust.DoublingClustering`, which keeps at most ``M``
    cluster centres (Charikar et al.'s doubling algorithm); the centres are stored.
    As the threshold only grows, the buffer may hold far fewer than ``M`` centres
    (disjoint MNIST, 5 x 400 digits, ``M = 300``: 48 with the defaults, 183 with the
    authors' squared distances between logits).

    :param max_size: number of slots ``M``.
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param features: ``"penultimate"`` (paper: "the last layer before classification",
        ``model.features(x)``) or ``"logits"`` (the authors' ``FSS_Clust.py``).
    :param squared: squared Euclidean distances, as the authors' code (not a metric: the
        clustering's radius bound no longer holds); the paper's Euclidean by default.
    :param growth: threshold factor per merge round (2: doubling, also the authors').
    :param seed: seed of the buffer's and the clustering's generators.
    """

    def __init__(
        self,
        max_size: int,
        *,
        recent_size: int = 100,
        features: ClustFeatures = "penultimate",
        squared: bool = False,
        growth: float = 2.0,
        seed: int = 0,
    ) -> None:
        super().__init__(max_size, recent_size=recent_size, growth=growth, seed=seed)
        if features not in ("penultimate", "logits"):
            raise ValueError(f"features must be 'penultimate' or 'logits', got {features!r}")
        self.features: ClustFeatures = features
        self.squared = squared

    _measures = "feature"

    def _distances(self, x: Tensor, y: Tensor, model: nn.Module) -> tuple[Tensor, Tensor]:
        dev = _model_device(model) or x.device
        if self.features == "penultimate" and not callable(getattr(model, "features", None)):
            raise TypeError(
                f"{type(model).__name__} has no features(x); use features='logits' or add one"
            )
        with eval_mode(model), torch.no_grad():  # changes nothing on the model
            if self.features == "penultimate":
                out = model.features(x.to(dev))  # type: ignore[operator]  # (K, D)
            else:
                out = model(x.to(dev))  # (K, num_classes)
        out = out.flatten(1)  # (K, D)
        valid = torch.isfinite(out).all(dim=1)  # (K,)
        return feature_distance(out, squared=self.squared), valid  # (K, K), (K,)
