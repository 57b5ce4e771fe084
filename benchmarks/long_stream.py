"""Resident memory and time per batch of GSS-Greedy and GSS-IQP along a 100,000-sample stream.

Case ``long-stream``: a synthetic task sequence (5 tasks of 2 classes, 784-d inputs: noisy
class prototypes, 20,000 training samples per task by default), learnt online in batches of
10 by the MLP 784-100-100-10 (SGD lr 0.05, ``n_iter`` iterations per batch, replay of 10
buffer samples) through :func:`avalanche_gss.streams.online_benchmark` and one
``strategy.train(stream)`` call. Every ``--every`` samples the script records the median
and mean wall time per batch over the last segment (learning steps, replay and buffer
update, stream access included) and the process's resident memory.

Impls (each in a fresh process, one after the other): ``GSS-Greedy`` (Algorithm 2, n = 10)
and ``GSS-IQP`` (Algorithm 1, recent buffer 100, fast IQP solver). The data set itself
(~320 MB for 100,000 x 784 floats) is allocated before the first measurement, so growth
from the 10k point to the end is what the run adds. Flat means at most 10% RSS growth from
10k to 100k samples, and median and mean time per batch of the last segment within 1.25x
of the first. The RSS includes ~1.2 GB of imported libraries (torch alone ~700 MB), so the
JSON also gives the growth in MB. ``--device auto`` (the default) trains on CUDA when
present; the RSS is the host process's memory either way.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import json
import multiprocessing
import platform
import statistics
import sys
import time
from typing import Any

import torch
from avalanche.core import SupervisedPlugin
from rss import peak_rss_mb, rss_mb

from avalanche_gss.methods.gss_greedy import GSSGreedy
from avalanche_gss.methods.gss_iqp import GSSIQP
from avalanche_gss.models import MLP
from avalanche_gss.reproduce.runs.training import resolve_device
from avalanche_gss.streams import TaskSplit, online_benchmark
from avalanche_gss.streams.online import experience_tensors

IMPLS = ("GSS-Greedy", "GSS-IQP")
CASE = "long-stream"


def synthetic_split(samples: int, *, dim: int = 784, n_tasks: int = 5, test_per_task: int = 200,
                    seed: int = 0) -> TaskSplit:
    """``n_tasks`` tasks of 2 classes; each sample a class prototype plus Gaussian noise."""
    gen = torch.Generator().manual_seed(seed)
    protos = torch.rand(2 * n_tasks, dim, generator=gen)  # (C, D)
    per_task = samples // n_tasks

    def draw(task: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = 2 * task + torch.randint(0, 2, (n,), generator=gen)  # (n,)
        x = torch.randn(n, dim, generator=gen).mul_(0.35).add_(protos[y]).clamp_(0, 1)
        return x, y

    train = tuple(draw(t, per_task) for t in range(n_tasks))
    test = tuple(draw(t, test_per_task) for t in range(n_tasks))
    return TaskSplit(train=train, test=test,
                     task_classes=tuple((2 * t, 2 * t + 1) for t in range(n_tasks)),
                     num_classes=2 * n_tasks, dataset="synthetic-784",
                     data_source=f"synthetic prototypes + noise, seed {seed}")


class Probe(SupervisedPlugin):
    """Time per batch and resident memory, recorded every ``every`` samples."""

    def __init__(self, every: int, impl: str) -> None:
        super().__init__()
        self.every, self.impl = every, impl
        self.samples = 0
        self.durations: list[float] = []
        self.records: list[dict[str, Any]] = []
        self.last = time.perf_counter()

    def after_training_exp(self, strategy: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        self.durations.append(now - self.last)
        self.samples += len(experience_tensors(strategy.experience)[1])
        if self.samples % self.every == 0:
            gc.collect()
            ms = [1000 * d for d in self.durations]
            self.records.append({
                "case": CASE, "impl": self.impl, "samples": self.samples,
                "median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms),
                "p90_ms": statistics.quantiles(ms, n=10)[-1], "batches": len(ms),
                "rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb(),
                "buffer_len": len(strategy.storage_policy),
            })
            self.durations = []
            now = time.perf_counter()
        self.last = now


def run_impl(impl: str, samples: int, every: int, buffer_size: int, n_iter: int,
             threads: int, seed: int, device: str = "cpu") -> list[dict[str, Any]]:
    """One impl over the whole stream, in this (fresh) process."""
    torch.set_num_threads(threads)
    split = synthetic_split(samples, seed=seed)
    torch.manual_seed(seed)
    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    probe = Probe(every, impl)
    common = dict(model=model, optimizer=optimizer, mem_size=buffer_size, n_iter=n_iter,
                  seed=seed, plugins=[probe], device=device)
    strategy = GSSGreedy(n=10, **common) if impl == "GSS-Greedy" else GSSIQP(**common)
    bench = online_benchmark(split, batch_size=10)
    gc.collect()
    start_rss = rss_mb()
    strategy.train(bench.train_stream)
    model.eval()
    with torch.no_grad():
        accs = [100.0 * float((model(x.to(device)).argmax(1) == y.to(device)).float().mean())
                for x, y in split.test]
    for r in probe.records:
        r.update(buffer_size=buffer_size, n_iter=n_iter, rss_before_training_mb=start_rss,
                 data_source=split.data_source, device=device)
    probe.records[-1]["avg_accuracy"] = statistics.fmean(accs)
    return probe.records


def summarise(records: list[dict[str, Any]]) -> dict[str, dict[str, float | bool]]:
    out: dict[str, dict[str, float | bool]] = {}
    for impl in dict.fromkeys(r["impl"] for r in records):
        rs = [r for r in records if r["impl"] == impl]
        first, last = rs[0], rs[-1]
        growth = 100.0 * (last["rss_mb"] - first["rss_mb"]) / first["rss_mb"]
        ratios = [last[k] / first[k] for k in ("median_ms", "mean_ms")]
        out[impl] = {
            "rss_first_mb": first["rss_mb"], "rss_last_mb": last["rss_mb"],
            "rss_growth_pct": growth, "rss_growth_mb": last["rss_mb"] - first["rss_mb"],
            "median_ms_first": first["median_ms"], "median_ms_last": last["median_ms"],
            "mean_ms_first": first["mean_ms"], "mean_ms_last": last["mean_ms"],
            "median_ms_ratio": ratios[0], "mean_ms_ratio": ratios[1],
            "memory_flat": growth <= 10.0, "time_flat": max(ratios) <= 1.25,
        }
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--samples", type=int, default=100_000, help="stream length")
    parser.add_argument("--every", type=int, default=10_000, help="samples per measurement")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=list(IMPLS))
    parser.add_argument("--buffer-size", type=int, default=300)
    parser.add_argument("--n-iter", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: batches of 10 gain nothing from more)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when present, else cpu) | cpu | cuda | cuda:N")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ValueError as err:
        parser.error(f"argument --device: {err}")
    if args.every % 10 or args.samples % (5 * args.every):
        parser.error("--every must be a multiple of 10 and --samples of 5 * --every")
    records: list[dict[str, Any]] = []
    spawn = multiprocessing.get_context("spawn")
    for impl in args.impls:  # one fresh process each: clean RSS, no shared allocator state
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
            records += pool.submit(run_impl, impl, args.samples, args.every, args.buffer_size,
                                   args.n_iter, args.threads, args.seed, device).result()
    print(f"{'impl':<11} {'samples':>8} {'median ms':>10} {'mean ms':>8} {'p90 ms':>7} "
          f"{'RSS MB':>8} {'peak MB':>8}")
    for r in records:
        print(f"{r['impl']:<11} {r['samples']:>8} {r['median_ms']:10.2f} {r['mean_ms']:8.2f} "
              f"{r['p90_ms']:7.2f} {r['rss_mb']:8.1f} {r['peak_rss_mb']:8.1f}")
    summary = summarise(records)
    for impl, s in summary.items():
        print(f"{impl}: RSS {s['rss_first_mb']:.1f} -> {s['rss_last_mb']:.1f} MB "
              f"({s['rss_growth_pct']:+.1f}%); ms/batch median {s['median_ms_first']:.2f} -> "
              f"{s['median_ms_last']:.2f}, mean {s['mean_ms_first']:.2f} -> "
              f"{s['mean_ms_last']:.2f}; flat memory {s['memory_flat']}, "
              f"flat time {s['time_flat']}")
    machine = (f"{platform.node()} {platform.machine()} {platform.processor() or ''} "
               f"torch {torch.__version__} threads {args.threads}").strip()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "long_stream", "machine": machine, "records": records,
                       "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
