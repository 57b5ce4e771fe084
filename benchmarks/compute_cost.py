"""What each buffer policy's training costs, in counted passes, relative to Reservoir's.

Runs each policy as which-buffer does (``experiments.run`` with the policy's
``RunSettings``: the digits' MLP, ``M`` = 300, ``n_iter`` = 3, batches of 10, replay
batches of 10) on a short disjoint stream of the offline digits, with a
:class:`~avalanche_gss.budget.PassCounter` on the model for the whole training, and
reports per incoming batch the forward and backward passes (per sample) and the relative
cost ``C`` (Ghunaim et al., CVPR 2023: a backward costs two forwards), over the whole stream
and over the batches after Reservoir's buffer is full. Counts only, no timings: the numbers
are the same on any machine.

``python benchmarks/compute_cost.py [--tasks 2] [--samples-per-task 200] [--seed 0]
[--policies ...] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch
from avalanche.core import SupervisedPlugin

from avalanche_gss.benchmarks import disjoint_tasks, load_dataset
from avalanche_gss.budget import PassCount, PassCounter, rehearsal_passes, relative_cost
from avalanche_gss.experiments import RunSettings, run

POLICIES: dict[str, dict[str, Any]] = {
    "Reservoir": {"method": "Reservoir"},
    "CBRS": {"method": "CBRS"},
    "GDumb": {"method": "GDumb"},
    "GSS-Greedy": {"method": "GSS-Greedy", "variant": "authors"},
    "GSS-IQP": {"method": "GSS-IQP"},
    "CB-GSS": {"method": "CB-GSS"},
    "OCS": {"method": "OCS"},
    "GCR": {"method": "GCR"},
    "ER-MIR": {"method": "Reservoir", "retrieval": "mir"},
}
"""The policies measured and their ``RunSettings`` keywords (which-buffer's rows)."""


class CountPasses(SupervisedPlugin):  # type: ignore[misc]
    """Count the model's passes over a whole ``train`` call, and where each batch began."""

    def __init__(self) -> None:
        super().__init__()
        self.counter: PassCounter | None = None
        self.starts: list[PassCount] = []  # the cumulative count as each batch begins
        self.total = PassCount()

    def before_training(self, strategy: Any, **kwargs: Any) -> None:
        self.counter = PassCounter(strategy.model).__enter__()

    def before_training_exp(self, strategy: Any, **kwargs: Any) -> None:
        assert self.counter is not None
        self.starts.append(self.counter.count)

    def after_training(self, strategy: Any, **kwargs: Any) -> None:
        assert self.counter is not None
        self.counter.__exit__(None, None, None)
        self.total = self.counter.count

    def per_batch(self) -> list[PassCount]:
        """Each batch's passes: its training and the buffer's update after it."""
        ends = [*self.starts[1:], self.total]
        return [PassCount(e.forward - s.forward, e.backward - s.backward)
                for s, e in zip(self.starts, ends, strict=True)]


def _sum(counts: list[PassCount]) -> PassCount:
    return sum(counts, PassCount())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--samples-per-task", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default="mnist")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_dataset(args.data)
    split = disjoint_tasks(data, n_tasks=args.tasks, samples_per_task=args.samples_per_task,
                           seed=args.seed)
    base_settings = RunSettings(method="Reservoir", seed=args.seed)
    counts: dict[str, list[PassCount]] = {}
    for label in ["Reservoir", *[p for p in args.policies if p != "Reservoir"]]:
        plugin = CountPasses()
        run(RunSettings(**{**POLICIES[label], "seed": args.seed}), split, plugins=[plugin])
        counts[label] = plugin.per_batch()
    n_batches = len(counts["Reservoir"])
    sizes = [args.samples_per_task] * args.tasks
    batch_sizes = [min(10, s - i) for s in sizes for i in range(0, s, 10)]
    closed = rehearsal_passes(batch_sizes, n_iter=base_settings.n_iter,
                              replay_batch_size=base_settings.replay_batch_size,
                              buffer_size=base_settings.buffer_size)
    base = _sum(counts["Reservoir"])
    if base != closed:
        raise SystemExit(f"Reservoir counted {base}, its closed form says {closed}")
    full = math.ceil(base_settings.buffer_size / base_settings.batch_size)  # first full batch
    base_full = _sum(counts["Reservoir"][full:])
    rows = []
    for label in args.policies:
        whole, after = _sum(counts[label]), _sum(counts[label][full:])
        rows.append({
            "policy": label,
            "forward_per_batch": whole.forward / n_batches,
            "backward_per_batch": whole.backward / n_batches,
            "C": float(relative_cost(whole, base)),
            "C_passes": float(relative_cost(whole, base, backward_weight=1)),
            "C_buffer_full": (float(relative_cost(after, base_full))
                              if n_batches > full else None),
            "C_fraction": str(relative_cost(whole, base).limit_denominator(100)),
        })
    print(f"data: {data.source}; {args.tasks} tasks x {args.samples_per_task} samples "
          f"({n_batches} batches of 10), seed {args.seed}; M = {base_settings.buffer_size}, "
          f"n_iter = {base_settings.n_iter}; Reservoir = {base.forward / n_batches:g} forward "
          f"+ {base.backward / n_batches:g} backward passes per batch (closed form agrees)")
    print("| policy | forward / batch | backward / batch | C | C (passes) | C (buffer full) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        cf = "-" if r["C_buffer_full"] is None else f"{r['C_buffer_full']:.2f}"
        print(f"| {r['policy']} | {r['forward_per_batch']:.1f} | {r['backward_per_batch']:.1f} "
              f"| {r['C']:.2f} | {r['C_passes']:.2f} | {cf} |")
    if args.json:
        args.json.write_text(json.dumps({
            "data": data.source, "tasks": args.tasks, "samples_per_task": args.samples_per_task,
            "seed": args.seed, "settings": {"buffer_size": base_settings.buffer_size,
                                            "n_iter": base_settings.n_iter, "batch_size": 10,
                                            "replay_batch_size": 10},
            "backward_weight": 2, "first_full_batch": full, "rows": rows,
            "per_batch": {k: [[c.forward, c.backward] for c in v] for k, v in counts.items()},
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
