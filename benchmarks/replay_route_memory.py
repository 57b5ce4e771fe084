"""Resident memory along a 100,000-sample stream on the README's Avalanche route.

Case ``replay-plugin``: a synthetic stream (10 classes, ``--dim``-d inputs: noisy class
prototypes) made into Avalanche's ``class_incremental_benchmark`` (5 experiences, seed 0)
and split into 10-sample experiences by ``split_online_stream`` (seed 0), learnt by
Avalanche's stock ``Naive`` strategy with ``ReplayPlugin(mem_size=M, batch_size=10,
storage_policy=...)`` and a small ``SimpleMLP``, in one ``strategy.train(stream)`` call.
Every ``--every`` samples the script records the process's resident memory (after a
garbage collection of the young generations: ``--collect``) and, with glibc, what its C
allocator has handed out and not had back (``heap_in_use_mb``, from ``mallinfo2``): RSS
also grows when the allocator first touches pages it reserved earlier, the heap in use
only with memory the program holds. It also counts Python's arenas, the blocks its
small-object allocator has handed out and not had back (``python_blocks``,
``sys.getallocatedblocks()`` after the record's collection: the Python objects the run
holds, and with ``--collect young`` or ``none`` the garbage no collection has freed yet)
and the most of them at any experience's end since the record before
(``python_blocks_peak``, before the collection), and, per generation, the automatic
garbage collections that ran between two records.

``--smaps DIR`` also has a child process copy the run's ``/proc/PID/smaps`` at each record
(after the collection; the run itself never reads the map, so it holds no copy of it) and
notes where three small tuples made then were placed; after each run the script names,
for every interval whose RSS rose by more than 50 KB, the mappings that grew and whether
each holds Python's small objects (the mapping of those tuples: Python's arenas).

Impls, each in a fresh process, one after the other: this library's buffers
(``Reservoir``, ``GSS-Greedy``, ``CB-GSS``, ...: any name of the registry) and Avalanche's
own ``ReservoirSamplingBuffer`` (``avalanche-reservoir``), the reference: the stream, the
strategy and the dataloaders are Avalanche's in every impl, so what differs is the buffer.
``Naive.train`` walks the whole stream before learning it (its default evaluation streams),
so the stream's experiences exist before the first measurement; growth from the first
point to the last is what the buffer and the learning add.

``--collect`` chooses the collection at each record. ``young`` (the default) collects
generations 0 and 1, as the run's own automatic collections do dozens of times per
10,000 samples, and no more: left to itself the run makes at most one full collection
between 10,000 and 100,000 samples (the script prints the automatic collections per
generation), so the records add none. ``full`` runs ``gc.collect()`` at every record,
which also empties CPython's tuple free lists; their refill over the next interval
sometimes takes pools of Python's small-object allocator not used before, and RSS then
takes a one-time step of a few hundred KB that is no memory the program holds (the C heap
in use and Python's arena count stay put across it; the README's "Long streams" says how
this was found). ``none`` collects nothing.

``--repeats R`` (default 3) runs every impl R times, the impls taking turns. A one-time
step comes in some runs and not others of the same impl; a leak grows in every run. So
the verdict is on the median: each buffer's median RSS growth from the first point to the
last is within Avalanche's buffer's median plus ``--slack-mb``. Every run's growth is
printed and saved beside it, with how many runs were within the reference's run of the
same turn.

``--warmup W`` (default 2,000) first runs the same impl, in the same process, on a
``W``-sample stream of its own (fresh model and buffer, the same route: five class changes),
unmeasured: torch initialises some CPU kernels lazily, once per process, the first time
they run, and such a first call can come mid-stream. GSS-Greedy's authors' candidate draw
(``torch.multinomial(..., replacement=False)``, whose CPU kernel draws exponentials) first
runs at the stream's first class change and adds about 0.4 MB then, once; further calls
add nothing (``--warmup 0`` shows that step; ``benchmarks/torch_lazy_init.py`` measures the
call alone). The warm-up keeps such one-time costs out of the growth measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
from avalanche.benchmarks import class_incremental_benchmark, split_online_stream
from avalanche.core import SupervisedPlugin
from avalanche.models import SimpleMLP
from avalanche.training import Naive
from avalanche.training.plugins import ReplayPlugin
from avalanche.training.storage_policy import ReservoirSamplingBuffer
from rss import copy_smaps, heap_in_use_mb, pymalloc_arenas, rss_mb, rss_parts_mb, smaps_rss

from avalanche_gss import methods
from avalanche_gss.streams import tensor_dataset
from avalanche_gss.training import quiet_evaluator

REFERENCE = "avalanche-reservoir"
IMPLS = ("Reservoir", "GSS-Greedy", "CB-GSS", REFERENCE)
CASE = "replay-plugin"
# --collect: the generation each record collects up to (gc.collect's argument)
COLLECT_GENERATION = {"full": 2, "young": 1}


class Probe(SupervisedPlugin):
    """Resident memory each time another ``every`` samples were learnt."""

    def __init__(self, every: int, impl: str, smaps_dir: str | None = None,
                 collect: str = "young") -> None:
        super().__init__()
        self.every, self.impl, self.smaps_dir, self.collect = every, impl, smaps_dir, collect
        self.samples = 0
        self.records: list[dict[str, Any]] = []
        self.blocks_peak = 0
        self.start = time.perf_counter()

    def after_training_exp(self, strategy: Any, **kwargs: Any) -> None:
        self.samples += len(strategy.experience.dataset)
        self.blocks_peak = max(self.blocks_peak, sys.getallocatedblocks())
        if self.samples >= self.every * (len(self.records) + 1):  # experiences may be short
            collections = [g["collections"] for g in gc.get_stats()]  # before this one's
            if self.collect != "none":
                gc.collect(COLLECT_GENERATION[self.collect])
            parts = rss_parts_mb()
            self.records.append({"case": CASE, "impl": self.impl, "samples": self.samples,
                                 "rss_mb": rss_mb(), "rss_anon_mb": parts["anon"],
                                 "rss_file_mb": parts["file"],
                                 "heap_in_use_mb": heap_in_use_mb(),
                                 "pymalloc_arenas": pymalloc_arenas(),
                                 "python_blocks": sys.getallocatedblocks(),
                                 "python_blocks_peak": self.blocks_peak,
                                 "gc_collections": collections, "collect": self.collect,
                                 "seconds": time.perf_counter() - self.start})
            self.blocks_peak = 0
            if self.smaps_dir is not None:
                copy_smaps(self.smaps_dir, len(self.records))


def smaps_steps(folder: str, records: int, min_kb: int = 50) -> list[str]:
    """For each interval between two of ``records`` records whose resident memory rose by
    more than ``min_kb``, the mappings that grew (largest first, at most 3), each said to
    hold Python's small objects when a record's marks lie in it."""
    maps = [smaps_rss(os.path.join(folder, f"{k}.smaps")) for k in range(1, records + 1)]
    marks = []
    for k in range(1, records + 1):
        with open(os.path.join(folder, f"{k}.marks")) as f:
            marks.append([int(v, 16) for v in f.read().split()])
    lines = []
    for k, (before, after) in enumerate(zip(maps, maps[1:], strict=False), start=1):
        grew = sum(after.values()) - sum(before.values())
        if grew <= min_kb:
            continue
        moved = sorted(((after.get(m, 0) - before.get(m, 0), m) for m in after.keys() | before),
                       reverse=True)
        parts = []
        for kb, (start, end, name) in moved[:3]:
            if kb <= 0:
                break
            small = any(start <= a < end for a in marks[k - 1] + marks[k])
            parts.append(f"{kb:+d} KB in {name or 'an anonymous mapping'} of "
                         f"{(end - start) / 2**20:.1f} MiB"
                         + (" (holds Python's small objects)" if small else ""))
        lines.append(f"records {k} -> {k + 1}: RSS {grew:+d} KB: " + "; ".join(parts))
    return lines


def route(samples: int, dim: int, seed: int) -> Any:
    """The README's route on a synthetic data set of ``samples`` training samples."""
    gen = torch.Generator().manual_seed(seed)
    protos = torch.rand(10, dim, generator=gen)
    y = torch.randint(0, 10, (samples + 1000,), generator=gen)
    x = torch.randn(len(y), dim, generator=gen).mul_(0.35).add_(protos[y])
    bench = class_incremental_benchmark(
        {"train": tensor_dataset(x[:samples], y[:samples]),
         "test": tensor_dataset(x[samples:], y[samples:])},
        num_experiences=5, seed=seed)
    return split_online_stream(bench.train_stream, experience_size=10, seed=seed)


