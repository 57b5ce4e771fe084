"""How often MIR replays samples of classes the incoming batch does not hold.

Reservoir with MIR retrieval (50 candidates) on the disjoint stream of the offline
digits (800 samples per task, M = 300, ``n_iter`` 3, seeds 0-2), counting, at each replay
step whose buffer holds more than the candidates, the share of MIR's chosen samples whose
class is absent from the incoming batch, beside the same share over the whole buffer.
This is the measurement behind :class:`~avalanche_gss.training.OtherClassesRetrieval`'s
docstring.

``python benchmarks/mir_classes.py [--seeds 0 1 2] [--data mnist]``
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from avalanche_gss.methods.reservoir import Reservoir
from avalanche_gss.models import MLP
from avalanche_gss.streams import disjoint_tasks, load_dataset, online_benchmark
from avalanche_gss.training import MIRRetrieval


class CountingMIR(MIRRetrieval):
    """MIR that counts the other-class samples it chooses and the buffer holds."""

    def __init__(self, candidates: int = 50) -> None:
        super().__init__(candidates)
        self.counts = {"chosen": 0, "chosen_other": 0, "stored": 0, "stored_other": 0}

    def before_update(self, strategy: Any, policy: Any, k: int,
                      generator: torch.Generator) -> None:
        super().before_update(strategy, policy, k, generator)
        if self._chosen is None or len(policy) <= self.candidates:
            return
        chosen, stored = self._chosen[1], policy.y[: len(policy)]
        self.counts["chosen"] += len(chosen)
        self.counts["chosen_other"] += int((~torch.isin(chosen, strategy.mb_y)).sum())
        self.counts["stored"] += len(stored)
        self.counts["stored_other"] += int((~torch.isin(stored, strategy.mb_y)).sum())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--data", default="mnist")
    parser.add_argument("--buffer-size", type=int, default=300)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_dataset(args.data)
    print(f"data: {data.source}")
    for seed in args.seeds:
        split = disjoint_tasks(data, samples_per_task=800, seed=seed)
        torch.manual_seed(seed)
        model = MLP()
        mir = CountingMIR()
        strategy = Reservoir(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                             mem_size=args.buffer_size, n_iter=3, seed=seed, retrieval=mir)
        strategy.train(online_benchmark(split, batch_size=10).train_stream)
        c = mir.counts
        print(f"seed {seed}: {c['chosen_other'] / c['chosen']:.1%} of MIR's replayed samples "
              f"are of classes absent from the batch; {c['stored_other'] / c['stored']:.1%} "
              "of the buffer's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
