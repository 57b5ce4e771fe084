"""GSS-Clust and FSS-Clust: the doubling algorithm for incremental clustering.

The paper (section 4.1, "Online Clustering") keeps ``M`` cluster centres with the doubling
algorithm of Charikar, Chekuri, Feder and Motwani (2004), "Incremental clustering and
dynamic information retrieval", using as metric the Euclidean distance between normalised
gradients (GSS-Clust, :func:`gradient_distance`) or between features (FSS-Clust,
:func:`feature_distance`). The stored samples are the centres; a threshold ``d`` grows
over the stream:

- *update*: a new point within ``d`` of a centre is absorbed (not stored), otherwise it
  becomes a centre;
- *merge*: when more than ``M`` centres exist, ``d`` is multiplied by ``growth`` (the
  first time, when ``d = 0``, it is set to the smallest distance between centres) and
  centres are re-selected greedily, in a seeded random order, so that the kept ones are
  pairwise farther apart than ``d``; each dropped centre is within ``d`` of a kept one.
  Repeated until at most ``M`` remain. Rounds in which no two centres are within the
  raised threshold change nothing and are skipped in one step.

Guarantees for a metric (Euclidean, not squared), tracked in :class:`DoublingState`:
stored centres are pairwise ``> d``; never more than ``M``; every point seen so far lies
within ``radius`` of a stored centre, where ``radius`` grows by ``max(radius, dist)`` on
absorption and by the new ``d`` on each merge round (triangle inequality), and stays
``<= growth / (growth - 1) * d`` (``2d`` for doubling). Any ``M + 1`` points pairwise
``> d`` force ``d < growth * OPT`` (optimal ``M``-clustering diameter), so for
``growth = 2`` every cluster has diameter ``< 8 OPT``, the doubling algorithm's ratio.

The authors' code differs (``model/GSS_Clust.py``, ``model/FSS_Clust.py``): distances are
``1 - cos`` (``= d_E^2 / 2`` on unit gradients) for GSS-Clust and squared Euclidean on the
logits for FSS-Clust; at each overflow the threshold is *reset* to the union's smallest
distance and the whole union is re-scanned from a random first point with threshold
``* 1.01`` (GSS, ``--age 0.01``) or ``* 2`` (FSS) per round. On a squared distance a factor
``b`` is a factor ``sqrt(b)`` on the Euclidean one. Use ``growth=1.01`` for the authors'
GSS-Clust value; squared distances (``feature_distance(..., squared=True)``) keep the
pairwise-separation invariant but void the radius bound (no triangle inequality).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "DoublingClustering",
    "DoublingState",
    "doubling_update",
    "feature_distance",
    "gradient_distance",
]


def gradient_distance(cosine_gram: Tensor) -> Tensor:
    """GSS-Clust metric: Euclidean distance between normalised gradients (section 4.1).

    ``||u_i - u_j|| = sqrt(2 - 2 cos(g_i, g_j))``, clamped at 0 against round-off. The
    diagonal is set to 0, so a zero gradient (cosine 0 with everything, itself included)
    sits at ``sqrt(2)`` from every other point, like a direction orthogonal to all.

    :param cosine_gram: ``(K, K)`` cosine Gram of the gradients (Alg. 1 line 5's matrix).
    :return: ``(K, K)`` distances.
    """
    if cosine_gram.dim() != 2 or cosine_gram.shape[0] != cosine_gram.shape[1]:
        raise ValueError(f"cosine_gram must be (K, K), got shape {tuple(cosine_gram.shape)}")
    dist = (2 - 2 * cosine_gram).clamp_min(0).sqrt()  # (K, K)
    return dist.fill_diagonal_(0)


def feature_distance(features: Tensor, *, squared: bool = False) -> Tensor:
    """FSS-Clust metric: Euclidean distance between features (section 4.1).

    :param features: ``(K, D)`` features, the paper's "last layer before classification"
        (``model.features(x)``); the authors' code used the logits.
    :param squared: return squared distances, as the authors' ``FSS_Clust.py`` does (not a
        metric: the radius bound of :class:`DoublingState` no longer holds).
    :return: ``(K, K)`` distances.
    """
    if features.dim() != 2:
        raise ValueError(f"features must be (K, D), got shape {tuple(features.shape)}")
    x = features if features.is_floating_point() else features.float()
    dist = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")  # (K, K), exact 0 diag
    return dist.pow(2) if squared else dist


@dataclass(frozen=True)
class DoublingState:
    """What the doubling algorithm carries between updates.

    :param threshold: ``d``: stored centres are pairwise farther apart than ``d``.
    :param radius: every point seen so far is within ``radius`` of a stored centre (for a
        metric); ``radius <= growth / (growth - 1) * threshold``.
    :param n_seen: points offered so far (initial centres excluded).
    """

    threshold: float = 0.0
    radius: float = 0.0
    n_seen: int = 0


def _merge(
    matrix: Tensor, centres: Tensor, d: float, growth: float, gen: torch.Generator
) -> tuple[Tensor, float]:
    """One merge round: raise ``d``, keep a greedy set of centres pairwise ``> d``."""
    pair = matrix[centres[:, None], centres[None, :]].to(torch.float64)  # (C, C), a copy
    pair.diagonal().fill_(math.inf)
    closest = float(pair.min())
    if not closest > 0:
        raise ValueError("two centres are at distance <= 0 (or NaN); fix the distances")
    d = closest if d <= 0 else d * growth
    while d < closest:  # rounds below the closest pair merge nothing: skip them
        d *= growth
    alive = torch.ones(centres.numel(), dtype=torch.bool)
    kept = []
    for i in torch.randperm(centres.numel(), generator=gen).tolist():
        if alive[i]:
            kept.append(i)
            alive &= pair[i] > d  # centres within d of a kept one are merged into it
    return centres[sorted(kept)], d


def doubling_update(
    distances: Tensor,
    n_centres: int,
    capacity: int,
    state: DoublingState,
    *,
    growth: float = 2.0,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, DoublingState]:
    """Offer new points to the clustering; return which of the union to store.

    The union is ``[current centres (n_centres), new points]``; the new points are
    processed one by one, in order (update stage), with merge rounds whenever more than
    ``capacity`` centres exist (see the module docstring).

    :param distances: ``(K, K)`` distance matrix of the union.
    :param n_centres: number of current centres, the first rows of the union.
    :param capacity: ``M``, the most centres (buffer slots) kept.
    :param state: the state returned by the previous call (``DoublingState()`` at first).
    :param growth: factor by which a merge round raises the threshold: 2 is the doubling
        algorithm; the authors' GSS-Clust used 1.01 on ``1 - cos``.
    :param generator: order of the greedy re-selection (default: seeded with 0).
    :return: ``(keep, state)``: ascending union indices of the stored centres (at most
        ``capacity``), and the new state.
    """
    if distances.dim() != 2 or distances.shape[0] != distances.shape[1]:
        raise ValueError(f"distances must be (K, K), got shape {tuple(distances.shape)}")
    matrix = distances.detach().cpu()
    k = matrix.shape[0]
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    if not growth > 1:
        raise ValueError(f"growth must be > 1, got {growth}")
    if not 0 <= n_centres <= min(k, capacity):
        raise ValueError(f"n_centres must be in [0, min(K={k}, capacity={capacity})]")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    d, radius = state.threshold, state.radius
    centres = torch.arange(n_centres)
    for p in range(n_centres, k):
        if centres.numel():
            nearest = float(matrix[p, centres].min())
            if nearest <= d:  # absorbed: p is covered by a centre
                radius = max(radius, nearest)
                continue
        centres = torch.cat([centres, torch.tensor([p])])
        while centres.numel() > capacity:
            centres, d = _merge(matrix, centres, d, growth, gen)
            radius += d  # a merged centre is within d of its keeper
    return centres, DoublingState(d, radius, state.n_seen + k - n_centres)


class DoublingClustering:
    """The doubling algorithm with its state and generator, saveable (GSS/FSS-Clust).

    :param capacity: ``M``, the most centres kept.
    :param growth: threshold factor per merge round (2: doubling; authors' GSS-Clust 1.01).
    :param seed: seed of the generator ordering the greedy re-selection.
    """

    def __init__(self, capacity: int, *, growth: float = 2.0, seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if not growth > 1:
            raise ValueError(f"growth must be > 1, got {growth}")
        self.capacity = capacity
        self.growth = growth
        self.state = DoublingState()
        self.generator = torch.Generator().manual_seed(seed)

    def update(self, distances: Tensor, n_centres: int) -> Tensor:
        """Run :func:`doubling_update` and keep the new state; return the kept indices.

        :param distances: distances over the union ``[centres, new points]``.
        :param n_centres: number of current centres (first rows of the union).
        """
        keep, self.state = doubling_update(
            distances,
            n_centres,
            self.capacity,
            self.state,
            growth=self.growth,
            generator=self.generator,
        )
        return keep

    def state_dict(self) -> dict[str, Any]:
        """Plain floats, ints and the generator state (a uint8 tensor)."""
        return {
            "threshold": self.state.threshold,
            "radius": self.state.radius,
            "n_seen": self.state.n_seen,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.state = DoublingState(
            float(state["threshold"]), float(state["radius"]), int(state["n_seen"])
        )
        self.generator.set_state(state["generator"])