def run_impl(impl: str, samples: int, every: int, mem: int, dim: int,
             seed: int, warmup: int = 0, smaps_dir: str | None = None,
             collect: str = "young") -> list[dict[str, Any]]:
    """One impl over the whole stream, in this (fresh) process, after ``warmup`` samples of
    an unmeasured stream of its own."""
    torch.set_num_threads(1)
    if warmup:
        run_impl(impl, warmup, warmup, mem, dim, seed + 1)
    stream = route(samples, dim, seed)
    torch.manual_seed(seed)
    model = SimpleMLP(num_classes=10, input_size=dim, hidden_size=64)
    buffer = (ReservoirSamplingBuffer(mem) if impl == REFERENCE
              else methods.get(impl).buffer(mem, seed=seed))
    probe = Probe(every, impl, smaps_dir, collect)
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                     train_mb_size=10, train_epochs=1, evaluator=quiet_evaluator(),
                     plugins=[ReplayPlugin(mem_size=mem, batch_size=10, storage_policy=buffer),
                              probe])
    strategy.train(stream)
    for r in probe.records:
        r.update(buffer_size=mem, dim=dim)
    return probe.records


def _growth(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's growth from its first record to its last: RSS, its anonymous and
    file-backed parts, the C heap in use (``None`` without glibc) and Python's arenas."""
    out: dict[str, Any] = {"samples_first": rs[0]["samples"], "rss_first_mb": rs[0]["rss_mb"],
                           "samples_last": rs[-1]["samples"], "rss_last_mb": rs[-1]["rss_mb"]}
    for key in ("rss", "rss_anon", "rss_file", "heap_in_use"):
        first, last = rs[0].get(f"{key}_mb"), rs[-1].get(f"{key}_mb")
        out[f"{key}_growth_mb"] = None if first is None else last - first
    out["pymalloc_arenas_first"] = rs[0].get("pymalloc_arenas")
    out["pymalloc_arenas_last"] = rs[-1].get("pymalloc_arenas")
    if rs[0].get("python_blocks") is not None:
        # Python's live blocks from the first record to the last; how far the highest
        # peak after the first record rose above the first record's own peak
        out["python_blocks_growth"] = rs[-1]["python_blocks"] - rs[0]["python_blocks"]
        out["python_blocks_new_peak"] = (max(r["python_blocks_peak"] for r in rs[1:])
                                         - rs[0]["python_blocks_peak"]) if len(rs) > 1 else 0
    if rs[0].get("gc_collections") is not None and len(rs) > 1:
        # Automatic collections per generation between the first record and the last (the
        # records' own collections left out), per record interval
        own = COLLECT_GENERATION.get(rs[0].get("collect", "full"))  # older records: full
        pairs = zip(rs[0]["gc_collections"], rs[-1]["gc_collections"], strict=True)
        done = [b - a - (len(rs) - 1) * (g == own) for g, (a, b) in enumerate(pairs)]
        out["gc_collections_per_interval"] = [d / (len(rs) - 1) for d in done]
    return out


def summarise(records: list[dict[str, Any]], slack_mb: float) -> dict[str, dict[str, Any]]:
    """Each impl's runs (:func:`_growth` of each, in ``runs``) and their RSS growth's median,
    smallest and largest. Against the reference: ``within_reference``, the median growth
    within the reference's median + slack; ``runs_within_reference``, the runs whose
    growth is within that of the reference's run of the same repeat + slack."""
    out: dict[str, dict[str, Any]] = {}
    for impl in dict.fromkeys(r["impl"] for r in records):
        mine = [r for r in records if r["impl"] == impl]
        runs = [_growth([r for r in mine if r.get("repeat", 0) == k])
                for k in dict.fromkeys(r.get("repeat", 0) for r in mine)]
        growth = [run["rss_growth_mb"] for run in runs]
        out[impl] = {"runs": runs, "rss_growth_mb": growth,
                     "rss_growth_median_mb": statistics.median(growth),
                     "rss_growth_min_mb": min(growth), "rss_growth_max_mb": max(growth)}
    ref = out.get(REFERENCE)
    if ref is not None:
        for s in out.values():
            s["within_reference"] = (s["rss_growth_median_mb"]
                                     <= ref["rss_growth_median_mb"] + slack_mb)
            pairs = zip(s["rss_growth_mb"], ref["rss_growth_mb"], strict=True)
            s["runs_within_reference"] = sum(g <= r + slack_mb for g, r in pairs)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--samples", type=int, default=100_000, help="stream length")
    parser.add_argument("--every", type=int, default=10_000, help="samples per measurement")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS),
                        choices=[*methods.NAMES, REFERENCE])
    parser.add_argument("--buffer-size", type=int, default=300)
    parser.add_argument("--dim", type=int, default=64, help="input features")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=2000,
                        help="samples of an unmeasured stream each impl learns first, in "
                             "the same process (0: none)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each impl, each in a fresh interpreter, the impls "
                             "taking turns (the verdict is on the median)")
    parser.add_argument("--smaps", default=None, metavar="DIR",
                        help="copy each record's /proc/PID/smaps under DIR and name the "
                             "mappings that grew where RSS rose (Linux)")
    parser.add_argument("--collect", choices=("young", "full", "none"), default="young",
                        help="the garbage collection at each record: young (generations 0 "
                             "and 1, as the run's own), full (all three, which also empties "
                             "CPython's free lists) or none")
    parser.add_argument("--slack-mb", type=float, default=0.1,
                        help="RSS growth above the reference's still counted as within it")
    args = parser.parse_args(argv)
    if args.every % 10 or args.samples % (5 * args.every):
        parser.error("--every must be a multiple of 10 and --samples of 5 * --every")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.warmup < 0 or args.warmup % 50:
        parser.error(f"--warmup must be 0 or a positive multiple of 50, got {args.warmup}")
    if args.smaps is not None and not args.child:  # refused before any run, in one line
        if not os.path.exists("/proc/self/smaps"):
            parser.error("--smaps needs Linux's /proc/PID/smaps, which this system lacks")
        try:
            os.makedirs(args.smaps, exist_ok=True)
        except OSError as err:
            parser.error(f"--smaps {args.smaps}: {err.strerror}")
    records: list[dict[str, Any]] = []
    if args.child:  # one impl, in this fresh interpreter: records on stdout's last line
        print(json.dumps(run_impl(args.impls[0], args.samples, args.every, args.buffer_size,
                                  args.dim, args.seed, args.warmup, args.smaps,
                                  args.collect)))
        return 0
    for repeat in range(args.repeats):  # the impls take turns: a busy spell hits them all
        for impl in args.impls:  # one fresh interpreter each: no shared allocator state
            run_dir = None if args.smaps is None else os.path.join(args.smaps,
                                                                    f"{impl}-run{repeat + 1}")
            if run_dir is not None:
                os.makedirs(run_dir, exist_ok=True)
            child = subprocess.run(
                [sys.executable, __file__, "--child", "--impls", impl, "--samples",
                 str(args.samples), "--every", str(args.every), "--buffer-size",
                 str(args.buffer_size), "--dim", str(args.dim), "--seed", str(args.seed),
                 "--warmup", str(args.warmup), "--collect", args.collect,
                 *(["--smaps", run_dir] if run_dir else [])],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
            run = json.loads(child.stdout.strip().splitlines()[-1])
            records += [{**r, "repeat": repeat} for r in run]
            g = _growth(run)
            print(f"run {repeat + 1}/{args.repeats} {impl}: RSS {g['rss_first_mb']:.1f} MB at "
                  f"{g['samples_first']} -> {g['rss_last_mb']:.1f} MB at {g['samples_last']} "
                  f"({g['rss_growth_mb']:+.2f} MB) in {run[-1]['seconds']:.0f} s", flush=True)
            for line in smaps_steps(run_dir, len(run)) if run_dir else []:
                print(f"  {line}", flush=True)
    summary = summarise(records, args.slack_mb)
    for impl, s in summary.items():
        print(f"{impl}: RSS growth from {s['runs'][0]['samples_first']} to "
              f"{s['runs'][0]['samples_last']} samples, median {s['rss_growth_median_mb']:+.2f} MB"
              f" over {len(s['runs'])} run(s) ("
              + ", ".join(f"{g:+.2f}" for g in s["rss_growth_mb"]) + ")"
              + ("" if "within_reference" not in s else
                 f"; median within {REFERENCE}'s (+{args.slack_mb} MB): "
                 f"{s['within_reference']}; runs within the same turn's: "
                 f"{s['runs_within_reference']}/{len(s['runs'])}"))
        for k, run in enumerate(s["runs"]):
            print(f"  run {k + 1}: anonymous {run['rss_anon_growth_mb']:+.2f} MB, file-backed "
                  f"{run['rss_file_growth_mb']:+.2f} MB"
                  + ("" if run["heap_in_use_growth_mb"] is None else
                     f", C heap in use {run['heap_in_use_growth_mb']:+.3f} MB")
                  + ("" if run["pymalloc_arenas_first"] is None else
                     f", Python's arenas {run['pymalloc_arenas_first']} -> "
                     f"{run['pymalloc_arenas_last']}")
                  + ("" if run.get("python_blocks_growth") is None else
                     f", Python's blocks {run['python_blocks_growth']:+d} (highest peak "
                     f"{run['python_blocks_new_peak']:+d} over the first interval's)")
                  + ("" if run.get("gc_collections_per_interval") is None else
                     ", automatic collections per record (generations 0, 1, 2): "
                     + ", ".join(f"{c:.1f}" for c in run["gc_collections_per_interval"])))
    machine = (f"{platform.node()} {platform.machine()} torch {torch.__version__} "
               f"threads 1, warm-up {args.warmup} samples, {args.collect} collections")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "replay_route_memory", "machine": machine,
                       "warmup": args.warmup, "collect": args.collect,
                       "repeats": args.repeats, "records": records,
                       "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
