"""GSS-IQP selection: Algorithm 1's ``SelectSamples`` as the integer QP of appendix B.

Given the cosine Gram ``G`` of the candidates' loss gradients (``G_ij = cos(g_i, g_j)``,
i.e. the Gram of the unit gradients ``u_i``) keep the ``M`` indices ``S`` minimising the
surrogate of Eq. (surrogate) (section 3.3)::

    sum_{i, j in S} G_ij = x^T G x = ||sum_{i in S} u_i||^2,   x in {0, 1}^K,  1^T x = M

(appendix B writes ``1/2 x^T G x``; the factor does not change the argmin). Two solvers:

- ``"fast"`` (default): greedy start plus best-improvement swap local search and a few
  seeded perturbation restarts; pure torch, milliseconds for a few hundred candidates.
- ``"exact"``: the integer QP in cvxpy, solved by SCIP under a time limit; returns the best
  solution found and SCIP's optimality gap. Falls back to ``"fast"`` with a warning.

Zero gradients: a zero-norm gradient has no direction; the caller's Gram then holds a zero
row/column (cosine 0 with everything, ``G_ii = 0``). Such an item adds nothing to the
surrogate, so the solvers *favour* it, and the variance identity uses ``G_ii`` (see
:func:`direction_variance`). The authors' code drops gradients whose norm is ``<= slack``
before solving; pass those items as ``invalid`` to :func:`select_iqp` to do the same
without ever returning fewer than ``M`` indices.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "IQPResult",
    "direction_variance",
    "select_iqp",
    "solve_exact",
    "solve_fast",
    "surrogate",
]

SOLVERS = ("fast", "exact")


@dataclass(frozen=True)
class IQPResult:
    """Outcome of one ``SelectSamples`` call (Alg. 1).

    :param indices: the kept candidates, ``(M,)`` int64, ascending, distinct.
    :param objective: the surrogate ``x^T G x`` of ``indices`` on the given Gram.
    :param solver: the solver that produced ``indices`` (``"fast"`` or ``"exact"``;
        ``"fast"`` after a fallback, ``"trivial"`` when nothing had to be solved).
    :param gap: SCIP's relative optimality gap ``(objective - lower bound) / objective``
        (0 when proven optimal or when every candidate is kept); ``None`` when no bound is
        known (fast solver, fallback, ``invalid`` fill).
    :param seconds: wall-clock time of the call.
    :param status: SCIP's status (``"optimal"``, ``"timelimit"``, ...) or ``"local"``
        (fast solver: no improving swap left) or ``"trivial"``.
    """

    indices: Tensor
    objective: float
    solver: str
    gap: float | None
    seconds: float
    status: str


def _as_index(selected: Tensor, k: int) -> Tensor:
    if selected.dtype == torch.bool:
        if selected.shape != (k,):
            raise ValueError(f"a boolean selection needs shape ({k},), got {tuple(selected.shape)}")
        return selected.nonzero().flatten()
    return selected.long().flatten()


def surrogate(gram: Tensor, selected: Tensor) -> float:
    """Return the surrogate of Eq. (surrogate): ``sum_{i,j in S} G_ij = ||sum_{i in S} u_i||^2``.

    :param gram: ``(K, K)`` cosine Gram ``G`` of the candidates' gradients (appendix B).
    :param selected: the set ``S`` as ``(M,)`` indices or a ``(K,)`` boolean mask ``x``.
    :return: ``x^T G x`` (without appendix B's factor 1/2).
    """
    idx = _as_index(selected, gram.shape[0])
    return float(gram.double()[idx][:, idx].sum())


def direction_variance(gram: Tensor, selected: Tensor) -> float:
    """Variance of the gradient directions of ``S``, Eq. (varianceInterpretation).

    ``Var = mean_i ||u_i||^2 - ||mean_i u_i||^2 = mean(G_ii) - surrogate / M^2``, which is the
    paper's ``1 - surrogate / M^2`` when every ``u_i`` is a unit vector (``G_ii = 1``); a
    zero gradient (``G_ii = 0``) counts as the zero vector.

    :param gram: ``(K, K)`` cosine Gram ``G``.
    :param selected: the set ``S`` (indices or boolean mask), ``M = |S| >= 1``.
    """
    idx = _as_index(selected, gram.shape[0])
    if idx.numel() == 0:
        raise ValueError("the variance of an empty selection is undefined")
    m = idx.numel()
    return float(gram.double().diagonal()[idx].mean()) - surrogate(gram, idx) / m**2


def _check(gram: Tensor, m: int) -> Tensor:
    """Validate ``(gram, m)``; return ``G`` as a symmetric float64 CPU tensor."""
    if not isinstance(gram, Tensor) or gram.dim() != 2 or gram.shape[0] != gram.shape[1]:
        shape = tuple(gram.shape) if isinstance(gram, Tensor) else type(gram).__name__
        raise ValueError(f"gram must be a square (K, K) tensor, got {shape}")
    if isinstance(m, bool) or not isinstance(m, int):
        raise ValueError(f"m must be an int, got {m!r}")
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    g = gram.detach().to("cpu", torch.float64)
    if g.numel() == 0:
        return g
    if not torch.isfinite(g).all():
        raise ValueError("gram has NaN or infinite entries")
    if float((g - g.T).abs().max()) > 1e-5 * max(1.0, float(g.abs().max())):
        raise ValueError("gram must be symmetric (max |G - G^T| > 1e-5 max(1, max |G|))")
    return (g + g.T) / 2


def _swap_search(g: Tensor, minus2: Tensor, x: Tensor, tol: float) -> Tensor:
    """Best-improvement 1-swap local search from the selection mask ``x`` (modified in place).

    Swapping ``i in S`` for ``j not in S`` changes ``x^T G x`` by
    ``-2 s_i + G_ii + 2 s_j - 2 G_ij + G_jj`` with ``s = G x``; all swaps are scored at once.
    Ties go to the smallest ``i``, then the smallest ``j``.

    The swaps are scored as a ``(K - M, K)`` block, rows ``j not in S`` read off ``-2 G``
    with contiguous row gathers (``G`` is symmetric), columns ``i not in S`` at ``+inf``:
    the same floating-point values as the ``(M, K - M)`` block of the formula, several
    times faster to build than gathering ``G[S, ~S]``. ``minus2`` is ``-2 G``, computed
    once by the caller for all its searches.
    """
    diag = g.diagonal()
    s = g @ x.double()  # (K,)
    for step in range(1, 100 * g.shape[0] + 1):  # every swap lowers the objective
        out = (~x).nonzero().flatten()  # (K - M,)
        twice = 2 * s
        delta = minus2.index_select(0, out)  # (K - M, K): row j, column i
        delta += (diag - twice).masked_fill_(~x, float("inf"))[None, :]
        delta += (diag[out] + twice[out])[:, None]
        lowest = delta.amin(dim=0)  # (K,) the best swap for each i
        i = int(lowest.argmin())  # first minimum: the smallest i
        if float(lowest[i]) >= -tol:
            break
        j = int(out[int(delta[:, i].argmin())])  # then the smallest j
        x[i], x[j] = False, True
        s += g[j] - g[i]  # rows: G is symmetric
        if step % 64 == 0:  # undo rounding drift of the incremental update
            s = g @ x.double()
    return x


def _greedy(g: Tensor, m: int) -> Tensor:
    """Greedy start: add (from empty) or drop (from all), whichever takes fewer steps."""
    k = g.shape[0]
    diag = g.diagonal()
    adding = m <= k - m
    x = torch.full((k,), not adding, dtype=torch.bool)
    s = g @ x.double()  # (K,)
    for _ in range(m if adding else k - m):
        if adding:  # adding j costs 2 s_j + G_jj
            cost = (2 * s + diag).masked_fill(x, float("inf"))
        else:  # dropping i costs G_ii - 2 s_i
            cost = (diag - 2 * s).masked_fill(~x, float("inf"))
        j = int(cost.argmin())
        x[j] = adding
        s += g[:, j] if adding else -g[:, j]
    return x


def _fast(g: Tensor, m: int, restarts: int, gen: torch.Generator) -> Tensor:
    """Greedy + swap search, then ``restarts`` restarts; the best 1-swap local optimum."""
    k = g.shape[0]
    tol = 1e-10 * max(1.0, float(g.abs().max()))
    minus2 = g.mul(-2)  # (K, K), shared by every search below
    best = _swap_search(g, minus2, _greedy(g, m), tol)
    best_f = float(best.double() @ g @ best.double())
    fewest = min(2, m, k - m)  # a kick swaps fewest..most pairs
    most = max(fewest, min(m, k - m) // 4)
    for restart in range(restarts):
        if restart % 2:  # a fresh random subset
            x = torch.zeros(k, dtype=torch.bool)
            x[torch.randperm(k, generator=gen)[:m]] = True
        else:  # kick the best selection with a few random swaps
            kicks = int(torch.randint(fewest, most + 1, (1,), generator=gen))
            x = best.clone()
            inn, out = x.nonzero().flatten(), (~x).nonzero().flatten()
            x[inn[torch.randperm(inn.numel(), generator=gen)[:kicks]]] = False
            x[out[torch.randperm(out.numel(), generator=gen)[:kicks]]] = True
        x = _swap_search(g, minus2, x, tol)
        f = float(x.double() @ g @ x.double())
        if f < best_f - tol:
            best, best_f = x, f
    return best


def _exact(g: Tensor, m: int, time_limit: float) -> tuple[Tensor, str, float | None]:
    """SCIP through cvxpy; returns ``(mask, status, lower bound)`` or raises RuntimeError."""
    try:
        import cvxpy as cp
    except ImportError as err:
        raise RuntimeError(f"cvxpy is not installed ({err})") from err
    if "SCIP" not in cp.installed_solvers():
        raise RuntimeError("cvxpy finds no SCIP (pip install pyscipopt)")
    evals, evecs = torch.linalg.eigh(g)
    keep = evals > 1e-12 * max(1.0, float(evals.max()))
    factor = (evecs[:, keep] * evals[keep].sqrt()).numpy()  # (K, rank): G = U U^T
    x = cp.Variable(g.shape[0], boolean=True)
    problem = cp.Problem(cp.Minimize(cp.sum_squares(factor.T @ x)), [cp.sum(x) == m])
    try:
        with warnings.catch_warnings():  # "may be inaccurate" at the time limit: see status
            warnings.filterwarnings("ignore", "Solution may be inaccurate", UserWarning)
            problem.solve(solver=cp.SCIP, scip_params={"limits/time": float(time_limit)})
    except Exception as err:  # cvxpy.SolverError, or SCIP's own errors
        raise RuntimeError(f"SCIP failed or found no solution in {time_limit:g} s ({err})") from err
    model = (problem.solver_stats.extra_stats or {}).get("model") if problem.solver_stats else None
    status = str(model.getStatus()) if model is not None else str(problem.status)
    if x.value is None:
        raise RuntimeError(f"SCIP found no feasible solution (status {status})")
    mask = torch.from_numpy(x.value).round().bool()
    if int(mask.sum()) != m:
        raise RuntimeError(f"SCIP returned {int(mask.sum())} items instead of {m}")
    lower = float(model.getDualbound()) if model is not None else None
    return mask, status, lower


def _done(
    g: Tensor, x: Tensor, solver: str, t0: float, status: str, lower: float | None = None
) -> IQPResult:
    idx = x.nonzero().flatten()
    objective = surrogate(g, idx)
    gap = None
    if status == "optimal" or bool(x.all()):  # proven, or nothing to choose
        gap = 0.0
    elif lower is not None:
        gap = max(0.0, objective - lower) / max(abs(objective), 1e-12)
    return IQPResult(idx, objective, solver, gap, time.perf_counter() - t0, status)


def _all(k: int) -> Tensor:
    return torch.ones(k, dtype=torch.bool)


def solve_fast(
    gram: Tensor, m: int, *, restarts: int = 16, generator: torch.Generator | None = None
) -> IQPResult:
    """Heuristic ``SelectSamples`` (Alg. 1): greedy start, swap local search, restarts.

    The greedy start adds (or drops) one item at a time; the local search then applies the
    best improving swap until none is left (a 1-swap local optimum). Restarts alternate
    between kicking the best selection with a few random swaps (iterated local search)
    and a fresh random subset; the best local optimum wins. It proves no bound: on real
    gradient Grams it matched SCIP's proven optimum (``benchmarks/iqp.py``); on tiny
    adversarial low-dimensional instances it can miss it. Deterministic for a given
    ``generator`` state (default: a generator seeded with 0). Its many small ops run
    fastest on one intra-op thread (on a busy two-core machine OpenMP synchronisation made
    the K=400 case ten times slower); the caller sets threads, as ``python -m reproduce``
    does (``--threads``, default 1).

    :param gram: ``(K, K)`` cosine Gram ``G`` of appendix B.
    :param m: buffer size ``M`` (Alg. 1's ``M_b``); ``M >= K`` keeps everything.
    :param restarts: number of restarts after the first local search (0: greedy + search).
    :param generator: source of the restarts' randomness.
    """
    t0 = time.perf_counter()
    if restarts < 0:
        raise ValueError(f"restarts must be >= 0, got {restarts}")
    g = _check(gram, m)
    if m >= g.shape[0]:
        return _done(g, _all(g.shape[0]), "trivial", t0, "trivial")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    return _done(g, _fast(g, m, restarts, gen), "fast", t0, "local")


def solve_exact(gram: Tensor, m: int, *, time_limit: float = 60.0) -> IQPResult:
    """Appendix B's integer QP solved by SCIP through cvxpy; raises when it has no solution.

    ``G`` is PSD (a Gram matrix), so ``x^T G x = ||U^T x||^2`` with ``U = V diag(sqrt(l))``
    from ``G = V diag(l) V^T`` (round-off eigenvalues ``<= 1e-12 max(l)`` dropped); cvxpy
    hands SCIP the convex epigraph form ``min t, t >= ||U^T x||^2``, ``x`` binary,
    ``sum(x) = M``. At the time limit SCIP's best solution is returned with its gap
    ``(objective - lower bound) / objective``; cvxpy reports no bound, so the lower bound
    is the dual bound of the pyscipopt model that cvxpy leaves in
    ``problem.solver_stats.extra_stats["model"]`` (the epigraph variable ``t`` is the
    objective, so its bound is one on the surrogate).

    :param gram: ``(K, K)`` cosine Gram ``G`` of appendix B.
    :param m: buffer size ``M`` (Alg. 1's ``M_b``); ``M >= K`` keeps everything.
    :param time_limit: SCIP's ``limits/time`` in seconds (model building not included).
    :raises RuntimeError: cvxpy or SCIP is missing, SCIP failed, or it found no feasible
        solution in time.
    """
    t0 = time.perf_counter()
    g = _check(gram, m)
    if m >= g.shape[0]:
        return _done(g, _all(g.shape[0]), "trivial", t0, "trivial")
    mask, status, lower = _exact(g, m, time_limit)
    return _done(g, mask, "exact", t0, status, lower)


def select_iqp(
    gram: Tensor,
    m: int,
    *,
    solver: str = "fast",
    time_limit: float = 60.0,
    restarts: int = 16,
    generator: torch.Generator | None = None,
    invalid: Tensor | None = None,
) -> IQPResult:
    """``SelectSamples`` of Alg. 1: keep ``M`` candidates minimising the surrogate.

    Never loses samples: the result holds exactly ``min(M, K)`` distinct indices. With
    ``M >= K`` every candidate is kept; if the exact solver is missing, fails, or stops
    without a feasible solution, a ``RuntimeWarning`` says why and the fast solver answers
    (``result.solver == "fast"``).

    :param gram: ``(K, K)`` cosine Gram ``G`` of the union ``M_b U M_r`` (appendix B).
    :param m: buffer size ``M`` (Alg. 1's ``M_b``), ``>= 1``.
    :param solver: ``"fast"`` (:func:`solve_fast`) or ``"exact"`` (:func:`solve_exact`).
    :param time_limit: SCIP's time limit in seconds (exact solver only).
    :param restarts: restarts of the fast solver.
    :param generator: randomness of the fast solver (default: a generator seeded with 0).
    :param invalid: optional ``(K,)`` boolean mask of items to drop first, e.g. gradients
        with norm ``<= slack`` as the authors' code drops them. The IQP runs on the valid
        items; if at most ``M`` are valid, all of them are kept and the rest is filled
        with invalid items in index order (``status == "trivial"``).
    """
    t0 = time.perf_counter()
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; choose one of {SOLVERS}")
    if restarts < 0:
        raise ValueError(f"restarts must be >= 0, got {restarts}")
    g = _check(gram, m)
    k = g.shape[0]
    cand = torch.arange(k)
    if invalid is not None:
        bad = not isinstance(invalid, Tensor) or invalid.dtype != torch.bool
        if bad or invalid.shape != (k,):
            raise ValueError(f"invalid must be a boolean tensor of shape ({k},)")
        invalid = invalid.cpu()
        cand = (~invalid).nonzero().flatten()
        if cand.numel() <= m:
            x = ~invalid
            x[invalid.nonzero().flatten()[: m - cand.numel()]] = True
            return _done(g, x, "trivial", t0, "trivial")
    if m >= k:
        return _done(g, _all(k), "trivial", t0, "trivial")
    sub = g[cand[:, None], cand[None, :]]
    x = torch.zeros(k, dtype=torch.bool)
    if solver == "exact":
        try:
            mask, status, lower = _exact(sub, m, time_limit)
            x[cand[mask]] = True
            return _done(g, x, "exact", t0, status, lower)
        except RuntimeError as err:
            warnings.warn(
                f"exact IQP solver: {err}; using the fast solver instead",
                RuntimeWarning,
                stacklevel=2,
            )
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    x[cand[_fast(sub, m, restarts, gen)]] = True
    return _done(g, x, "fast", t0, "local")
