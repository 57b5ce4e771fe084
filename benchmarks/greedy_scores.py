"""GSS-Greedy's scoring of one batch (the authors' variant): the per-sample Gram, or its sums.

Usage: ``python benchmarks/greedy_scores.py [--repeats R] [--cases resnet18 mlp] [--json PATH]``

Each case scores 10 new samples against 10 groups of 10 drawn buffer samples, GSS-Greedy's
default batch, on the CPU with one torch thread, in eval mode: ``gram`` asks the engine for
the ``110 x 110`` per-sample Gram and reduces it (``memory_scores``); ``sums`` asks it for
the Gram of the 21 rows the scores read, the new samples, their mean and the group means
(``sample_gram(combine=...)`` then ``group_scores``), which is what the buffer runs. The two
run interleaved, in alternating order, after a warm-up round; times are medians and minimums
in ms, with the largest score difference between the two.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence

import torch

from avalanche_gss.gradients import sample_gram
from avalanche_gss.models import make_model
from avalanche_gss.selection.greedy import group_scores, memory_scores, memory_weights

CASES = {"resnet18": (3, 32, 32), "mlp": (1, 28, 28)}
"""The model of each case (GEM's reduced ResNet-18 of Table 3, the paper's MLP) by input."""


def run_case(case: str, repeats: int) -> dict[str, object]:
    torch.manual_seed(0)
    shape = CASES[case]
    model = make_model(case, shape, 10).eval()
    x, y = torch.randn(110, *shape), torch.randint(0, 10, (110,))
    weights = memory_weights(10, 100, 10)

    def gram() -> torch.Tensor:
        return memory_scores(sample_gram(model, x, y), 10, group_size=10, batch_gate=True)[0]

    def sums() -> torch.Tensor:
        return group_scores(sample_gram(model, x, y, combine=weights), 10)[0]

    impls = {"gram": gram, "sums": sums}
    diff = (gram() - sums()).abs().max().item()
    times: dict[str, list[float]] = {name: [] for name in impls}
    for round_ in range(repeats):
        for name in list(impls)[:: 1 if round_ % 2 == 0 else -1]:
            start = time.perf_counter()
            impls[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    return {"case": case, "repeats": repeats, "max_score_difference": diff,
            **{f"{name}_median_ms": round(med[name], 2) for name in impls},
            **{f"{name}_min_ms": round(min(times[name]), 2) for name in impls},
            "sums_over_gram": round(med["sums"] / med["gram"], 3)}


def main(argv: Sequence[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed calls of each")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--json", help="write the records to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    records = [run_case(case, args.repeats) for case in args.cases]
    for r in records:
        print(f"{r['case']:<9} gram {r['gram_median_ms']:>9.1f} ms (min {r['gram_min_ms']:.1f})"
              f"  sums {r['sums_median_ms']:>9.1f} ms (min {r['sums_min_ms']:.1f})"
              f"  sums/gram {r['sums_over_gram']:.3f}"
              f"  max score difference {r['max_score_difference']:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return records


if __name__ == "__main__":
    main()
