"""Solid angle of the relaxed feasible cone and the surrogate that stands in for it.

The buffer ``{g_1 .. g_k}`` defines the feasible cone ``C~ = {g : <g, g_i> >= 0 for all i}``
(paper Eq. 3). Its size is measured in ``span(g_1 .. g_k)`` (Eq. 4): the share of the unit
sphere of that span that lies inside the cone. With no tractable formula, the paper
estimates it by Monte Carlo (appendix A): an average of Bernoulli variables, so the
standard error is at most ``1 / (2 sqrt(N))``. :func:`solid_angle` does that with standard
Gaussians drawn in the span (rotation invariant, so the share of Gaussian draws in the cone
is the share of the sphere). :func:`surrogate` is Eq. 5's ``sum_{i,j} cos(g_i, g_j)``, and
:func:`surrogate_vs_solid_angle` is the experiment of Figure 2: random vector sets in 200
dimensions, their surrogate against their solid angle.

Pure torch/numpy; no Avalanche import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from avalanche_gss.gradients import cosine_from_gram

__all__ = [
    "SolidAngle",
    "SurrogateStudy",
    "span_coordinates",
    "solid_angle",
    "surrogate",
    "pearson",
    "spearman",
    "shared_direction_set",
    "surrogate_vs_solid_angle",
]


@dataclass(frozen=True)
class SolidAngle:
    """A Monte Carlo estimate of the share of the span's unit sphere inside the cone.

    :param value: the estimate ``p`` (hits / ``n_samples``), in ``[0, 1]``.
    :param stderr: its standard error ``sqrt(p (1 - p) / N)``, at most :attr:`stderr_bound`.
    :param n_samples: number of Gaussian draws ``N``.
    :param span_dim: dimension of ``span(g_1 .. g_k)`` (the rank of the vectors).
    """

    value: float
    stderr: float
    n_samples: int
    span_dim: int

    @property
    def stderr_bound(self) -> float:
        """The paper's bound on the standard error, ``1 / (2 sqrt(N))`` (appendix A)."""
        return 0.5 / math.sqrt(self.n_samples)


def span_coordinates(vectors: Tensor, *, rtol: float | None = None) -> Tensor:
    """Coordinates of the vectors in an orthonormal basis of their span.

    With ``V = U S W^T`` (thin SVD), the rows of ``W^T`` for the singular values above
    ``rtol * S_max`` span the vectors, and ``g_i = sum_r (U S)_{ir} w_r``. Inner products
    with any ``g`` of the span are then ``A z`` for ``g = W_r z``.

    :param vectors: ``(k, d)`` rows ``g_i``.
    :param rtol: relative singular-value threshold of the rank; by default
        ``max(k, d) * eps`` of float64 (NumPy's ``matrix_rank`` rule).
    :return: ``A``, shape ``(k, r)`` in float64, ``r`` = rank of the vectors.
    """
    if vectors.dim() != 2:
        raise ValueError(f"vectors must be a (k, d) matrix, got shape {tuple(vectors.shape)}")
    v = vectors.detach().to("cpu", torch.float64)  # (k, d)
    if v.shape[0] == 0:
        raise ValueError("need at least one vector")
    u, s, _ = torch.linalg.svd(v, full_matrices=False)  # (k, q), (q,)
    if rtol is None:
        rtol = max(v.shape) * torch.finfo(torch.float64).eps
    if s.numel() == 0 or float(s[0]) == 0.0:
        raise ValueError("all vectors are zero: their span has no unit sphere")
    r = int((s > rtol * s[0]).sum())
    return u[:, :r] * s[:r]  # (k, r)


