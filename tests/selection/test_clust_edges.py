"""Edges of the clustering metrics and the doubling clustering's settings."""

import re

import pytest
import torch

from avalanche_gss.selection.clust import (
    DoublingClustering,
    DoublingState,
    feature_distance,
    gradient_distance,
)


def _exactly(message):
    return "^" + re.escape(message) + "$"


def test_metric_inputs_are_checked_with_exact_messages():
    with pytest.raises(ValueError, match=_exactly("cosine_gram must be (K, K), got shape (2, 3)")):
        gradient_distance(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=_exactly("cosine_gram must be (K, K), got shape (4,)")):
        gradient_distance(torch.zeros(4))
    with pytest.raises(ValueError, match=_exactly("features must be (K, D), got shape (5,)")):
        feature_distance(torch.zeros(5))
    with pytest.raises(ValueError, match=_exactly("capacity must be >= 1, got 0")):
        DoublingClustering(0)
    with pytest.raises(ValueError, match=_exactly("growth must be > 1, got 1.0")):
        DoublingClustering(3, growth=1.0)
    assert DoublingClustering(1, growth=1.001).capacity == 1


def test_feature_distances_are_exact_in_the_features_dtype():
    # Far from the origin and close together: the direct difference keeps the distance
    # exact where ||a||^2 + ||b||^2 - 2ab would cancel; float64 stays float64, integers
    # are measured as floats.
    base = torch.full((40, 8), 1.0e4, dtype=torch.float64)
    offsets = torch.linspace(0, 1e-3, 40, dtype=torch.float64)[:, None]
    x = base + offsets
    dist = feature_distance(x)
    assert dist.dtype == torch.float64
    expected = (offsets - offsets.T).abs() * 8 ** 0.5
    torch.testing.assert_close(dist, expected, atol=1e-9, rtol=1e-6)
    assert bool((dist.diagonal() == 0).all())
    ints = torch.tensor([[0, 0], [3, 4]])
    assert feature_distance(ints).tolist() == [[0.0, 5.0], [5.0, 0.0]]
    assert feature_distance(ints, squared=True).tolist() == [[0.0, 25.0], [25.0, 0.0]]


def test_clustering_draws_from_its_own_seeded_generator():
    # Two clusterings with the same seed keep the same centres whatever the global RNG;
    # the default seed is 0.
    g = torch.Generator().manual_seed(0)
    points = torch.randn(60, 3, generator=g)
    dist = torch.cdist(points, points)
    kept = []
    for global_seed, clustering in ((1, DoublingClustering(5, growth=1.5)),
                                    (2, DoublingClustering(5, growth=1.5, seed=0))):
        torch.manual_seed(global_seed)
        n, keep = 0, None
        for end in range(10, 61, 10):
            idx = torch.arange(end) if keep is None else torch.cat(
                [keep, torch.arange(end - 10, end)])
            local = clustering.update(dist[idx[:, None], idx[None, :]], n)
            keep = idx[local]
            n = len(keep)
        kept.append(keep)
    assert torch.equal(kept[0], kept[1])


def _line_distances(points):
    p = torch.tensor(points, dtype=torch.float64)[:, None]
    return (p - p.T).abs()


def test_merge_rounds_raise_the_threshold_by_the_clustering_growth():
    # Capacity 2, points 0, 1, 10 on a line: the first merge sets the threshold to the
    # closest pair (1). Then point 20 arrives (closest centres 10 apart): each round
    # multiplies the threshold by growth, rounds below 10 merge nothing, so it ends at
    # the first power 1.5^j >= 10, i.e. 1.5^6.
    clustering = DoublingClustering(2, growth=1.5)
    keep = clustering.update(_line_distances([0, 1, 10]), 0)
    assert clustering.state.threshold == 1.0 and len(keep) == 2 and 2 in keep.tolist()
    kept_points = [[0, 1, 10][i] for i in keep.tolist()]
    keep = clustering.update(_line_distances(kept_points + [20]), 2)
    assert clustering.state.threshold == pytest.approx(1.5 ** 6)
    assert len(keep) == 2


def test_which_member_of_a_merged_pair_survives_is_drawn_anew_at_each_merge():
    # Points A = 0, B = 0.1 and C = 10 with capacity 2: each merge keeps C and one of A,
    # B, taken in the order of a random permutation from the clustering's generator, so
    # over 400 merges (state reset each time) A survives about half the time (within 4.5
    # binomial standard deviations of 200).

    clustering = DoublingClustering(2, seed=3)
    dist = _line_distances([0.0, 0.1, 10.0])
    a_kept = 0
    for _ in range(400):
        clustering.state = DoublingState()
        a_kept += int(0 in clustering.update(dist, 0).tolist())
    assert abs(a_kept - 200) < 4.5 * 10, a_kept
