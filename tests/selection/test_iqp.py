"""GSS-IQP selection (Alg. 1 SelectSamples, appendix B), checked on small Grams."""

import itertools
import math
import subprocess
import sys

import pytest
import torch

from avalanche_gss.selection import iqp
from avalanche_gss.selection.iqp import direction_variance, select_iqp, solve_fast, surrogate


def unit_gram(k: int, dim: int, seed: int, shift: float = 0.0) -> torch.Tensor:
    """Cosine Gram of ``k`` random directions (``shift`` > 0 correlates them, as gradients are)."""
    v = torch.randn(k, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    u = (v + shift) / (v + shift).norm(dim=1, keepdim=True)
    return u @ u.T


def brute_force(gram: torch.Tensor, m: int) -> float:
    return min(
        surrogate(gram, torch.tensor(c)) for c in itertools.combinations(range(len(gram)), m)
    )


def test_surrogate_is_norm_of_summed_directions_and_variance_identity():
    # Given 7 unit gradients and a subset S of 3,
    v = torch.randn(7, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u = v / v.norm(dim=1, keepdim=True)
    gram, s = u @ u.T, torch.tensor([0, 2, 5])
    # When the surrogate is evaluated, Then it is ||sum_S u_i||^2, also from a boolean mask,
    value = surrogate(gram, s)
    assert value == pytest.approx(float(u[s].sum(0).norm() ** 2), rel=1e-12)
    mask = torch.zeros(7, dtype=torch.bool)
    mask[s] = True
    assert surrogate(gram, mask) == pytest.approx(value, rel=1e-12)
    # and Var = mean ||u||^2 - ||mean u||^2 = 1 - surrogate / M^2 (Eq. varianceInterpretation).
    var = float((u[s] ** 2).sum(1).mean() - u[s].mean(0).norm() ** 2)
    assert direction_variance(gram, s) == pytest.approx(var, abs=1e-12)
    assert value == pytest.approx(9 * (1 - var), rel=1e-12)


def test_four_gradients_with_known_cosines():
    # Given unit gradients at 0, 20, 170 and 90 degrees in a plane,
    angles = torch.tensor([0.0, 20.0, 170.0, 90.0], dtype=torch.float64).deg2rad()
    gram = torch.cos(angles[:, None] - angles[None, :])
    # When keeping 2, Then the most opposed pair (0, 170 deg: cosine -0.985) stays.
    two = select_iqp(gram, 2)
    assert two.indices.tolist() == [0, 2]
    assert two.objective == pytest.approx(2 + 2 * math.cos(math.radians(170)))
    # When keeping 3, Then the 90-degree gradient goes: 0, 20 and 170 deg nearly cancel
    # (sum of cosines cos20 + cos170 + cos150 = -0.911, against -0.811 with 90 deg kept).
    three = select_iqp(gram, 3)
    assert three.indices.tolist() == [0, 1, 2]
    cosines = [math.cos(math.radians(a)) for a in (20, 170, 150)]
    assert three.objective == pytest.approx(3 + 2 * sum(cosines))
    assert three.objective == pytest.approx(brute_force(gram, 3))


@pytest.mark.parametrize("solver", ["fast", "exact"])
@pytest.mark.parametrize("m", [1, 5, 11])
def test_keeps_exactly_m_distinct_indices(solver, m):
    gram = unit_gram(12, 6, seed=m, shift=0.3)
    result = select_iqp(gram, m, solver=solver)
    assert result.indices.dtype == torch.int64
    assert len(result.indices) == m == len(set(result.indices.tolist()))
    assert result.indices.tolist() == sorted(result.indices.tolist())
    assert 0 <= int(result.indices.min()) and int(result.indices.max()) < 12
    assert result.objective == pytest.approx(surrogate(gram, result.indices), rel=1e-12)
    assert result.solver == solver


def test_fast_equals_brute_force_on_small_instances():
    # Given 60 random Grams with K <= 12 (directions in 3..8 dimensions, some correlated),
    # When solved by the fast solver, Then it finds the optimum of all C(K, M) subsets.
    for seed in range(60):
        gen = torch.Generator().manual_seed(seed)
        k = int(torch.randint(4, 13, (1,), generator=gen))
        m = int(torch.randint(1, k, (1,), generator=gen))
        dim = int(torch.randint(3, 9, (1,), generator=gen))
        gram = unit_gram(k, dim, seed, shift=0.3 * (seed % 2))
        assert solve_fast(gram, m).objective == pytest.approx(brute_force(gram, m), abs=1e-9)


def test_greedy_start_adds_or_drops_the_cheapest_item_at_each_step():
    # The swap search starts from the greedy set: from empty, add the item that raises
    # x^T G x least, or from all, drop the one whose removal leaves it lowest (whichever
    # takes fewer steps). Oracle: each candidate set's objective computed afresh, in float64.
    # Half the Grams hold a zero gradient (its row and diagonal 0), as GSS-IQP's may.
    for seed in range(24):
        gen = torch.Generator().manual_seed(seed)
        k = int(torch.randint(6, 16, (1,), generator=gen))
        for m in (2, k - 2):  # adding, then dropping
            gram = unit_gram(k, 5, seed, shift=0.3 * (seed % 2))
            if seed % 4 >= 2:
                zero = int(torch.randint(0, k, (1,), generator=gen))
                gram[zero, :] = gram[:, zero] = 0.0
            chosen = set() if m <= k - m else set(range(k))
            while len(chosen) != m:
                moves = (set(range(k)) - chosen) if len(chosen) < m else chosen
                after = {j: surrogate(gram, torch.tensor(sorted(chosen ^ {j})))
                         for j in moves}
                chosen ^= {min(after, key=after.get)}
            got = iqp._greedy(gram, m)
            assert set(got.nonzero().flatten().tolist()) == chosen, (seed, k, m)
    # And by hand: four directions at cosine -0.2 to each other and a zero gradient (last).
    # Dropping the zero one leaves x^T G x at 1.6; dropping any other raises it to 1.8.
    gram = torch.zeros(5, 5, dtype=torch.float64)
    gram[:4, :4] = 1.2 * torch.eye(4, dtype=torch.float64) - 0.2
    assert iqp._greedy(gram, 4).tolist() == [True, True, True, True, False]


def test_fast_solution_is_a_swap_local_optimum():
    # On K = 60, no single swap (i out, j in) lowers the objective of the returned set.
    gram = unit_gram(60, 10, seed=3, shift=0.2)
    result = solve_fast(gram, 40, restarts=2)
    inn = set(result.indices.tolist())
    for i, j in itertools.product(sorted(inn), sorted(set(range(60)) - inn)):
        swapped = torch.tensor(sorted(inn - {i} | {j}))
        assert surrogate(gram, swapped) >= result.objective - 1e-9


def best_swap(gram: torch.Tensor, x: torch.Tensor) -> tuple[int, int, float]:
    """The best single swap (i in S out, j in) by the formula, scanned in index order."""
    s = gram @ x.double()
    best: tuple[int, int, float] = (-1, -1, math.inf)
    for i in x.nonzero().flatten().tolist():
        for j in (~x).nonzero().flatten().tolist():
            d = float(-2 * gram[i, j] + gram[i, i] - 2 * s[i] + gram[j, j] + 2 * s[j])
            if d < best[2]:  # strict: a tie keeps the smallest i, then the smallest j
                best = (i, j, d)
    return best


@pytest.mark.parametrize("duplicates", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_swap_search_takes_the_best_swap_and_ties_go_to_the_smallest_indices(
    duplicates, seed
):
    # The swap search against an exhaustive scan of every swap in index order, step by
    # step to the local optimum; duplicated directions make exact ties, which must go to
    # the smallest i, then the smallest j, or the searches part ways.
    gram = unit_gram(14, 3, seed=seed, shift=0.3)
    if duplicates:
        gram[7:, :] = gram[:7, :].clone()
        gram[:, 7:] = gram[:, :7].clone()
    start = torch.zeros(14, dtype=torch.bool)
    start[torch.randperm(14, generator=torch.Generator().manual_seed(seed))[:6]] = True
    x, swaps = start.clone(), 0
    while (swap := best_swap(gram, x))[2] < -1e-10:
        x[swap[0]], x[swap[1]] = False, True
        swaps += 1
    assert swaps > 0  # the start is not already optimal
    assert torch.equal(iqp._swap_search(gram, gram.mul(-2), start.clone(), 1e-10), x)


def test_fast_is_deterministic_given_the_generator():
    gram = unit_gram(40, 4, seed=1)
    runs = [
        select_iqp(gram, 20, generator=torch.Generator().manual_seed(7)).indices for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])


def test_exact_solver_uses_scip_and_proves_optimality():
    import pyscipopt  # noqa: F401  (declared dependency: must be installed)
    # Given K = 10 correlated directions, When SCIP solves the integer QP, Then it proves the
    # brute-force optimum (status optimal, gap 0).
    gram = unit_gram(10, 5, seed=4, shift=0.4)
    result = select_iqp(gram, 4, solver="exact", time_limit=20)
    assert (result.solver, result.status, result.gap) == ("exact", "optimal", 0.0)
    assert result.objective == pytest.approx(brute_force(gram, 4), abs=1e-6)


def test_exact_times_out_without_solution_warns_and_falls_back():
    import pyscipopt  # noqa: F401  (declared dependency: must be installed)
    # Given a zero time limit, SCIP stops with no feasible solution: a warning says so and
    # the fast solver still returns M samples.
    gram = unit_gram(12, 5, seed=5, shift=0.3)
    with pytest.warns(RuntimeWarning, match="no solution in 0 s"):
        result = select_iqp(gram, 6, solver="exact", time_limit=0.0)
    assert result.solver == "fast" and len(result.indices) == 6


def test_exact_failure_and_missing_scip_fall_back(monkeypatch):
    import cvxpy as cp  # a declared dependency: its absence must fail, not skip
    gram = unit_gram(9, 4, seed=6)

    def broken(*args, **kwargs):
        raise cp.SolverError("boom")

    monkeypatch.setattr(cp.Problem, "solve", broken)
    with pytest.warns(RuntimeWarning, match="boom"):
        result = select_iqp(gram, 3, solver="exact")
    assert result.solver == "fast" and len(result.indices) == 3
    monkeypatch.setattr(cp, "installed_solvers", lambda: ["OSQP"])
    with pytest.warns(RuntimeWarning, match="no SCIP"):
        result = select_iqp(gram, 3, solver="exact")
    assert result.solver == "fast" and len(result.indices) == 3
    with pytest.raises(RuntimeError, match="no SCIP"):
        iqp.solve_exact(gram, 3)


def test_m_at_least_k_keeps_everything():
    gram = unit_gram(5, 3, seed=0)
    for m in (5, 9):
        result = select_iqp(gram, m, solver="exact")
        assert result.indices.tolist() == [0, 1, 2, 3, 4] and result.status == "trivial"


@pytest.mark.parametrize(
    ("gram", "m", "kwargs", "match"),
    [
        (torch.zeros(3, 4), 2, {}, "square"),
        (torch.zeros(3), 2, {}, "square"),
        (torch.tensor([[1.0, 0.5], [0.1, 1.0]]), 1, {}, "symmetric"),
        (torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]]), 1, {}, "NaN"),
        (torch.eye(3), 0, {}, "m must be >= 1"),
        (torch.eye(3), 1.5, {}, "m must be an int"),
        (torch.eye(3), True, {}, "m must be an int"),
        (torch.eye(3), 2, {"solver": "cplex"}, "unknown solver"),
        (torch.eye(3), 2, {"restarts": -1}, "restarts"),
        (torch.eye(3), 2, {"invalid": torch.zeros(2, dtype=torch.bool)}, "invalid"),
    ],
)
def test_invalid_inputs_raise(gram, m, kwargs, match):
    with pytest.raises(ValueError, match=match):
        select_iqp(gram, m, **kwargs)