def solid_angle(
    vectors: Tensor,
    *,
    n_samples: int = 100_000,
    generator: torch.Generator | None = None,
    chunk_size: int = 1 << 16,
    rtol: float | None = None,
) -> SolidAngle:
    """Monte Carlo estimate of the solid angle of ``{g : <g, g_i> >= 0}`` in the span (Eq. 4).

    Draws ``z ~ N(0, I_r)`` in the ``r``-dimensional span and counts the draws with
    ``<z, g_i> >= 0`` for every ``i``; the result is the share of the span's unit sphere
    (``lambda_{r-1}`` of Eq. 4 divided by the sphere's area). Known values: ``1/2`` for one
    vector (or several parallel ones), ``2^-k`` for ``k`` orthogonal vectors,
    ``(pi - a) / (2 pi)`` for two vectors at angle ``a``. Zero vectors impose no constraint.

    :param vectors: ``(k, d)`` rows ``g_i`` (e.g. buffer gradients).
    :param n_samples: number of draws ``N`` (the paper used ``10^9``); the standard error is
        at most ``1 / (2 sqrt(N))``.
    :param generator: CPU ``torch.Generator`` for the draws; a fresh one seeded with 0 by
        default, so results are reproducible.
    :param chunk_size: draws per matrix product (bounds memory at ``chunk_size * k``).
    :param rtol: rank threshold, see :func:`span_coordinates`.
    :return: the estimate, its standard error and the span's dimension.
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    coords = span_coordinates(vectors, rtol=rtol)  # (k, r)
    r = coords.shape[1]
    hits = 0
    for start in range(0, n_samples, chunk_size):
        m = min(chunk_size, n_samples - start)
        z = torch.randn(m, r, generator=generator, dtype=torch.float64)  # (m, r)
        hits += int(((z @ coords.T) >= 0).all(dim=1).sum())  # (m, k) -> count
    p = hits / n_samples
    return SolidAngle(
        value=p, stderr=math.sqrt(p * (1.0 - p) / n_samples), n_samples=n_samples, span_dim=r
    )


def surrogate(vectors: Tensor, *, eps: float = 1e-12) -> float:
    """Return the surrogate ``sum_{i,j} <g_i, g_j> / (|g_i| |g_j|)`` (Eq. 5), diagonal included.

    It equals ``|sum_i g_i / |g_i||^2``, so it lies in ``[0, k^2]`` for ``k`` non-zero
    vectors (``k`` for orthogonal ones, ``k^2`` for parallel ones), and
    ``k^2 (1 - Var[g / |g|])`` (Eq. 6). A zero vector has
    cosine 0 with everything, as in :func:`~avalanche_gss.gradients.cosine_from_gram`.

    :param vectors: ``(k, d)`` rows ``g_i``.
    :param eps: norms at or below this count as zero.
    """
    if vectors.dim() != 2:
        raise ValueError(f"vectors must be a (k, d) matrix, got shape {tuple(vectors.shape)}")
    v = vectors.detach().to(torch.float64)
    return float(cosine_from_gram(v @ v.T, eps).sum())  # (k, k) -> scalar


def pearson(x: Any, y: Any) -> float:
    """Pearson correlation of two equal-length sequences (``nan`` if one is constant).

    :param x: first sequence of numbers.
    :param y: second sequence of numbers.
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError("need two 1-D sequences of the same length >= 2")
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / denom if denom > 0 else math.nan


def _ranks(a: np.ndarray) -> np.ndarray:
    """Ranks from 0, ties sharing their average rank."""
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a), dtype=np.float64)
    ranks[order] = np.arange(len(a), dtype=np.float64)
    _, inverse = np.unique(a, return_inverse=True)
    return (np.bincount(inverse, ranks) / np.bincount(inverse))[inverse]


def spearman(x: Any, y: Any) -> float:
    """Spearman rank correlation (Pearson of the ranks, ties averaged).

    :param x: first sequence of numbers.
    :param y: second sequence of numbers.
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("need two 1-D sequences of the same length")
    return pearson(_ranks(a), _ranks(b))


def shared_direction_set(
    k: int,
    dim: int,
    correlation: float,
    *,
    jitter: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``k`` random vectors in ``dim`` dimensions with pairwise cosines near ``correlation``.

    Random unit directions ``e_i`` (nearly orthogonal when ``dim >> k``) are mixed with their
    shared mean direction, ``g_i = e_i + b_i * mean(e)``. With ``jitter = 0`` every
    ``b_i = b``, chosen so that the pairwise cosine would be exactly ``correlation`` for
    orthonormal ``e_i``; any value in ``[-1/(k-1), 1)`` is reachable (``-1/(k-1)`` makes
    the vectors sum to zero, a cone of measure zero; values near 1 make them nearly
    parallel). ``jitter > 0`` draws each weight ``b_i = b (1 + jitter * U(-1, 1))``, so the
    pairwise cosines of one set differ.

    :param k: number of vectors (>= 2).
    :param dim: ambient dimension (>= k).
    :param correlation: target pairwise cosine ``rho``.
    :param jitter: relative spread of the per-vector weights, in ``[0, 1]``.
    :param generator: CPU generator of the directions and weights.
    :return: ``(k, dim)`` float64 rows.
    """
    if k < 2 or dim < k:
        raise ValueError(f"need 2 <= k <= dim, got k={k}, dim={dim}")
    if not -1.0 / (k - 1) <= correlation < 1.0:
        raise ValueError(f"correlation must lie in [-1/(k-1), 1), got {correlation}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must lie in [0, 1], got {jitter}")
    e = torch.randn(k, dim, generator=generator, dtype=torch.float64)  # (k, dim)
    e = e / e.norm(dim=1, keepdim=True)
    # Orthonormal e_i and equal weights: cos = s / (1 + s) with s = ((1 + b)^2 - 1) / k.
    s = correlation / (1.0 - correlation)
    b = math.sqrt(max(0.0, 1.0 + k * s)) - 1.0
    spread = 2.0 * torch.rand(k, 1, generator=generator, dtype=torch.float64) - 1.0  # (k, 1)
    weights = b * (1.0 + jitter * spread)  # (k, 1)
    return e + weights * e.mean(dim=0, keepdim=True)  # (k, dim)


