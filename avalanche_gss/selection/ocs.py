"""Online Coreset Selection (OCS) scores and top-k choice, from per-sample gradient Grams.

Yoon, Madaan, Yang and Hwang, "Online Coreset Selection for Rehearsal-based Continual
Learning", ICLR 2022 (arXiv:2106.01085). For a minibatch ``B`` of per-sample gradients
``g_n`` with mean ``g_B``, and the coreset's mean gradient ``g_C``, each sample gets

- minibatch similarity ``S_n = cos(g_n, g_B)``,
- sample diversity ``V_n = -1/(|B|-1) sum_{p != n} cos(g_n, g_p)``,
- coreset affinity ``A_n = cos(g_n, g_C)``,

and the ``k`` samples of largest ``S_n + V_n + tau A_n`` are kept. Every term is an inner
product of gradients, so all of them come from one Gram matrix. Pure tensor code.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["ocs_scores", "ocs_topk"]


def _cos(ip: Tensor, sq_a: Tensor, sq_b: Tensor) -> Tensor:
    """``ip / (|a| |b|)``, 0 where a norm is 0 (a zero gradient has no direction); NaN stays."""
    den = sq_a.clamp_min(0).sqrt() * sq_b.clamp_min(0).sqrt()
    zero = den == 0
    return torch.where(zero, torch.zeros_like(ip), ip / torch.where(zero, 1.0, den))


def ocs_scores(gram: Tensor, n_batch: int, tau: float = 1.0) -> Tensor:
    """OCS's per-sample score ``S + V + tau A`` of the first ``n_batch`` Gram rows.

    :param gram: ``(B + C, B + C)`` Gram ``<g_i, g_j>`` of the batch's gradients (first
        ``B = n_batch`` rows) and of ``C >= 0`` coreset gradients (the rest; ``C = 0``:
        no coreset yet, ``A = 0``).
    :param n_batch: ``B >= 1``.
    :param tau: weight of the coreset affinity.
    :return: ``(B,)`` scores, in ``gram``'s dtype. With ``B = 1`` the diversity is 0. A
        non-finite gradient makes scores NaN: leave such samples out of ``gram``.
    """
    if gram.dim() != 2 or gram.shape[0] != gram.shape[1]:
        raise ValueError(f"gram must be square, got shape {tuple(gram.shape)}")
    b = int(n_batch)
    if not 1 <= b <= gram.shape[0]:
        raise ValueError(f"n_batch must be in 1..{gram.shape[0]}, got {n_batch}")
    kbb = gram[:b, :b]  # (B, B)
    sq = kbb.diagonal()  # (B,) |g_n|^2
    sim = _cos(kbb.mean(1), sq, kbb.mean().expand(b))  # <g_n, g_B> / |g_n||g_B|
    if b > 1:
        cos = _cos(kbb, sq[:, None], sq[None, :])  # (B, B)
        div = -(cos.sum(1) - cos.diagonal()) / (b - 1)
    else:
        div = torch.zeros_like(sim)
    score = sim + div
    if gram.shape[0] > b:
        kbc = gram[:b, b:]  # (B, C)
        aff = _cos(kbc.mean(1), sq, gram[b:, b:].mean().expand(b))
        score = score + tau * aff
    return score


def ocs_topk(scores: Tensor, k: int) -> Tensor:
    """Ascending indices of the ``min(k, B)`` largest scores (ties: the earlier sample).

    :param scores: ``(B,)`` scores (:func:`ocs_scores`); NaN scores are never chosen.
    :param k: how many to keep, ``>= 0``.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    s = scores.detach().to("cpu", torch.float64)
    valid = (~torch.isnan(s)).nonzero().flatten()
    k = min(k, len(valid))
    if k == 0:
        return torch.empty(0, dtype=torch.long)
    order = sorted(valid.tolist(), key=lambda i: (-float(s[i]), i))
    return torch.tensor(sorted(order[:k]), dtype=torch.long)
