"""GSS-Clust / FSS-Clust: the doubling algorithm (Charikar et al. 2004) on distance matrices."""

import math
import subprocess
import sys

import pytest
import torch

from avalanche_gss.selection.clust import (
    DoublingClustering,
    DoublingState,
    doubling_update,
    feature_distance,
    gradient_distance,
)


def line(*xs: float) -> torch.Tensor:
    """Points on a line as ``(K, 1)`` features."""
    return torch.tensor(xs, dtype=torch.float64)[:, None]


def test_gradient_distance_of_known_cosines():
    # Given cosines 1, 0 and -1 (and a zero gradient: cosine 0 with everything, itself too),
    cos = torch.tensor([[1.0, 0.0, -1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])
    # Then the distances between unit gradients are 0, sqrt(2) and 2, with a zero diagonal.
    expected = torch.tensor([[0.0, math.sqrt(2), 2.0], [math.sqrt(2), 0.0, math.sqrt(2)]])
    assert torch.allclose(gradient_distance(cos)[:2], expected)
    assert gradient_distance(cos).diagonal().tolist() == [0.0, 0.0, 0.0]
    # and they equal ||u_i - u_j|| for random directions.
    v = torch.randn(6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u = v / v.norm(dim=1, keepdim=True)
    assert torch.allclose(gradient_distance(u @ u.T), torch.cdist(u, u), atol=1e-7)


def test_feature_distance_euclidean_and_squared():
    f = torch.tensor([[0.0, 0.0], [3.0, 4.0], [3.0, 0.0]])
    assert feature_distance(f).tolist() == [[0, 5, 3], [5, 0, 4], [3, 4, 0]]
    assert feature_distance(f, squared=True)[0, 1] == 25


def test_hand_computed_stream_on_a_line():
    clust = DoublingClustering(2, seed=0)
    # Given M = 2 and the points 0, 1, 10: the third overflows, the threshold becomes the
    # smallest distance (1), and one of 0 / 1 is merged into the other.
    pts = line(0, 1, 10)
    keep = clust.update(feature_distance(pts), 0)
    stored = pts[keep]
    assert len(keep) == 2 and 10 in stored and ((0 in stored) != (1 in stored))
    assert (clust.state.threshold, clust.state.radius, clust.state.n_seen) == (1, 1, 3)
    # When 10.5 arrives, Then it is absorbed (within d = 1 of centre 10): nothing changes.
    union = torch.cat([stored, line(10.5)])
    assert clust.update(feature_distance(union), 2).tolist() == [0, 1]
    assert (clust.state.threshold, clust.state.radius) == (1, 1)
    # When 30 arrives, Then it is a centre; the overflow doubles d 1 -> 2 -> ... -> 16 (the
    # first value >= the closest pair, 9 or 10), merging the two left centres; radius 1 + 16.
    union = torch.cat([stored, line(30)])
    keep = clust.update(feature_distance(union), 2)
    assert len(keep) == 2 and 30 in union[keep]
    assert (clust.state.threshold, clust.state.radius, clust.state.n_seen) == (16, 17, 5)


@pytest.mark.parametrize("growth", [2.0, 1.01])
def test_invariants_on_a_random_stream(growth):
    # Given 2-D points in 8 clusters arriving in batches of 25, with M = 10:
    gen = torch.Generator().manual_seed(1)
    centres = torch.randn(8, 2, generator=gen, dtype=torch.float64) * 5
    points = centres[torch.randint(0, 8, (500,), generator=gen)]
    points += 0.5 * torch.randn(500, 2, generator=gen, dtype=torch.float64)
    clust = DoublingClustering(10, growth=growth, seed=2)
    stored, previous_d = points[:0], 0.0
    for start in range(0, 500, 25):
        union = torch.cat([stored, points[start : start + 25]])
        keep = clust.update(feature_distance(union), len(stored))
        stored, state = union[keep], clust.state
        seen = points[: start + 25]
        # Then never more than M centres, pairwise farther apart than the threshold,
        assert 1 <= len(stored) <= 10
        pair = feature_distance(stored).fill_diagonal_(math.inf)
        assert float(pair.min()) > state.threshold
        # every point seen so far lies within the tracked radius of a stored centre,
        assert float(torch.cdist(seen, stored).min(1).values.max()) <= state.radius + 1e-9
        # the radius stays within growth / (growth - 1) * d (2d for doubling),
        assert state.radius <= growth / (growth - 1) * state.threshold + 1e-9
        # and the threshold never decreases.
        assert state.threshold >= previous_d and state.n_seen == start + 25
        previous_d = state.threshold


def test_deterministic_given_seed_and_resumable_from_state_dict():
    gen = torch.Generator().manual_seed(3)
    batches = [torch.randn(20, 3, generator=gen) for _ in range(6)]

    def run(clust, stored, batches):
        for batch in batches:
            union = torch.cat([stored, batch])
            stored = union[clust.update(feature_distance(union), len(stored))]
        return stored

    empty = batches[0][:0]
    full = DoublingClustering(8, seed=5)
    expected = run(full, empty, batches)
    assert torch.equal(run(DoublingClustering(8, seed=5), empty, batches), expected)
    # Given a run saved after 3 batches, When resumed in a fresh object, Then it ends the same.
    first = DoublingClustering(8, seed=5)
    stored = run(first, empty, batches[:3])
    saved = first.state_dict()
    assert {type(v) for v in saved.values()} <= {float, int, torch.Tensor}
    resumed = DoublingClustering(8, seed=99)
    resumed.load_state_dict(saved)
    assert torch.equal(run(resumed, stored, batches[3:]), expected)
    assert resumed.state == full.state


def test_duplicates_are_absorbed_while_filling():
    # With d = 0 (buffer not yet full) an exact duplicate is covered at distance 0.
    pts = line(0, 0, 1)
    keep, state = doubling_update(feature_distance(pts), 0, 5, DoublingState())
    assert keep.tolist() == [0, 2] and state == DoublingState(0.0, 0.0, 3)


def test_invalid_inputs_raise():
    dist = torch.zeros(5, 5)
    with pytest.raises(ValueError, match="capacity"):
        doubling_update(dist, 0, 0, DoublingState())
    with pytest.raises(ValueError, match="growth"):
        doubling_update(dist, 0, 3, DoublingState(), growth=1.0)
    with pytest.raises(ValueError, match="n_centres"):
        doubling_update(dist, 4, 3, DoublingState())
    with pytest.raises(ValueError, match=r"\(K, K\)"):
        doubling_update(torch.zeros(5, 4), 0, 3, DoublingState())
    with pytest.raises(ValueError, match="growth"):
        DoublingClustering(3, growth=0.5)


def test_clustering_never_imports_avalanche():
    code = (
        "import sys, torch\n"
        "from avalanche_gss.selection.clust import DoublingClustering, gradient_distance\n"
        "DoublingClustering(2).update(gradient_distance(torch.eye(4)), 0)\n"
        "assert 'avalanche' not in sys.modules, 'avalanche imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
