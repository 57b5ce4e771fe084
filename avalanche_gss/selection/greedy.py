"""GSS-Greedy (paper Algorithm 2) on tensors: scores from a gradient Gram, then slots.

:func:`memory_scores` is lines 5-7: the score ``c`` of a new sample is its largest
gradient cosine to ``n`` gradients drawn from the buffer, plus one, computed from the
Gram matrix of the gradients (the gradient engine's output). :func:`greedy_slots` is lines
8-17: which buffer slot, if any, each new sample takes.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from avalanche_gss.gradients import cosine_from_gram, group_gram

__all__ = ["CandidateDraw", "Gate", "greedy_scores", "memory_scores", "memory_weights",
           "group_scores", "greedy_slots"]

CandidateDraw = Literal["proportional", "minmax"]
Gate = Literal["sample", "batch"]


def greedy_scores(cosines: Tensor, empty_score: float = 1.0) -> Tensor:
    """Algorithm 2 line 7: ``c = max_i cos(g, G_i) + 1`` for each new sample.

    :param cosines: ``(B, n)`` cosines between each new sample's gradient and the ``n``
        gradients drawn from the buffer.
    :param empty_score: score given when ``n == 0`` (empty buffer): ``1`` is a cosine of
        zero, i.e. nothing known either way.
    :return: ``(B,)`` scores in ``[0, 2]``.
    """
    if cosines.dim() != 2:
        raise ValueError(f"cosines must be (B, n), got shape {tuple(cosines.shape)}")
    if cosines.shape[1] == 0:
        return torch.full((cosines.shape[0],), empty_score, dtype=cosines.dtype)
    return cosines.max(dim=1).values + 1.0


def memory_scores(
    gram: Tensor, n_new: int, *, group_size: int | None = None, batch_gate: bool = False
) -> tuple[Tensor, float | None]:
    """Algorithm 2 lines 5-7 from the Gram of ``[new samples; drawn buffer samples]``.

    With ``group_size=None`` and no batch gate (the paper), each new sample's score is
    ``max_j cos(g_i, G_j) + 1`` over the ``k`` drawn buffer gradients ``G_j``. Otherwise
    (the authors' code) the memory gradients are the means of consecutive groups of
    ``group_size`` drawn gradients (``k // group_size`` of them, the last group taking the
    remainder; ``group_size=1``: the drawn gradients themselves), and the batch's mean
    gradient gets a score too, for the batch gate.

    A sample whose gradient is not finite (NaN or infinite diagonal entry) gets a NaN
    score and stays out of the batch mean; a non-finite buffer gradient makes every score
    NaN.

    :param gram: ``(B + k, B + k)`` Gram of the ``B`` new samples' gradients, then the
        ``k`` drawn buffer samples'.
    :param n_new: ``B``.
    :param group_size: buffer gradients per memory gradient; ``None``: per-sample.
    :param batch_gate: whether to score the batch's mean gradient.
    :return: ``(scores, batch_score)``: the ``(B,)`` CPU float32 scores and the score of
        the batch's mean gradient (``None`` when neither groups nor the batch gate ask for
        it).
    """
    b, k = n_new, gram.shape[0] - n_new
    finite = torch.isfinite(gram.diagonal()).cpu()  # (B+k,)
    if not bool(finite[b:].all()):
        return torch.full((b,), float("nan")), float("nan")
    if not bool(finite.all()):  # scrub the bad rows so that they stay out of the sums
        ok = finite.to(gram.device)
        gram = gram.masked_fill(~(ok[:, None] & ok[None, :]), 0.0)
    if group_size is None and not batch_gate:  # Algorithm 2: per-sample cosines only
        scores = greedy_scores(cosine_from_gram(gram)[:b, b:].float().cpu())  # (B,)
        scores[~finite[:b]] = float("nan")
        return scores, None
    weights = memory_weights(b, k, group_size, finite[:b], dtype=gram.dtype)
    weights = weights.to(gram.device, non_blocking=True)  # no stream sync on CUDA
    return group_scores(group_gram(gram, weights), b, finite[:b])


def memory_weights(n_new: int, k: int, group_size: int | None,
                   finite: Tensor | None = None, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """The rows of :func:`memory_scores`' gradients as weights on ``[new; drawn]`` gradients.

    Rows: the ``B`` new samples, their mean (the batch gate's), then the memory gradients
    (the means of consecutive groups of ``group_size`` drawn gradients, the last group
    taking the remainder; ``None``: the drawn gradients themselves). The Gram of these rows
    (``W G W^T``, or the gradient engine's ``sample_gram(combine=W)``) is what
    :func:`group_scores` reads.

    :param n_new: ``B``.
    :param k: the drawn buffer samples.
    :param group_size: drawn gradients per memory gradient; ``None``: per-sample.
    :param finite: ``(B,)`` which new gradients are finite (the batch mean leaves the others
        out); ``None``: all of them.
    :param dtype: the weights' dtype.
    :return: the weights, shape ``(B + 1 + n_mem, B + k)``, on the CPU.
    """
    b = n_new
    per_group = group_size or 1
    n_mem = max(1, k // per_group) if group_size is not None else k
    member = (torch.arange(k) // per_group).clamp(max=n_mem - 1)  # group of each drawn row
    ids = torch.cat([torch.arange(b), member + b + 1])
    weights = torch.zeros(b + 1 + n_mem, b + k, dtype=dtype)
    weights[ids, torch.arange(b + k)] = 1.0
    # the batch mean of the finite gradients
    weights[b, :b] = 1.0 if finite is None else finite.to(dtype)
    return weights / weights.sum(dim=1, keepdim=True).clamp_min(1.0)


def group_scores(gram: Tensor, n_new: int,
                 finite: Tensor | None = None) -> tuple[Tensor, float]:
    """Algorithm 2 line 7 from the Gram of :func:`memory_weights`' rows.

    :param gram: ``(B + 1 + n_mem, B + 1 + n_mem)`` Gram of the new samples' gradients,
        their mean, then the memory gradients.
    :param n_new: ``B``.
    :param finite: ``(B,)`` which new gradients are finite (the others score NaN);
        ``None``: all of them.
    :return: ``(scores, batch_score)`` as :func:`memory_scores` returns them.
    """
    b = n_new
    cos = cosine_from_gram(gram)  # (B+1+n, B+1+n)
    scores = greedy_scores(cos[: b + 1, b + 1 :].float().cpu())  # (B+1,)
    if finite is not None:
        scores[:b][~finite] = float("nan")
        if not bool(finite.any()):
            scores[b] = float("nan")
    return scores[:b], float(scores[b])


def greedy_slots(
    buffer_scores: Tensor,
    new_scores: Tensor,
    capacity: int,
    *,
    generator: torch.Generator | None = None,
    candidate_draw: CandidateDraw = "proportional",
    gate: Gate = "sample",
    batch_score: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Algorithm 2 lines 8-17 for a batch: where each new sample goes.

    Samples are handled one after the other, as the paper applies "the same procedure
    for each example when a batch of new data is received". While the buffer is not full
    a sample is appended with its score (line 17). Once it is full:

    - ``gate="sample"`` (paper): only a sample with ``c < 1`` (negative cosine to every
      drawn buffer gradient) may enter (line 9). ``gate="batch"`` (authors' code): the
      whole batch may enter only if ``batch_score < 1``, ``batch_score`` being the score of
      the batch's mean gradient; the samples of a passing batch face no gate of their own.
    - ``candidate_draw="proportional"`` (paper, line 10): the candidate slot ``i`` is drawn
      with ``P(i) = C_i / sum_j C_j`` from the current scores. ``"minmax"`` (authors'
      code): the batch draws distinct candidates at once with weights
      ``(C - min C) / (max C - min C + 0.01)``, so the lowest-scored slot is never a
      candidate; if fewer slots than samples have a non-zero weight (the authors' code
      raises there) the candidates are drawn uniformly.
    - The candidate is replaced with probability ``C_i / (C_i + c)`` (lines 11-13) and
      its score becomes ``c``.

    :param buffer_scores: ``(S,)`` scores of the ``S <= capacity`` stored samples.
    :param new_scores: ``(B,)`` scores ``c`` of the new samples.
    :param capacity: buffer size ``M``.
    :param generator: source of randomness (CPU ``torch.Generator``).
    :param candidate_draw: ``"proportional"`` (paper) or ``"minmax"`` (authors' code).
    :param gate: ``"sample"`` (paper) or ``"batch"`` (authors' code).
    :param batch_score: score of the batch gradient; required with ``gate="batch"``.
    :return: ``(slots, scores)``: ``(B,)`` int64 slot per new sample (``-1``: not stored;
        a sample whose slot a later sample of the batch takes is reported ``-1``), and
        the ``(S',)`` scores of the buffer after the batch.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    if buffer_scores.dim() != 1 or new_scores.dim() != 1:
        raise ValueError("buffer_scores and new_scores must be 1-D")
    if len(buffer_scores) > capacity:
        raise ValueError("more buffer scores than capacity")
    if gate == "batch" and batch_score is None:
        raise ValueError('gate="batch" needs batch_score')
    n_old, n_new = len(buffer_scores), len(new_scores)
    # Scores live in one preallocated float64 tensor (the candidate draws read it) and,
    # for the per-sample bookkeeping, in Python floats: B is small, tensor ops per
    # sample would cost more than the rule itself.
    table = torch.zeros(max(capacity, n_old + n_new), dtype=torch.float64)
    table[:n_old] = buffer_scores.detach().to("cpu", torch.float64)
    values = table[:n_old].tolist()
    new = new_scores.detach().to("cpu", torch.float64).tolist()
    slots = [-1] * n_new
    uniforms = torch.rand(n_new, generator=generator, dtype=torch.float64).tolist()
    batch_passes = gate == "sample" or (batch_score is not None and batch_score < 1.0)
    minmax_candidates: Tensor | None = None
    first = 0
    for k in range(n_new):
        c = new[k]
        size = len(values)
        if size < capacity:  # line 17: fill phase
            table[size] = c
            values.append(c)
            slots[k] = size
            continue
        if not batch_passes or (gate == "sample" and not c < 1.0):  # line 9
            continue
        current = table[:size]
        if candidate_draw == "proportional":  # line 10
            if float(current.sum()) > 0:
                i = int(torch.multinomial(current, 1, generator=generator))
            else:  # every stored score is 0: all equally redundant
                i = int(torch.randint(size, (1,), generator=generator))
        elif candidate_draw == "minmax":
            if minmax_candidates is None:
                minmax_candidates = _minmax_candidates(current, n_new - k, generator)
                first = k
            i = int(minmax_candidates[(k - first) % len(minmax_candidates)])
        else:
            raise ValueError(f"unknown candidate_draw {candidate_draw!r}")
        ci = values[i]
        if ci + c > 0 and uniforms[k] < ci / (ci + c):  # lines 11-13
            slots = [-1 if s == i else s for s in slots]  # an earlier sample loses the slot
            slots[k] = i
            values[i] = c
            table[i] = c
    return torch.tensor(slots, dtype=torch.long), table[: len(values)].clone()


def _minmax_candidates(scores: Tensor, count: int, generator: torch.Generator | None) -> Tensor:
    """The authors' draw: ``count`` distinct slots weighted by min-max normalised scores."""
    span = float(scores.max() - scores.min())
    weights = (scores - scores.min()) / (span + 0.01)
    if int((weights > 0).sum()) < count:
        weights = torch.ones_like(scores)
    count = min(count, len(scores))
    return torch.multinomial(weights, count, replacement=False, generator=generator)
