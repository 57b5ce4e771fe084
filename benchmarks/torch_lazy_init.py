"""Resident memory of torch's first CPU call of a sampling op, against its later calls.

Some CPU kernels of torch set themselves up the first time they run in a process and keep
that memory: a one-time cost, not growth. GSS-Greedy's authors' candidate draw calls
``torch.multinomial(weights, k, replacement=False)`` (float64 weights), whose kernel draws
exponentials; it first runs at a stream's first class change, which is why the replay-route
memory benchmark (``benchmarks/replay_route_memory.py``) warms each impl up first. This
script measures, in a fresh process: the first call of each op, then ``--calls`` more.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys

import torch


def rss_mb() -> float:
    """The process's resident memory, from Linux's procfs."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000, help="calls after the first")
    parser.add_argument("--size", type=int, default=300, help="weights (a buffer's M)")
    parser.add_argument("--json", default=None, help="write the records here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    weights = torch.rand(args.size, dtype=torch.float64, generator=gen)
    ops = {
        "multinomial, with replacement": lambda: torch.multinomial(
            weights, 10, replacement=True, generator=gen),
        "multinomial, without replacement": lambda: torch.multinomial(
            weights, 10, replacement=False, generator=gen),
    }
    records = []
    for name, op in ops.items():
        before = rss_mb()
        op()
        first = rss_mb()
        for _ in range(args.calls):
            op()
        records.append({"op": name, "first_call_mb": first - before,
                        "later_calls": args.calls, "later_calls_mb": rss_mb() - first})
        print(f"{name}: first call {first - before:+.3f} MB, "
              f"{args.calls} more calls {rss_mb() - first:+.3f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "torch_lazy_init", "torch": torch.__version__,
                       "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
