"""``GSS-Greedy`` (paper Algorithm 2): the buffer, its presets and the ready strategy."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import GradientScored, OnlineBuffer, Rows, Variant
from avalanche_gss.buffers.base import reject
from avalanche_gss.buffers.columns import check_size
from avalanche_gss.buffers.presets import resolve
from avalanche_gss.selection.greedy import (
    CandidateDraw,
    Gate,
    greedy_slots,
    group_scores,
    memory_scores,
    memory_weights,
)
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["MemoryGrads", "GSSGreedyBuffer", "GSSGreedy"]

MemoryGrads = Literal["samples", "groups"]


class GSSGreedyBuffer(GradientScored, OnlineBuffer):
    """``GSS-Greedy`` (paper Algorithm 2).

    Each new sample's score is its largest gradient cosine to ``n`` gradients drawn
    from the buffer, plus one (lines 5-7, :func:`~avalanche_gss.selection.greedy.memory_scores`);
    a full buffer lets a sample in only when its score is below one, replacing a candidate
    drawn by score (lines 8-15, :func:`~avalanche_gss.selection.greedy.greedy_slots`).
    Scoring runs with the model in eval mode and leaves no trace on it (parameters,
    ``.grad``, BatchNorm statistics and the train/eval mode are restored).

    ``variant="authors"`` (the default: it reproduces the paper's published numbers) is
    what the authors' code does: the ``n`` buffer gradients are each the mean gradient of
    ``group_size`` buffer samples, the gate is applied once to the batch's mean gradient,
    candidates are drawn with min-max normalised scores. ``variant="paper"`` is Algorithm
    2 as written. Each of the three can also be set alone with ``memory_grads``, ``gate``
    and ``candidate_draw``.

    :param max_size: number of slots ``M``.
    :param n: number of buffer gradients a new sample is compared with (paper ``n``, 10).
    :param variant: ``"authors"`` (default) or ``"paper"``: the defaults of the three
        options below (:attr:`PRESETS`).
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

    PRESETS = {
        "paper": {"memory_grads": "samples", "gate": "sample", "candidate_draw": "proportional"},
        "authors": {"memory_grads": "groups", "gate": "batch", "candidate_draw": "minmax"},
    }
    """The options each variant sets."""

    scored = True  # keeps a score per stored sample (Algorithm 2's C_i)
    method = "GSS-Greedy"

    def __init__(
        self,
        max_size: int,
        *,
        n: int = 10,
        variant: Variant = "authors",
        memory_grads: MemoryGrads | None = None,
        gate: Gate | None = None,
        candidate_draw: CandidateDraw | None = None,
        group_size: int = 10,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(max_size, seed=seed)
        n = check_size(n, "n")
        group_size = check_size(group_size, "group_size")
        options = resolve(self.PRESETS, variant, {
            "memory_grads": memory_grads, "gate": gate, "candidate_draw": candidate_draw})
        if options["memory_grads"] not in ("samples", "groups"):
            raise ValueError(f"memory_grads must be 'samples' or 'groups', got {memory_grads!r}")
        if options["gate"] not in ("sample", "batch"):
            raise ValueError(f"gate must be 'sample' or 'batch', got {gate!r}")
        if options["candidate_draw"] not in ("proportional", "minmax"):
            raise ValueError("candidate_draw must be 'proportional' or 'minmax', got "
                             f"{candidate_draw!r}")
        self.variant: Variant = variant
        self.n = n
        self.memory_grads: MemoryGrads = options["memory_grads"]
        self.gate: Gate = options["gate"]
        self.candidate_draw: CandidateDraw = options["candidate_draw"]
        self.group_size = group_size
        self.loss_fn = loss_fn
        self.params = params

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, Tensor]:
        new_scores, batch_score = self._score(rows, model)
        stored = self.scores[: self.size] if self.scores is not None else torch.zeros(0)
        finite = torch.isfinite(new_scores)  # (B,) a NaN/inf gradient gives a NaN score
        if not bool(finite.all()):
            bad = int((~finite).sum())
            reject(self, bad, f"{bad} sample(s) with a non-finite gradient score not stored",
                   stacklevel=5)
        slots = torch.full((len(rows),), -1, dtype=torch.long)
        slots[finite] = greedy_slots(
            stored, new_scores[finite], self.max_size, generator=self.generator,
            candidate_draw=self.candidate_draw, gate=self.gate, batch_score=batch_score,
        )[0]
        return slots, new_scores

    def _score(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, float | None]:
        """Lines 5-7: scores ``c`` of the new samples (and of their mean, for the batch gate)."""
        self._check_model(model)
        groups = self.memory_grads == "groups"
        k = min(self.size, self.n * (self.group_size if groups else 1))
        if k == 0:
            return torch.ones(len(rows)), 1.0  # empty buffer: cosine 0, nothing known
        bx, by, bt = self.rows(self.sample_slots(k))
        x, y = torch.cat([rows.x.to(bx.device), bx]), torch.cat([rows.y.to(by.device), by])
        t = torch.cat([rows.t.to(bt.device), bt])
        if groups:  # the Gram of the group means and the new samples only, from their sums
            weights = memory_weights(len(rows), k, self.group_size)
            gram = self._gram(model, x, y, t, combine=weights)
            if bool(torch.isfinite(gram).all()):
                return group_scores(gram, len(rows))
            # a gradient is not finite: the per-sample Gram below tells which
        gram = self._gram(model, x, y, t)
        return memory_scores(gram, len(rows), group_size=self.group_size if groups else None,
                             batch_gate=self.gate == "batch")


class GSSGreedy(BufferStrategy):
    """Online rehearsal with the ``GSS-Greedy`` buffer (paper Algorithm 2).

    The buffer's options (``n``, ``variant``, ``memory_grads``, ``gate``,
    ``candidate_draw``, ``group_size``, ``loss_fn``, ``params``) are those of
    :class:`GSSGreedyBuffer`, with its defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = GSSGreedyBuffer

    def __init__(
        self, *, mem_size: int, seed: int = 0, n: int = 10, variant: Variant = "authors",
        memory_grads: MemoryGrads | None = None, gate: Gate | None = None,
        candidate_draw: CandidateDraw | None = None, group_size: int = 10, loss_fn: Any = None,
        params: list[nn.Parameter] | None = None, **options: Any,
    ) -> None:
        buffer = GSSGreedyBuffer(mem_size, n=n, variant=variant, memory_grads=memory_grads,
                                 gate=gate, candidate_draw=candidate_draw, group_size=group_size,
                                 loss_fn=loss_fn, params=params, seed=seed)
        self.rehearse(buffer, seed, options)
