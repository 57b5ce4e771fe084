"""Gradient Coreset based Replay (GCR): a weighted coreset by orthogonal matching pursuit.

Tiwari, Killamsetty, Iyer and Shenoy, "GCR: Gradient Coreset Based Replay Buffer Selection
for Continual Learning", CVPR 2022 (arXiv:2111.11210). From a candidate pool with weights
``w_i`` (the buffer's weights, 1 for new data), GCR chooses ``k`` samples ``X`` and weights
``W`` minimising ``|sum_{i in X} W_i g_i - b|^2 + lam |W|^2`` with the target
``b = sum_{i in pool} w_i g_i`` (the gradient of all data seen, as the weighted buffer
summarises it), greedily by orthogonal matching pursuit (OMP, as GRAD-MATCH's
``OrthogonalMP_REG``): the residual ``r = b - sum_X W_i g_i`` starts at ``b``; each step
adds the candidate of largest ``<g_i, r>`` and re-fits ``W`` by ridge least squares
``(G_X G_X^T + lam I) W = G_X b``. Only inner products appear, so the pool's Gram ``K``
suffices: ``<g_i, b> = (K w)_i``, ``<g_i, r> = (K w)_i - (K_{:,X} W)_i``. Pure tensor code.

Differences from GRAD-MATCH's ``OrthogonalMP_REG_Parallel`` (``positive=True``), whose
choice rule (largest signed projection) and ridge fit this follows: it also drops a chosen
sample whenever its weight turns negative, and stops once the residual is below a
tolerance; here neither: the weights are the unconstrained ridge solution and exactly
``k`` samples are chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["OMPResult", "omp_select"]


@dataclass(frozen=True)
class OMPResult:
    """The outcome of :func:`omp_select`.

    :param indices: ``(k,)`` ascending pool indices chosen.
    :param weights: ``(k,)`` float64 weight of each chosen sample (same order).
    :param order: ``(k,)`` pool indices in the order OMP chose them.
    :param residual: ``|sum_X W_i g_i - b|^2`` at the end (float64, clamped at 0).
    """

    indices: Tensor
    weights: Tensor
    order: Tensor
    residual: float


def omp_select(gram: Tensor, pool_weights: Tensor, k: int, lam: float = 0.5) -> OMPResult:
    """Choose ``k`` of the pool and their weights to match the pool's weighted gradient.

    :param gram: ``(N, N)`` Gram ``<g_i, g_j>`` of the pool's gradients (finite).
    :param pool_weights: ``(N,)`` weights ``w`` of the target ``b = sum_i w_i g_i``.
    :param k: samples to choose, ``0 <= k <= N``; exactly ``k`` are chosen (a zero
        residual does not stop the pursuit, so a buffer stays full).
    :param lam: ridge regularisation ``lam >= 0`` of the weights (0.5: this library's
        default, not a value taken from the paper).
    :raises ValueError: shapes disagree, ``k`` is out of range or ``lam < 0``.
    """
    if gram.dim() != 2 or gram.shape[0] != gram.shape[1]:
        raise ValueError(f"gram must be square, got shape {tuple(gram.shape)}")
    n = gram.shape[0]
    if pool_weights.shape != (n,):
        raise ValueError(f"pool_weights must have shape ({n},), got {tuple(pool_weights.shape)}")
    if not 0 <= k <= n:
        raise ValueError(f"k must be in 0..{n}, got {k}")
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    g = gram.detach().to("cpu", torch.float64)
    w = pool_weights.detach().to("cpu", torch.float64)
    kb = g @ w  # (N,) <g_i, b>
    bb = float(w @ kb)  # |b|^2
    chosen: list[int] = []
    weights = torch.zeros(0, dtype=torch.float64)
    taken = torch.zeros(n, dtype=torch.bool)
    for _ in range(k):
        corr = kb - g[:, chosen] @ weights if chosen else kb.clone()  # (N,) <g_i, r>
        corr[taken] = -torch.inf
        j = int(torch.argmax(corr))
        chosen.append(j)
        taken[j] = True
        idx = torch.tensor(chosen)
        a = g[idx[:, None], idx[None, :]] + lam * torch.eye(len(chosen), dtype=torch.float64)
        weights = torch.linalg.lstsq(a, kb[idx].unsqueeze(1)).solution.squeeze(1)
    order = torch.tensor(chosen, dtype=torch.long)
    if chosen:
        kx = g[order[:, None], order[None, :]]
        residual = bb - 2 * float(weights @ kb[order]) + float(weights @ kx @ weights)
    else:
        residual = bb
    sort = torch.argsort(order)
    return OMPResult(order[sort], weights[sort], order, max(residual, 0.0))
