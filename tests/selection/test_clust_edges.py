"""Edges of the clustering metrics and the doubling clustering's settings."""

import re

import pytest
import torch
from helpers import exactly as _exactly

from avalanche_gss.selection.clust import (
    DoublingClustering,
    DoublingState,
    doubling_update,
    feature_distance,
    gradient_distance,
)


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


def test_centres_at_distance_zero_are_refused_with_the_stated_message():
    # Given two current centres at distance 0 (distances that are not a metric) and a full
    # buffer, When a new point forces a merge round, Then it raises rather than guessing.
    dist = _line_distances([0.0, 0.0, 5.0])
    message = "^" + re.escape("two centres are at distance <= 0 (or NaN); fix the distances") + "$"
    with pytest.raises(ValueError, match=message):
        doubling_update(dist, 2, 2, DoublingState())


def test_float32_distances_are_compared_with_the_threshold_in_float64():
    # Given float32 distances 1 (points 0-1), v = 1 + 2^-23 (0-2) and 5 (1-2), and a merge
    # raising the threshold to d = v - 2^-30 (between 1 and v, closer to v than float32
    # resolves), When the merge round keeps centres pairwise > d, Then in every order of
    # the greedy pass the kept centres are pairwise > d and each dropped one is within d
    # of a kept one: 0 and 1 merge, 2 always stays (v > d).
    v = 1.0 + 2.0**-23
    dist = torch.tensor([[0.0, 1.0, v], [1.0, 0.0, 5.0], [v, 5.0, 0.0]], dtype=torch.float32)
    assert float(dist[0, 2]) == v
    d = v - 2.0**-30
    for seed in range(12):
        gen = torch.Generator().manual_seed(seed)
        keep, state = doubling_update(dist, 0, 2, DoublingState(threshold=d / 2), generator=gen)
        assert state.threshold == d
        kept = keep.tolist()
        assert 2 in kept and len(kept) == 2, (seed, kept)
        for i in set(range(3)) - set(kept):
            assert min(float(dist[i, j]) for j in kept) <= d


def test_doubling_update_defaults_to_doubling_and_a_generator_seeded_with_0():
    # Points A = 0, B = 0.1, C = 10 with capacity 2: which of A, B survives the merge is the
    # first of them in the generator's permutation; seeds 0 and 1 keep different ones.
    dist = _line_distances([0.0, 0.1, 10.0])

    def keep(**kwargs):
        return doubling_update(dist, 0, 2, DoublingState(), **kwargs)[0].tolist()

    by_seed = [keep(generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    assert by_seed[0] != by_seed[1]
    # The default draws from its own generator seeded with 0, never from the global RNG,
    torch.manual_seed(7)
    before = torch.get_rng_state()
    assert keep() == by_seed[0]
    assert torch.equal(torch.get_rng_state(), before)
    # and raises the threshold by growth 2 per merge round: after the first merge (d = 0.1),
    # a point at 30 forces rounds 0.2, 0.4, ..., up to the first 0.1 * 2^j >= 9.9 (12.8).
    kept, state = doubling_update(dist, 0, 2, DoublingState())
    line = [0.0, 0.1, 10.0]
    union = _line_distances([line[i] for i in kept.tolist()] + [30.0])
    _, default = doubling_update(union, 2, 2, state)
    _, doubling = doubling_update(union, 2, 2, state, growth=2.0)
    assert default.threshold == doubling.threshold == pytest.approx(12.8)


def test_a_single_slot_keeps_one_centre():
    # Capacity 1 is valid: every merge keeps one centre, and every point seen lies within
    # the tracked radius of it.
    points = [0.0, 3.0, -2.0, 7.0, 7.5]
    keep, state = doubling_update(_line_distances(points), 0, 1, DoublingState())
    assert len(keep) == 1
    centre = points[int(keep[0])]
    assert max(abs(p - centre) for p in points) <= state.radius
