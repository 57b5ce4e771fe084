"""What each buffer policy's training costs, in counted passes, relative to Reservoir's.

Runs each policy as which-buffer does (``experiments.run`` with the policy's
``RunSettings``: the digits' MLP, ``M`` = 300, ``n_iter`` = 3, batches of 10, replay
batches of 10) on a short disjoint stream of the offline digits, with a
:class:`~avalanche_gss.reproduce.runs.budget.PassCounter` on the model for the whole training, and
reports per incoming batch the forward and backward passes (per sample) and the relative
cost ``C`` (Ghunaim et al., CVPR 2023: a backward costs two forwards), over the whole stream
and over the batches after Reservoir's buffer is full. Counts only, no timings: the numbers
are the same on any machine.

``--matched`` also trains each policy on its compute-matched stream (the batches
:func:`~avalanche_gss.reproduce.runs.budget.trained_batches` gives for its ``C``; the others unseen
by the
model and the buffer) and reports the average final accuracy both ways.

``python benchmarks/compute_cost.py [--tasks 2] [--samples-per-task 200] [--seed 0]
[--policies ...] [--matched] [--json out.json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch
from avalanche.core import SupervisedPlugin

from avalanche_gss.reproduce.runs.budget import (
    PassCount,
    PassCounter,
    kept_samples,
    rehearsal_passes,
    relative_cost,
)
from avalanche_gss.reproduce.runs.training import RunSettings, run
from avalanche_gss.streams import TaskSplit, disjoint_tasks, load_dataset

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


def matched_split(split: TaskSplit, batch_size: int, c: Fraction) -> TaskSplit:
    """``split`` with only the batches a learner of relative cost ``c`` trains on."""
    keep = kept_samples([int(y.shape[0]) for _, y in split.train], batch_size, c)
    train = tuple((x[k], y[k]) for (x, y), k in zip(split.train, keep, strict=True))
    return dataclasses.replace(split, train=train,
                               protocol={**split.protocol, "relative_cost": float(c)})


def _sum(counts: list[PassCount]) -> PassCount:
    return sum(counts, PassCount())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--samples-per-task", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default="mnist")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument("--matched", action="store_true",
                        help="also train each policy on its compute-matched stream")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_dataset(args.data)
    split = disjoint_tasks(data, n_tasks=args.tasks, samples_per_task=args.samples_per_task,
                           seed=args.seed)
    base_settings = RunSettings(method="Reservoir", seed=args.seed)
    counts: dict[str, list[PassCount]] = {}
    accuracy: dict[str, float] = {}
    for label in ["Reservoir", *[p for p in args.policies if p != "Reservoir"]]:
        plugin = CountPasses()
        result = run(RunSettings(**{**POLICIES[label], "seed": args.seed}), split,
                     plugins=[plugin])
        counts[label], accuracy[label] = plugin.per_batch(), result.avg
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
        if args.matched:
            thin = matched_split(split, base_settings.batch_size, relative_cost(whole, base))
            result = run(RunSettings(**{**POLICIES[label], "seed": args.seed}), thin)
            kept = sum(-(-int(y.shape[0]) // 10) for _, y in thin.train)
            rows[-1].update(accuracy=accuracy[label], matched_accuracy=result.avg,
                            matched_batches=kept)
    print(f"data: {data.source}; {args.tasks} tasks x {args.samples_per_task} samples "
          f"({n_batches} batches of 10), seed {args.seed}; M = {base_settings.buffer_size}, "
          f"n_iter = {base_settings.n_iter}; Reservoir = {base.forward / n_batches:g} forward "
          f"+ {base.backward / n_batches:g} backward passes per batch (closed form agrees)")
    extra = " accuracy | matched accuracy | matched batches |" if args.matched else ""
    print(f"| policy | forward / batch | backward / batch | C | C (passes) | C (buffer full) |"
          f"{extra}")
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * (3 if args.matched else 0))
    for r in rows:
        cf = "-" if r["C_buffer_full"] is None else f"{r['C_buffer_full']:.2f}"
        more = (f" {r['accuracy']:.2f} | {r['matched_accuracy']:.2f} | {r['matched_batches']} |"
                if args.matched else "")
        print(f"| {r['policy']} | {r['forward_per_batch']:.1f} | {r['backward_per_batch']:.1f} "
              f"| {r['C']:.2f} | {r['C_passes']:.2f} | {cf} |{more}")
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
