"""Solid angle of the feasible cone (paper Eq. 4, appendix A) and the surrogate (Eq. 5)."""

import math

import numpy as np
import pytest
import torch
from helpers import seeded as gen
from scipy import stats

from avalanche_gss.solid_angle import (
    SolidAngle,
    pearson,
    shared_direction_set,
    solid_angle,
    span_coordinates,
    spearman,
    surrogate,
    surrogate_vs_solid_angle,
)

N = 100_000


def orthonormal(k: int, dim: int, seed: int = 0) -> torch.Tensor:
    """k orthonormal rows in dim dimensions, randomly rotated."""
    q, _ = torch.linalg.qr(torch.randn(dim, k, generator=gen(seed), dtype=torch.float64))
    return q.T  # (k, dim)


def assert_within(est: SolidAngle, truth: float, n_se: float = 4.0) -> None:
    """The estimate lies within n_se standard errors of the truth (true-p standard error)."""
    se = math.sqrt(truth * (1 - truth) / est.n_samples)
    assert abs(est.value - truth) <= n_se * se + 1e-12, (est.value, truth, se)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_orthogonal_vectors_give_the_positive_orthant(k):
    # Given k orthogonal vectors of different lengths in 40 dimensions
    basis = orthonormal(k, 40, seed=k)
    vectors = basis * torch.linspace(0.5, 3.0, k, dtype=torch.float64)[:, None]
    # When the solid angle is estimated in their span
    est = solid_angle(vectors, n_samples=N, generator=gen(k))
    # Then it is the orthant's share 2^-k, in a k-dimensional span
    assert est.span_dim == k
    assert_within(est, 2.0**-k)


@pytest.mark.parametrize("angle", [0.3, math.pi / 2, 2.0, 3.0])
def test_two_vectors_at_angle_a(angle):
    # Given two vectors at angle a, in a random 2-D plane of 30 dimensions
    e = orthonormal(2, 30, seed=1)
    g1 = 2.0 * e[0]
    g2 = 0.7 * (math.cos(angle) * e[0] + math.sin(angle) * e[1])
    est = solid_angle(torch.stack([g1, g2]), n_samples=N, generator=gen(2))
    # Then the feasible arc is pi - a of the 2 pi circle
    assert est.span_dim == 2
    assert_within(est, (math.pi - angle) / (2 * math.pi))


def test_single_vector_is_a_half_space():
    est = solid_angle(torch.randn(1, 50, generator=gen(3)), n_samples=N, generator=gen(4))
    assert est.span_dim == 1
    assert_within(est, 0.5)


def test_identical_and_parallel_vectors_are_one_half_space():
    g = torch.randn(1, 50, generator=gen(5), dtype=torch.float64)
    # Identical copies, and positive multiples: a 1-D span, one half-line of two
    for vectors in (g.repeat(4, 1), torch.cat([g, 3 * g, 0.1 * g])):
        est = solid_angle(vectors, n_samples=N, generator=gen(6))
        assert est.span_dim == 1
        assert_within(est, 0.5)


def test_opposite_vectors_leave_only_the_hyperplane():
    g = torch.randn(1, 20, generator=gen(7), dtype=torch.float64)
    est = solid_angle(torch.cat([g, -2 * g]), n_samples=10_000, generator=gen(8))
    assert est.value == 0.0 and est.stderr == 0.0


def test_zero_vectors_impose_no_constraint():
    g = torch.randn(2, 20, generator=gen(9), dtype=torch.float64)
    with_zero = torch.cat([g, torch.zeros(1, 20, dtype=torch.float64)])
    a = solid_angle(g, n_samples=20_000, generator=gen(10))
    b = solid_angle(with_zero, n_samples=20_000, generator=gen(10))
    assert a == b
    with pytest.raises(ValueError, match="zero"):
        solid_angle(torch.zeros(3, 5))


