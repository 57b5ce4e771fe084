"""Edges of the IQP solvers: direct calls, defaults, randomness, and what SCIP reports."""

import itertools
import sys
import time
import warnings

import numpy as np
import pytest
import torch
from helpers import exactly as _exactly

from avalanche_gss.selection import iqp
from avalanche_gss.selection.iqp import (
    direction_variance,
    select_iqp,
    solve_exact,
    solve_fast,
    surrogate,
)


def unit_gram(k: int, dim: int, seed: int, shift: float = 0.0) -> torch.Tensor:
    """Cosine Gram of ``k`` random directions (``shift`` > 0 correlates them)."""
    v = torch.randn(k, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    u = (v + shift) / (v + shift).norm(dim=1, keepdim=True)
    return u @ u.T


def brute_force(gram: torch.Tensor, m: int) -> tuple[float, list[int]]:
    """The optimum of all C(K, M) subsets and its (first) argmin."""
    return min(
        (surrogate(gram, torch.tensor(c)), list(c))
        for c in itertools.combinations(range(len(gram)), m)
    )


def swap_gains(gram: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Change of x^T G x for every swap (i in S out, j not in S in), from an exact s = G x."""
    x = torch.zeros(len(gram), dtype=torch.bool)
    x[indices] = True
    s, diag = gram @ x.double(), gram.diagonal()
    inn, out = x.nonzero().flatten(), (~x).nonzero().flatten()
    return (
        (diag[inn] - 2 * s[inn])[:, None]
        + (diag[out] + 2 * s[out])[None, :]
        - 2 * gram[inn[:, None], out[None, :]]
    )


# --- the trivial branch of the direct solvers -----------------------------------------------


@pytest.mark.parametrize("solver", [solve_fast, solve_exact, select_iqp])
@pytest.mark.parametrize("extra", [0, 3])
def test_solvers_keep_everything_when_m_is_at_least_k(solver, extra):
    # Given K = 5 candidates and M = K or M > K, When a solver is called directly, Then
    # every candidate stays, nothing was solved, and the gap is 0 (nothing to choose).
    gram = unit_gram(5, 3, seed=0)
    t0 = time.perf_counter()
    result = solver(gram, 5 + extra)
    elapsed = time.perf_counter() - t0
    assert result.indices.tolist() == [0, 1, 2, 3, 4]
    assert (result.solver, result.status, result.gap) == ("trivial", "trivial", 0.0)
    assert result.objective == pytest.approx(float(gram.sum()), rel=1e-12)
    assert 0 <= result.seconds <= elapsed  # the call's own time, inside the caller's


# --- solve_fast ------------------------------------------------------------------------------


def test_solve_fast_reports_a_local_optimum_without_a_bound_and_takes_zero_restarts():
    gram = unit_gram(12, 4, seed=1, shift=0.3)
    for solve in (solve_fast, select_iqp):
        for restarts in (0, 3):
            t0 = time.perf_counter()
            result = solve(gram, 5, restarts=restarts)
            elapsed = time.perf_counter() - t0
            assert (result.solver, result.status, result.gap) == ("fast", "local", None)
            assert len(result.indices) == 5 and 0 <= result.seconds <= elapsed
            assert float(swap_gains(gram, result.indices).min()) >= -1e-9
        with pytest.raises(ValueError, match=_exactly("restarts must be >= 0, got -1")):
            solve(gram, 5, restarts=-1)


def test_solve_fast_draws_from_its_generator_only_and_defaults_to_seed_0_and_16_restarts():
    # A 2-D instance with many near-equal local optima: seeds 0 and 1 end on different sets.
    gram = unit_gram(30, 2, seed=0, shift=0.2)
    seeded = [solve_fast(gram, 10, generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    assert not torch.equal(seeded[0].indices, seeded[1].indices)
    # The global RNG is never touched, with or without a generator,
    for solve in (solve_fast, select_iqp):
        torch.manual_seed(123)
        before = torch.get_rng_state()
        default = solve(gram, 10)
        gen = torch.Generator().manual_seed(5)
        start = gen.get_state()
        solve(gram, 10, generator=gen)
        assert torch.equal(torch.get_rng_state(), before)
        # the restarts draw from the given generator,
        assert not torch.equal(gen.get_state(), start)
        # and the default is a generator seeded with 0,
        assert torch.equal(default.indices, seeded[0].indices)
    # running the signatures' 16 restarts (the same draws as 16 explicit restarts).
    a, b, c = (torch.Generator().manual_seed(9) for _ in range(3))
    by_default = solve_fast(gram, 10, generator=a)
    explicit = solve_fast(gram, 10, restarts=16, generator=b)
    through_select = select_iqp(gram, 10, generator=c)
    assert torch.equal(a.get_state(), b.get_state()) and torch.equal(a.get_state(), c.get_state())
    assert torch.equal(by_default.indices, explicit.indices)
    assert torch.equal(by_default.indices, through_select.indices)


def test_restarts_alternate_a_kick_of_the_best_and_a_fresh_random_subset(monkeypatch):
    # Restart r starts the swap search from the best selection so far with 2..max(2,
    # min(M, K - M) // 4) random swaps when r is even, and from a random M-subset when r
    # is odd. Given K = 64, M = 32 (kicks of 2..8 swaps; a random subset differs from the
    # best in about 16), record where each search starts.
    gram = unit_gram(64, 8, seed=7, shift=0.2)
    original, starts, ends = iqp._swap_search, [], []

    def recording(g, minus2, x, tol):
        starts.append(x.clone())
        ends.append(original(g, minus2, x, tol).clone())
        return ends[-1]

    monkeypatch.setattr(iqp, "_swap_search", recording)
    result = solve_fast(gram, 32, restarts=40, generator=torch.Generator().manual_seed(0))
    assert len(starts) == 41
    best = ends[0]
    kicks = []
    for r in range(40):
        start, end = starts[r + 1], ends[r + 1]
        assert int(start.sum()) == 32
        moved = int((start & ~best).sum())
        if r % 2 == 0:
            kicks.append(moved)
        else:
            assert moved > 8, r
        if surrogate(gram, end) < surrogate(gram, best) - 1e-9:
            best = end
    assert 2 <= min(kicks) and max(kicks) <= 8
    assert {2, 8} <= set(kicks)  # both ends of the range are drawn
    assert result.indices.tolist() == best.nonzero().flatten().tolist()


def test_long_swap_searches_end_at_a_one_swap_local_optimum():
    # Given K = 256, M = 128 in 64 dimensions, the random-subset restart needs more than 64
    # swaps (the search refreshes s = G x every 64), When solved, Then no single swap
    # lowers the objective (checked with an exact s) and the objective is the set's.
    gram = unit_gram(256, 64, seed=0, shift=0.2)
    result = solve_fast(gram, 128, restarts=2)
    assert float(swap_gains(gram, result.indices).min()) >= -1e-9
    assert result.objective == pytest.approx(surrogate(gram, result.indices), rel=1e-12)


def test_greedy_start_is_the_greedy_of_the_surrogate():
    # The start adds (from empty) or drops (from all) one item at a time, whichever takes
    # fewer steps (adding on a tie), each step the one that changes sum_{i,j in S} G_ij
    # least. Zero gradients (G_ii = 0), or a Gram of unnormalised gradients, make the
    # diagonal count.
    cosines = unit_gram(9, 4, seed=2, shift=0.2)
    cosines[[2, 6]] = 0.0
    cosines[:, [2, 6]] = 0.0
    v = torch.randn(9, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    v *= torch.linspace(0.2, 3.0, 9, dtype=torch.float64)[:, None]

    def reference(gram, m):
        adding = m <= 9 - m
        chosen = set() if adding else set(range(9))
        for _ in range(m if adding else 9 - m):
            pool = sorted(set(range(9)) - chosen) if adding else sorted(chosen)
            costs = [surrogate(gram, torch.tensor(sorted(chosen ^ {j}), dtype=torch.long))
                     for j in pool]
            chosen ^= {pool[costs.index(min(costs))]}
        return sorted(chosen)

    for gram in (cosines, v @ v.T):
        for m in range(1, 9):
            x = iqp._greedy(gram, m)
            assert x.dtype == torch.bool
            assert x.nonzero().flatten().tolist() == reference(gram, m), m


# --- direction_variance ----------------------------------------------------------------------


def test_direction_variance_of_one_item_is_zero_and_of_none_is_undefined():
    gram = unit_gram(6, 3, seed=3)
    gram[4] = 0.0
    gram[:, 4] = 0.0
    # One direction (unit or zero) has no spread; a mask and indices give the same value.
    for i in (1, 4):
        assert direction_variance(gram, torch.tensor([i])) == pytest.approx(0.0, abs=1e-12)
    mask = torch.tensor([True, False, True, True, False, False])
    assert direction_variance(gram, mask) == direction_variance(gram, torch.tensor([0, 2, 3]))
    wrong_shape = _exactly("a boolean selection needs shape (6,), got (5,)")
    with pytest.raises(ValueError, match=wrong_shape):
        direction_variance(gram, mask[:5])
    empty = _exactly("the variance of an empty selection is undefined")
    with pytest.raises(ValueError, match=empty):
        direction_variance(gram, torch.zeros(6, dtype=torch.bool))


# --- solve_exact and what SCIP reports -------------------------------------------------------


@pytest.fixture
def solves(monkeypatch):
    """Wrap cvxpy's ``Problem.solve``: record its arguments and the problem; ``extra``
    adds SCIP parameters, ``after`` runs on the solved problem."""
    import cvxpy as cp

    original = cp.Problem.solve
    calls = []
    options = {"extra": {}, "after": None}

    def wrapped(self, *args, **kwargs):
        calls.append({"kwargs": dict(kwargs), "problem": self})
        kwargs["scip_params"] = {**kwargs.get("scip_params", {}), **options["extra"]}
        out = original(self, *args, **kwargs)
        if options["after"] is not None:
            options["after"](self)
        return out

    monkeypatch.setattr(cp.Problem, "solve", wrapped)
    return calls, options


def test_solve_exact_proves_the_brute_force_optimum_with_the_default_time_limit(solves):
    calls, _ = solves
    gram = unit_gram(10, 5, seed=4, shift=0.4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = solve_exact(gram, 4)
    best, argmin = brute_force(gram, 4)
    assert (result.solver, result.status, result.gap) == ("exact", "optimal", 0.0)
    assert result.indices.tolist() == argmin
    assert result.objective == pytest.approx(best, abs=1e-6) and result.seconds >= 0
    # SCIP is asked for its 60 s default, or the limit given, through both entry points.
    solve_exact(gram, 4, time_limit=5)
    select_iqp(gram, 4, solver="exact")
    limits = [call["kwargs"]["scip_params"]["limits/time"] for call in calls]
    assert limits == [60.0, 5.0, 60.0]


def test_stopped_early_the_status_is_scips_and_the_gap_bounds_the_optimum(solves):
    # Given SCIP stopped after its root node (a deterministic stand-in for the time limit),
    calls, options = solves
    options["extra"] = {"limits/nodes": 1}
    gram = unit_gram(14, 3, seed=2, shift=1.0)  # root bound 3.30, best found 3.38
    best, _ = brute_force(gram, 5)
    for solve in (lambda: solve_exact(gram, 5), lambda: select_iqp(gram, 5, solver="exact")):
        # When solved, Then no "may be inaccurate" warning escapes: the status says so,
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = solve()
        model = calls[-1]["problem"].solver_stats.extra_stats["model"]
        # the status is SCIP's own (cvxpy's would be "optimal_inaccurate"),
        assert result.status == str(model.getStatus()) == "nodelimit"
        assert result.solver == "exact" and len(result.indices) == 5
        # and the gap is (objective - SCIP's dual bound) / objective, a valid bound.
        lower = float(model.getDualbound())
        assert result.gap == pytest.approx(max(0.0, result.objective - lower) / result.objective)
        assert result.gap > 0
        assert result.objective * (1 - result.gap) <= best + 1e-6 <= result.objective + 1e-6


def test_the_gap_is_relative_to_the_objective_also_below_one():
    # The same formula where the objective is under 1 (a Gram with small entries): the
    # floor under the denominator only keeps it from 0.
    gram = 0.5 * torch.eye(3, dtype=torch.float64)
    result = iqp._done(gram, torch.tensor([True, False, False]), "exact", time.perf_counter(),
                       "nodelimit", lower=0.25)
    assert result.objective == 0.5 and result.gap == pytest.approx(0.5)


def test_without_scips_model_the_status_is_cvxpys_and_no_gap_is_known(solves):
    # Given a cvxpy that leaves no SCIP model in its stats, When SCIP stops early, Then the
    # status is cvxpy's and no bound (gap None) is claimed; proven optimal still gives gap 0.
    calls, options = solves
    options["after"] = lambda problem: problem.solver_stats.extra_stats.pop("model")
    gram = unit_gram(14, 3, seed=1, shift=0.3)
    proven = solve_exact(gram, 5)
    assert (proven.status, proven.gap) == (str(calls[-1]["problem"].status), 0.0)
    assert proven.status == "optimal"
    options["extra"] = {"limits/nodes": 1}
    stopped = solve_exact(gram, 5)
    assert (stopped.status, stopped.gap) == ("optimal_inaccurate", None)
    assert stopped.solver == "exact" and len(stopped.indices) == 5


def test_exact_failures_raise_messages_that_name_the_cause(monkeypatch, solves):
    import cvxpy as cp

    calls, options = solves
    gram = unit_gram(9, 4, seed=6)
    # SCIP's solution rounds to the wrong number of items,
    options["after"] = lambda problem: setattr(problem.variables()[0], "value", np.zeros(9))
    with pytest.raises(RuntimeError, match=_exactly("SCIP returned 0 items instead of 3")):
        solve_exact(gram, 3)
    # cvxpy returns without a solution (nor statistics),
    monkeypatch.setattr(cp.Problem, "solve", lambda self, *args, **kwargs: None)
    with pytest.raises(
        RuntimeError, match=_exactly("SCIP found no feasible solution (status None)")
    ):
        solve_exact(gram, 3)
    # SCIP is not installed,
    monkeypatch.setattr(cp, "installed_solvers", lambda: ["OSQP"])
    with pytest.raises(RuntimeError, match=_exactly("cvxpy finds no SCIP (pip install pyscipopt)")):
        solve_exact(gram, 3)
    # or cvxpy is not: select_iqp then says why and answers with the fast solver.
    monkeypatch.setitem(sys.modules, "cvxpy", None)
    with pytest.raises(RuntimeError, match=r"^cvxpy is not installed \(.+\)$"):
        solve_exact(gram, 3)
    with pytest.warns(RuntimeWarning, match=r"^exact IQP solver: cvxpy is not installed \("):
        result = select_iqp(gram, 3, solver="exact")
    assert result.solver == "fast" and len(result.indices) == 3


# --- select_iqp's invalid items ---------------------------------------------------------------


def test_exactly_m_valid_items_are_kept_without_solving_and_invalid_must_be_boolean():
    gram = unit_gram(7, 3, seed=8, shift=0.2)
    invalid = torch.tensor([False, True, False, True, False, True, True])
    for m, expected in ((3, [0, 2, 4]), (4, [0, 1, 2, 4])):  # 3 valid: exactly M, or fewer
        result = select_iqp(gram, m, invalid=invalid)
        assert result.indices.tolist() == expected
        assert (result.solver, result.status, result.gap) == ("trivial", "trivial", None)
        assert result.objective == pytest.approx(surrogate(gram, torch.tensor(expected)))
    message = _exactly("invalid must be a boolean tensor of shape (7,)")
    for bad in (invalid.long(), invalid.tolist(), invalid[:6]):
        with pytest.raises(ValueError, match=message):
            select_iqp(gram, 3, invalid=bad)


# --- the Gram's checks -----------------------------------------------------------------------


def test_gram_checks_state_the_rule_they_apply():
    square = "gram must be a square (K, K) tensor, got "
    for bad, shown in (([[1.0]], "list"), (torch.zeros(3, 4), "(3, 4)"), (torch.zeros(3), "(3,)")):
        with pytest.raises(ValueError, match=_exactly(square + shown)):
            select_iqp(bad, 1)
    with pytest.raises(ValueError, match=_exactly("gram has NaN or infinite entries")):
        select_iqp(torch.tensor([[float("nan")]]), 1)  # one candidate is still checked
    # Symmetric up to 1e-5 max(1, max |G|): the bound itself passes, beyond it raises, and
    # the bound scales with a Gram larger than 1.
    symmetric = _exactly("gram must be symmetric (max |G - G^T| > 1e-5 max(1, max |G|))")
    for scale, off, ok in ((1.0, 1e-5, True), (1.0, 1.5e-5, False), (10.0, 5e-5, True),
                           (10.0, 2e-4, False)):
        gram = torch.eye(2, dtype=torch.float64) * scale
        gram[1, 0] = off
        if ok:
            assert len(select_iqp(gram, 1).indices) == 1
        else:
            with pytest.raises(ValueError, match=symmetric):
                select_iqp(gram, 1)
    # No candidates: nothing to keep.
    empty = select_iqp(torch.zeros(0, 0), 3)
    assert empty.indices.tolist() == [] and empty.status == "trivial"