def test_zero_gradient_is_favoured_unless_marked_invalid():
    # Given four positively correlated gradients and a zero gradient (item 4: cosine 0 with
    # everything, G_44 = 0), When keeping 3, Then the zero gradient stays, as it adds
    # nothing: {0, 3, 4} costs 2 + 2 * 0.2, the best triple without it {0, 1, 3} costs 5.
    gram = torch.tensor(
        [
            [1.0, 0.5, 0.6, 0.2, 0.0],
            [0.5, 1.0, 0.7, 0.3, 0.0],
            [0.6, 0.7, 1.0, 0.4, 0.0],
            [0.2, 0.3, 0.4, 1.0, 0.0],
            [0.0, 0.0, 0.0, 0.0, 0.0],
        ]
    )
    assert select_iqp(gram, 3).indices.tolist() == [0, 3, 4]
    # When it is marked invalid (norm <= slack in the authors' code), Then it is dropped,
    invalid = torch.tensor([False, False, False, False, True])
    for solver in ("fast", "exact"):
        result = select_iqp(gram, 3, invalid=invalid, solver=solver)
        assert result.indices.tolist() == [0, 1, 3]
        assert result.objective == pytest.approx(5.0)
    # unless too few valid items remain: all stay, invalid ones fill up to M in index order.
    few = torch.tensor([True, False, True, False, True])
    result = select_iqp(gram, 3, invalid=few)
    assert result.indices.tolist() == [0, 1, 3] and result.status == "trivial"
    few = torch.tensor([False, True, True, True, True])
    assert select_iqp(gram, 3, invalid=few).indices.tolist() == [0, 1, 2]


def test_selection_never_imports_avalanche():
    code = (
        "import sys, torch\n"
        "from avalanche_gss.selection.iqp import select_iqp\n"
        "select_iqp(torch.eye(4) + 0.1, 2, solver='exact', time_limit=5)\n"
        "assert 'avalanche' not in sys.modules, 'avalanche imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