@dataclass(frozen=True)
class SurrogateStudy:
    """Figure 2's data: the surrogate and the solid angle of random vector sets.

    :param records: one dict per set: ``correlation`` (the drawn target cosine),
        ``surrogate``, ``solid_angle``, ``stderr``, ``span_dim``.
    :param pearson: Pearson correlation of surrogate and solid angle.
    :param spearman: Spearman (rank) correlation of surrogate and solid angle; its sign
        says whether a larger surrogate goes with a larger solid angle (the monotonic
        relation the paper reports).
    :param log_pearson: Pearson correlation of the surrogate and ``log10`` of the solid
        angle (the figure's log scale), over the sets with a non-zero estimate.
    :param settings: the arguments that produced it.
    """

    records: list[dict[str, float]]
    pearson: float
    spearman: float
    log_pearson: float
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def pearson_sign(self) -> int:
        """Sign of :attr:`pearson` (-1, 0 or +1)."""
        return int(np.sign(self.pearson))

    @property
    def spearman_sign(self) -> int:
        """Sign of :attr:`spearman` (-1, 0 or +1)."""
        return int(np.sign(self.spearman))


def surrogate_vs_solid_angle(
    n_sets: int,
    k: int,
    dim: int = 200,
    n_samples: int = 20_000,
    generator: torch.Generator | None = None,
    *,
    correlation_range: tuple[float, float] = (0.0, 0.9),
    jitter: float = 0.5,
    chunk_size: int = 1 << 16,
) -> SurrogateStudy:
    """Figure 2: surrogate (Eq. 5) against Monte Carlo solid angle (Eq. 4) of random sets.

    Each set is :func:`shared_direction_set` with its own target correlation drawn
    uniformly from ``correlation_range``, so the surrogate covers ``[k, k^2]`` roughly
    uniformly (``k`` orthogonal-like vectors up to nearly parallel ones), while the random
    directions and the per-vector weights (``jitter``) add scatter within and across sets.

    :param n_sets: number of vector sets (points of the figure).
    :param k: vectors per set (the buffer size ``M`` of Eq. 4).
    :param dim: ambient dimension (the paper: 200).
    :param n_samples: Monte Carlo draws per set.
    :param generator: CPU generator for the sets and the draws (seeded with 0 by default).
    :param correlation_range: ``(low, high)`` of the per-set target cosine, within
        ``[-1/(k-1), 1)``. Near ``-1/(k-1)`` solid angles fall below ``1/n_samples``.
    :param jitter: relative spread of the per-vector mixing weights, see
        :func:`shared_direction_set`.
    :param chunk_size: Monte Carlo draws per matrix product.
    :return: the records and the correlations.
    """
    if n_sets < 2:
        raise ValueError(f"n_sets must be >= 2, got {n_sets}")
    low, high = correlation_range
    if not low <= high:
        raise ValueError(f"correlation_range must be (low, high) with low <= high, got {low, high}")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    records: list[dict[str, float]] = []
    for _ in range(n_sets):
        rho = low + (high - low) * float(torch.rand((), generator=generator, dtype=torch.float64))
        vectors = shared_direction_set(k, dim, rho, jitter=jitter, generator=generator)  # (k, dim)
        est = solid_angle(vectors, n_samples=n_samples, generator=generator, chunk_size=chunk_size)
        records.append(
            {
                "correlation": rho,
                "surrogate": surrogate(vectors),
                "solid_angle": est.value,
                "stderr": est.stderr,
                "span_dim": float(est.span_dim),
            }
        )
    sur = [r["surrogate"] for r in records]
    ang = [r["solid_angle"] for r in records]
    positive = [(s, math.log10(a)) for s, a in zip(sur, ang, strict=True) if a > 0]
    log_r = pearson(*zip(*positive, strict=True)) if len(positive) >= 2 else math.nan
    settings = {
        "n_sets": n_sets,
        "k": k,
        "dim": dim,
        "n_samples": n_samples,
        "correlation_range": [low, high],
        "jitter": jitter,
    }
    return SurrogateStudy(
        records=records,
        pearson=pearson(sur, ang),
        spearman=spearman(sur, ang),
        log_pearson=log_r,
        settings=settings,
    )
