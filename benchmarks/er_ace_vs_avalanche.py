"""ER-ACE here against Avalanche's ``ER_ACE``: the paired difference of final accuracy.

Same stream, model, memory and seeds: the disjoint stream of the offline MNIST digits (5
tasks of 2 classes, ``--samples-per-task`` each), batches of 10, the MLP 784-100-100-10
with the seed's initialisation, SGD (``--lr``), one step per incoming batch, replay
batches of 10 from Avalanche's ``ClassBalancedBuffer(M, adaptive_size=True)`` (the memory
``ER_ACE`` builds for itself). The two runs of a seed differ only by the implementation:

- ``library``: :class:`~avalanche_gss.training.OnlineRehearsal` with
  :class:`~avalanche_gss.training.AsymmetricCrossEntropy` and ``joint=True`` (one step on
  the incoming and the replay batch, the sum of the two terms), the buffer updated after
  each batch was learnt;
- ``avalanche``: Avalanche 0.6's ``ER_ACE`` on ``split_online_stream`` of the same tasks
  (experiences of the same 10 samples, in the same order): its buffer is updated before
  each batch is learnt (the batch can be replayed in its own step), it replays from the
  second task on only, learns the first task with the plain cross-entropy, and averages
  the two terms (``(L_in + L_replay) / 2``: half the step of the sum).

Because of that last difference, ``--avalanche-lr-scale 2`` gives Avalanche twice the
learning rate (the same step as the sum on steps with replay; twice the step on the first
task's). The script prints each seed's final average accuracy (mean over the 5 tasks'
test sets) of both, and the mean paired difference (library minus Avalanche) with its
95% Student-t interval.

``python benchmarks/er_ace_vs_avalanche.py [--seeds 0 1 2 3 4] [--samples-per-task 60]
[--buffer-size 50] [--lr 0.05] [--avalanche-lr-scale 1]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from typing import Any

import torch
from torch import nn

from avalanche_gss.models import MLP
from avalanche_gss.reproduce.reports.comparisons import mean_interval
from avalanche_gss.streams import disjoint_tasks, load_dataset, online_benchmark
from avalanche_gss.training import AsymmetricCrossEntropy, OnlineRehearsal, quiet_evaluator


def _accuracy(model: nn.Module, split: Any) -> float:
    """Mean over the tasks of the test accuracy, in %."""
    model.eval()
    with torch.no_grad():
        accs = [100.0 * float((model(x).argmax(1) == y).float().mean()) for x, y in split.test]
    return sum(accs) / len(accs)


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return MLP()


def run_library(split: Any, seed: int, m: int, lr: float) -> float:
    """ER-ACE with this library's loss and rehearsal, on Avalanche's class-balanced memory."""
    from avalanche.training.storage_policy import ClassBalancedBuffer

    model = _model(seed)
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                               criterion=AsymmetricCrossEntropy(), joint=True,
                               storage_policy=ClassBalancedBuffer(m, adaptive_size=True),
                               replay_batch_size=10, seed=seed, n_iter=1)
    torch.manual_seed(seed)  # the replay draws of the Avalanche buffer's dataset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strategy.train(online_benchmark(split, batch_size=10).train_stream)
    return _accuracy(model, split)


def run_avalanche(split: Any, seed: int, m: int, lr: float) -> float:
    """Avalanche's own ``ER_ACE`` on the same 10-sample experiences."""
    from avalanche.benchmarks.scenarios.online import split_online_stream
    from avalanche.training import ER_ACE

    model = _model(seed)
    stream = split_online_stream(online_benchmark(split, batch_size=10).task_stream, 10,
                                 shuffle=False, access_task_boundaries=False, seed=seed)
    strategy = ER_ACE(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                      mem_size=m, batch_size_mem=10, train_mb_size=10, train_epochs=1,
                      evaluator=quiet_evaluator())
    torch.manual_seed(seed)  # its replay loader's shuffles
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for experience in stream:
            strategy.train(experience)
    return _accuracy(model, split)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--samples-per-task", type=int, default=60)
    parser.add_argument("--buffer-size", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--avalanche-lr-scale", type=float, default=1.0,
                        help="Avalanche's learning rate is --lr times this (2: the same "
                        "step as the summed loss on steps with replay)")
    parser.add_argument("--data", default="mnist-5k")
    args = parser.parse_args(argv)
    if len(args.seeds) < 2:
        parser.error("argument --seeds: a paired interval needs at least 2 seeds")
    torch.set_num_threads(1)
    data = load_dataset(args.data)
    rows = []
    for seed in args.seeds:
        split = disjoint_tasks(data, samples_per_task=args.samples_per_task, seed=seed)
        ours = run_library(split, seed, args.buffer_size, args.lr)
        theirs = run_avalanche(split, seed, args.buffer_size, args.lr * args.avalanche_lr_scale)
        rows.append((seed, ours, theirs))
        print(f"seed {seed}: library {ours:6.2f}  avalanche {theirs:6.2f}  "
              f"difference {ours - theirs:+6.2f}")
    diffs = [a - b for _, a, b in rows]
    mean, low, high = mean_interval(diffs)
    print(f"{len(rows)} seeds, {args.samples_per_task} samples per task, M = {args.buffer_size}, "
          f"lr {args.lr} (Avalanche x{args.avalanche_lr_scale:g}), data {data.source}")
    print(f"final accuracy: library {statistics.fmean(r[1] for r in rows):.2f}, "
          f"avalanche {statistics.fmean(r[2] for r in rows):.2f}")
    print(f"paired difference (library - avalanche): {mean:+.2f} points, "
          f"95% interval [{low:+.2f}, {high:+.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
