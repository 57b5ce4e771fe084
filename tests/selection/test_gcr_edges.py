"""GCR's selection at its edges: refusals, empty pursuits, dtypes, least squares' fallback,
the class counts and budgets, and what :func:`pursue` does besides the pursuit."""

import re

import pytest
import torch

from avalanche_gss.selection.gcr import class_budgets, count_classes, omp_select, pursue


def _pool(n, d, seed):
    """``n`` float64 gradients in ``d`` dimensions and positive pool weights."""
    gen = torch.Generator().manual_seed(seed)
    grads = torch.randn(n, d, generator=gen, dtype=torch.float64)
    return grads, torch.rand(n, generator=gen, dtype=torch.float64) + 0.5


@pytest.mark.parametrize("shape", [(2, 3), (3,)])
def test_a_gram_that_is_not_square_is_refused_with_its_shape(shape):
    # Given a gram that is not a square matrix, Then the refusal names its shape
    with pytest.raises(ValueError, match=re.escape(f"gram must be square, got shape {shape}")):
        omp_select(torch.zeros(shape), torch.ones(2), 1)


@pytest.mark.parametrize("positive", [True, False])
def test_choosing_nothing_keeps_nothing_and_leaves_the_whole_target(positive):
    # Given a pool, When k = 0 samples are chosen (0 <= k is allowed)
    grads, w = _pool(4, 3, 0)
    got = omp_select(grads @ grads.T, w, 0, positive=positive)
    # Then nothing is chosen, as empty int64 indices and float64 weights, and the residual
    # is the whole target's |b|^2
    assert got.indices.tolist() == got.order.tolist() == got.weights.tolist() == []
    assert got.indices.dtype == got.order.dtype == torch.long
    assert got.weights.dtype == torch.float64
    assert got.residual == pytest.approx(float(((grads.T @ w) ** 2).sum()), rel=1e-12)


def test_a_target_the_sample_points_away_from_keeps_nothing_nonnegative():
    # Given one sample and a negative pool weight: b = -g_0, so <g_0, b> < 0
    got = omp_select(torch.tensor([[2.0]], dtype=torch.float64),
                     torch.tensor([-1.0], dtype=torch.float64), 1)
    # Then its ridge weight is negative, it leaves, and no nonnegative weight is left: nothing
    # is kept (int64 indices, float64 weights) and the residual is |b|^2
    assert got.indices.tolist() == got.order.tolist() == got.weights.tolist() == []
    assert got.indices.dtype == got.order.dtype == torch.long
    assert got.weights.dtype == torch.float64
    assert got.residual == 2.0


def test_a_float32_gram_and_weights_are_read_as_their_float64_values():
    # Given a float32 gram and float32 pool weights
    grads, w = _pool(8, 4, 1)
    g32, w32 = grads.float(), w.float()
    gram32 = g32 @ g32.T
    # When OMP runs on them, Then it is OMP on their float64 values, with float64 weights
    got = omp_select(gram32, w32, 4)
    want = omp_select(gram32.double(), w32.double(), 4)
    assert torch.equal(got.order, want.order) and torch.equal(got.weights, want.weights)
    assert got.residual == want.residual and got.weights.dtype == torch.float64


def test_the_weights_solve_the_ridge_equations_in_float64():
    # Given a pool and lam = 0.1 (not a float32 number)
    grads, w = _pool(10, 6, 2)
    gram = grads @ grads.T
    # When the unconstrained pursuit chooses 5
    got = omp_select(gram, w, 5, lam=0.1, positive=False)
    # Then its weights solve (K_XX + lam I) W = (K w)_X to float64 round-off
    x = got.indices
    lhs = (gram[x[:, None], x[None, :]] + 0.1 * torch.eye(5, dtype=torch.float64)) @ got.weights
    torch.testing.assert_close(lhs, (gram @ w)[x], rtol=1e-12, atol=1e-12)


def test_a_zero_gradient_chosen_first_without_ridge_falls_back_to_least_squares():
    # Given a zero target (the only weighted sample has a zero gradient): every <g_i, b> is
    # 0, so the pursuit chooses sample 0 first and, with lam = 0, K_XX is singular from its
    # first entry on (the Cholesky factorisation fails at once)
    grads, _ = _pool(3, 4, 3)
    grads[0] = 0.0
    w = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    got = omp_select(grads @ grads.T, w, 3, lam=0.0, positive=False)
    # Then least squares gives the minimum-norm weights: all 0, matching the zero target
    assert got.order.tolist()[0] == 0
    torch.testing.assert_close(got.weights, torch.zeros(3, dtype=torch.float64))
    assert got.residual == 0.0


def test_count_classes_adds_the_labels_one_entry_per_label_in_int64():
    # Given the samples seen per label and a batch's labels, Then the counts grow to the
    # largest label and no further, keep labels seen before, and stay exact int64 counts
    cases = [([2, 1], [0, 3, 3], [3, 1, 0, 2]), ([2, 1, 0], [0], [3, 1, 0]),
             ([1, 2], [], [1, 2]), ([], [], []), ([2**24 + 1], [0], [2**24 + 2])]
    for seen, labels, want in cases:
        got = count_classes(torch.tensor(seen, dtype=torch.long),
                            torch.tensor(labels, dtype=torch.long))
        assert got.tolist() == want and got.dtype == torch.long


def test_class_budgets_never_exceed_the_candidates_and_give_every_slot():
    # Given a class (1) that its first share does not cap but its share of the surplus does
    avail = torch.tensor([1, 3, 100])
    got = class_budgets(avail, torch.tensor([10.0, 1.0, 1.0]), 12)
    # Then it keeps its 3 candidates and the class left takes the rest
    assert got.tolist() == [1, 3, 8]
    # Given any candidates, shares and k, Then 0 <= budget <= available, min(k, sum) in all
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        avail = torch.randint(0, 6, (4,), generator=gen)
        share = torch.rand(4, generator=gen, dtype=torch.float64) ** 3
        k = int(torch.randint(0, 25, (1,), generator=gen))
        got = class_budgets(avail, share, k)
        assert bool((got >= 0).all()) and bool((got <= avail).all())
        assert int(got.sum()) == min(k, int(avail.sum()))


def test_members_that_fit_their_budget_are_kept_whole_at_their_weights_without_a_pursuit():
    # Given 3 members and a budget of 3
    grads, pool = _pool(6, 3, 4)
    members = torch.tensor([1, 3, 4])
    keep, weights, result = pursue(grads @ grads.T, pool, members, 3, 0.5, positive=True,
                                   generator=torch.Generator().manual_seed(0))
    # Then all are kept at their pool weights, and no pursuit ran
    assert keep.tolist() == [1, 3, 4] and torch.equal(weights, pool[members])
    assert result is None


def test_the_random_fill_comes_from_the_generator_given():
    # Given a nonnegative pursuit that stops short of its 8 slots (gradients in 3 dimensions)
    grads, pool = _pool(14, 3, 2)
    members = torch.arange(2, 14)
    kept = []
    for global_seed in (0, 1):
        # When the global generator differs but the one given is the same
        with torch.random.fork_rng():
            torch.manual_seed(global_seed)
            keep, _, result = pursue(grads @ grads.T, pool, members, 8, 0.01, positive=True,
                                     generator=torch.Generator().manual_seed(5))
        assert result is not None and len(result.indices) < 8
        kept.append(keep.tolist())
    # Then the fill is the same: it is drawn from the generator given
    assert kept[0] == kept[1]