def trihedral_fraction(vectors: torch.Tensor) -> float:
    """Exact share of the sphere of {g : <g, g_i> >= 0} for 3 independent vectors in 3-D.

    With the g_i as rows of V, the cone {g : V g >= 0} = {V^-1 l : l >= 0} is spanned by
    the columns of V^-1; a trihedral
    cone with unit edges a, b, c has solid angle Omega with
    tan(Omega / 2) = |a.(b x c)| / (1 + a.b + b.c + c.a)  (Van Oosterom & Strackee).
    """
    edges = torch.linalg.inv(vectors).T  # columns of V^-1, as rows
    a, b, c = edges / edges.norm(dim=1, keepdim=True)
    triple = abs(float(torch.dot(a, torch.linalg.cross(b, c))))
    denom = 1 + float(a @ b + b @ c + c @ a)
    return 2 * math.atan2(triple, denom) / (4 * math.pi)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_triples_match_the_exact_trihedral_angle(seed):
    # Given 3 random vectors in 3-D, embedded in 25 dimensions by a random isometry
    v3 = torch.randn(3, 3, generator=gen(100 + seed), dtype=torch.float64)
    embed = orthonormal(3, 25, seed=200 + seed)  # (3, 25)
    est = solid_angle(v3 @ embed, n_samples=N, generator=gen(seed))
    # Then the Monte Carlo estimate agrees with the closed form within 4 standard errors
    truth = trihedral_fraction(v3)
    assert 0 < truth < 0.5
    assert est.span_dim == 3
    assert_within(est, truth)


def test_standard_error_and_bound():
    est = solid_angle(orthonormal(3, 10), n_samples=40_000, generator=gen(11))
    assert est.stderr == pytest.approx(math.sqrt(est.value * (1 - est.value) / 40_000))
    assert est.stderr <= est.stderr_bound == pytest.approx(1 / (2 * math.sqrt(40_000)))


def test_chunking_and_seed_give_identical_estimates():
    v = torch.randn(4, 30, generator=gen(12))
    a = solid_angle(v, n_samples=30_000, generator=gen(13), chunk_size=7_000)
    b = solid_angle(v, n_samples=30_000, generator=gen(13), chunk_size=7_000)
    assert a == b
    assert solid_angle(v, n_samples=1000) == solid_angle(v, n_samples=1000)  # default seed


def test_span_coordinates_preserve_inner_products():
    v = torch.randn(5, 40, generator=gen(14), dtype=torch.float64)
    v[4] = v[0] + 2 * v[1]  # rank 4
    a = span_coordinates(v)
    assert a.shape == (5, 4)
    torch.testing.assert_close(a @ a.T, v @ v.T)


def test_surrogate_known_values():
    k = 6
    basis = orthonormal(k, 30)
    assert surrogate(basis) == pytest.approx(k)  # orthogonal: only the diagonal
    assert surrogate(basis[:1].repeat(k, 1)) == pytest.approx(k**2)  # parallel
    assert surrogate(torch.cat([basis[:3], -basis[:3]])) == pytest.approx(0.0, abs=1e-9)
    # Eq. 6: sum_ij cos = k^2 (1 - Var[g/|g|])
    v = torch.randn(k, 30, generator=gen(15), dtype=torch.float64)
    u = v / v.norm(dim=1, keepdim=True)
    var = 1 - float(u.mean(dim=0).norm() ** 2)
    assert surrogate(v) == pytest.approx(k**2 * (1 - var))


def test_correlations_match_scipy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = x**3 + rng.normal(size=50)
    y[:10] = 1.0  # ties
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))


def test_shared_direction_set_reaches_its_target_correlation():
    for rho in (-1 / 4, 0.0, 0.5, 0.9):
        v = shared_direction_set(5, 2000, rho, generator=gen(16))
        cos = torch.nn.functional.cosine_similarity(v[:, None], v[None], dim=-1)
        off = cos[~torch.eye(5, dtype=torch.bool)]
        assert off.mean().item() == pytest.approx(rho, abs=0.05)
    with pytest.raises(ValueError):
        shared_direction_set(5, 200, -0.3)


def test_figure2_surrogate_is_monotonic_in_the_solid_angle():
    # Given 150 random sets of k=10 vectors in 200 dimensions, target cosines in [0, 0.9]
    study = surrogate_vs_solid_angle(150, 10, dim=200, n_samples=20_000, generator=gen(0))
    sur = np.array([r["surrogate"] for r in study.records])
    ang = np.array([r["solid_angle"] for r in study.records])
    # The surrogate spans a wide range, from near-orthogonal (k) towards parallel (k^2)
    assert sur.min() < 15 and sur.max() > 70
    assert ang.min() < 0.005 and ang.max() > 0.2
    # Then a larger surrogate goes with a larger solid angle (measured: Spearman ~0.99)
    assert study.spearman_sign == 1 and study.spearman > 0.8
    assert study.pearson_sign == 1 and study.pearson > 0.8
    assert study.log_pearson > 0.8
    assert study.settings["dim"] == 200
