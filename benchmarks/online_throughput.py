"""Wall time of a whole online run: this library vs Avalanche's own route vs a bare loop.

Both cases: disjoint MNIST (the real digits available offline unless ``--data`` names
another source), MLP 784-100-100-10, SGD lr 0.05, batches of 10, ``n_iter`` iterations per
batch, each one step on the batch and one on 10 buffer samples, a buffer of ``M`` samples.

Case ``reservoir-mlp-disjoint``:

- ``library``: :class:`avalanche_gss.methods.reservoir.Reservoir` on the task-free online stream.
- ``avalanche``: Avalanche 0.6's ``Naive`` + ``ReplayPlugin(ReservoirSamplingBuffer)`` on
  ``split_online_stream(task_stream, 10)`` (its replay concatenates batch and buffer in
  one step, so it takes half the steps).
- ``avalanche-ours``: the same Avalanche route with this library's ``ReservoirBuffer`` as
  the storage policy (the Avalanche-native way to use our buffers).
- ``floor``: a bare PyTorch loop doing the same steps on the same tensors.

Case ``gss-greedy-mlp-disjoint``:

- ``library``: :class:`avalanche_gss.methods.gss_greedy.GSSGreedy` with ``variant="paper"``
  (Algorithm 2 as written, n = 10). Case ``gss-greedy-authors-mlp-disjoint``: the same
  with ``variant="authors"`` (the default: n = 10 mean gradients of 10 buffer samples
  each, so its Gram is over 10 + 100 samples instead of 10 + 10).
- ``floor``: the bare reservoir loop above (same schedule, no gradient scoring).
- ``avalanche``: Avalanche 0.6's ``GSS_greedy`` (mem_strength = 10). It crashes on a
  stream of 10-sample experiences, so it gets task-level experiences with
  ``train_epochs = n_iter`` (``n_iter`` passes over each task, one step per mini-batch of
  10 new + 32 replayed samples, selection inside every step): not the same schedule,
  timed that way because it is the only way it runs.

Cases ``cbrs-mlp-disjoint``, ``cbrs-oc-mlp-disjoint`` and ``cb-gss-mlp-disjoint``:
``library`` is :class:`~avalanche_gss.methods.cbrs.CBRS`, the same with
``retrieval="other-classes"`` (CBRS+OC), and :class:`~avalanche_gss.methods.cb_gss.CBGSS`
(CBRS's quotas, GSS-Greedy's score of each new sample against 10 buffer gradients, and
its default replay of the classes the batch does not hold), and ``floor`` the bare
reservoir loop.

Cases ``cbrs-oc-la-mlp-disjoint`` and ``cb-gss-step-la-mlp-disjoint``: ``library`` is
CBRS+OC and CB-GSS with ``score_from="step"``, each trained with
:class:`~avalanche_gss.training.LogitAdjustedLoss` (``tau = 1``, a window of 1,000
labels), ``floor`` the bare reservoir loop.

Cases ``reservoir-joint-mlp-disjoint`` and ``er-ace-mlp-disjoint``: ``library`` is
:class:`~avalanche_gss.methods.reservoir.Reservoir` with ``joint=True`` (one SGD step on the
incoming and the replay batch, ER's schedule), trained with the cross-entropy, then with
ER-ACE's :class:`~avalanche_gss.training.AsymmetricCrossEntropy` (what ER-ACE costs beyond
ER is the difference of the two). Case ``er-mkd-mlp-disjoint``: ``Reservoir`` with
:class:`~avalanche_gss.training.MKDPlugin` (an EMA teacher, momentum 0.99, distilled with
weight 8 at temperature 4). Case ``csrel-mlp-disjoint``: :class:`~avalanche_gss.methods.csrel.CSReL`
(two forward passes per batch, a coreset model trained on the buffer every ``M // 10``
stored samples). Cases ``cbrs-oc-ace-mlp-disjoint`` and ``cbrs-oc-la-mkd-mlp-disjoint``:
CBRS+OC trained with ER-ACE's loss (``joint=True``), and CBRS+OC+LA with MKD on top. Each
with ``floor`` the bare reservoir loop.

Cases ``ocs-mlp-disjoint`` and ``gcr-mlp-disjoint``: ``library`` is
:class:`~avalanche_gss.methods.ocs.OCS` (each batch's per-sample Gram with 10 buffer
gradients, top 2 of the batch into a reservoir) and :class:`~avalanche_gss.methods.gcr.GCR`
(orthogonal matching pursuit over the Gram of buffer and 100 waiting samples), ``floor``
the bare reservoir loop.

Each record also carries the final average test accuracy (mean over tasks), so that the
library and the bare loop can be compared on what they learn, not only on time. Repeats
use seeds 0, 1, 2, ... ``--device auto`` (the default) trains on CUDA when it is present.

Cases ``reservoir-resnet-cifar``, ``gss-greedy-resnet-cifar`` and ``gss-iqp-resnet-cifar``
(opt-in with ``--cases``: slow on a CPU): Table 3's setting on a generated CIFAR-shaped
stand-in (:func:`avalanche_gss.streams.synthetic_images`, 10 classes of noisy 3x32x32
prototypes, not real data: the records' ``data_source`` says so), disjoint 5 x 2,000, the
reduced ResNet-18, SGD lr 0.01, ``M = 1000``. ``library`` is
:class:`~avalanche_gss.methods.reservoir.Reservoir`,
:class:`~avalanche_gss.methods.gss_greedy.GSSGreedy` (default variant) or
:class:`~avalanche_gss.methods.gss_iqp.GSSIQP`; ``floor`` the bare reservoir loop (buffer
and replay draw on the device) with the same model and steps. ``--samples-per-task`` and
``--buffer-size`` default to each case's own (1000 and 300 MLP, 2000 and 1000 ResNet);
``--test-per-class`` sizes the stand-in's test set.

``--phases`` adds each run's seconds per phase (training steps, scoring, selection,
replay draw, evaluation, other; see ``benchmarks/phases.py``) to the records for the
``library`` and ``floor`` impls. It wraps methods of the strategy instance only, so a
plain run pays nothing; on CUDA it synchronises at every phase edge, which slows the run:
compare ``median_ms`` of plain runs only.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from phases import NoTimer, PhaseTimer, instrument, table
from torch import nn

from avalanche_gss.methods.cb_gss import CBGSS
from avalanche_gss.methods.cbrs import CBRS
from avalanche_gss.methods.csrel import CSReL
from avalanche_gss.methods.gcr import GCR
from avalanche_gss.methods.gss_greedy import GSSGreedy
from avalanche_gss.methods.gss_iqp import GSSIQP
from avalanche_gss.methods.ocs import OCS
from avalanche_gss.methods.reservoir import Reservoir, ReservoirBuffer
from avalanche_gss.models import MLP, make_model
from avalanche_gss.reproduce.runs.training import resolve_device
from avalanche_gss.streams import (
    disjoint_tasks,
    load_dataset,
    online_benchmark,
    synthetic_images,
)
from avalanche_gss.training import AsymmetricCrossEntropy, LogitAdjustedLoss, MKDPlugin

LR = {"mlp": 0.05, "resnet": 0.01}  # Table 1's and Table 3's SGD learning rates
DEFAULTS = {"mlp": {"samples_per_task": 1000, "buffer_size": 300},
            "resnet": {"samples_per_task": 2000, "buffer_size": 1000}}


def _accuracy(model: nn.Module, split: Any, device: str, chunk: int | None = None) -> float:
    model.eval()
    accs = []
    with torch.no_grad():
        for x, y in split.test:
            x, y = x.to(device), y.to(device)
            if chunk is None:
                accs.append(100.0 * float((model(x).argmax(1) == y).float().mean()))
                continue
            hits = sum(int((model(x[i : i + chunk]).argmax(1) == y[i : i + chunk]).sum())
                       for i in range(0, len(y), chunk))  # the ResNet cases' test sets
            accs.append(100.0 * hits / len(y))
    model.train()
    return sum(accs) / len(accs)


def _model(seed: int, device: str, arch: str = "mlp") -> nn.Module:
    torch.manual_seed(seed)
    if arch == "resnet":
        return make_model("resnet18", (3, 32, 32), 10).to(device)
    return MLP().to(device)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _evaluate(model: nn.Module, split: Any, device: str, timer: Any) -> float:
    chunk = None if isinstance(model, MLP) else 500
    with timer.phase("evaluation"):
        return _accuracy(model, split, device, chunk)


def warm_up(arch: str, device: str) -> None:
    """Untimed steps of the case's model, so that no impl's timed run pays the device's
    one-time costs (on CUDA: cuDNN and cuBLAS handles, lazily loaded kernels)."""
    model = _model(0, device, arch)
    opt = torch.optim.SGD(model.parameters(), lr=LR[arch])
    x = torch.zeros((10, *((3, 32, 32) if arch == "resnet" else (784,))), device=device)
    y = torch.zeros(10, dtype=torch.long, device=device)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        model.eval()
        model(x)
    _sync(device)


def run_library(split: Any, seed: int, m: int, n_iter: int, device: str,
                cls: Any = Reservoir, arch: str = "mlp", timer: Any = None) -> tuple[float, float]:
    timer = timer or NoTimer()
    model = _model(seed, device, arch)
    strategy = cls(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR[arch]),
                   mem_size=m, n_iter=n_iter, seed=seed, device=device)
    if isinstance(timer, PhaseTimer):
        instrument(strategy, timer)
    bench = online_benchmark(split, batch_size=10)
    start = time.perf_counter()
    strategy.train(bench.train_stream)
    _sync(device)
    return time.perf_counter() - start, _evaluate(model, split, device, timer)


def run_floor(split: Any, seed: int, m: int, n_iter: int, device: str, arch: str = "mlp",
              timer: Any = None) -> tuple[float, float]:
    """The bare loop: buffer tensors and replay draw on ``device``, Algorithm R on the host."""
    phase = (timer or NoTimer()).phase
    model = _model(seed, device, arch)
    opt = torch.optim.SGD(model.parameters(), lr=LR[arch])
    loss_fn = nn.CrossEntropyLoss()
    x_all, y_all = split.stream_tensors()
    rng = random.Random(seed)
    start = time.perf_counter()
    bx = torch.zeros((m, *x_all.shape[1:]), device=device)
    by = torch.zeros(m, dtype=torch.long, device=device)
    size = seen = 0
    for task_x, task_y in split.train:
        for i in range(0, len(task_y), 10):
            x, y = task_x[i : i + 10].to(device), task_y[i : i + 10].to(device)
            for _ in range(n_iter):
                with phase("train_steps"):
                    opt.zero_grad()
                    loss_fn(model(x), y).backward()
                    opt.step()
                if size:
                    with phase("replay_draw"):
                        idx = torch.randperm(size, device=device)[:10]
                        rx, ry = bx[idx], by[idx]
                    with phase("train_steps"):
                        opt.zero_grad()
                        loss_fn(model(rx), ry).backward()
                        opt.step()
            with phase("selection"):
                for k in range(len(y)):  # Vitter's Algorithm R
                    if size < m:
                        bx[size], by[size] = x[k], y[k]
                        size += 1
                    else:
                        j = rng.randint(0, seen)
                        if j < m:
                            bx[j], by[j] = x[k], y[k]
                    seen += 1
    _sync(device)
    return time.perf_counter() - start, _evaluate(model, split, device, timer or NoTimer())


def run_avalanche(split: Any, seed: int, m: int, n_iter: int, device: str,
                  storage: Any = None) -> tuple[float, float]:
    from avalanche.benchmarks.scenarios.online import split_online_stream
    from avalanche.training import Naive
    from avalanche.training.plugins import EvaluationPlugin, ReplayPlugin
    from avalanche.training.storage_policy import ReservoirSamplingBuffer

    storage = storage if storage is not None else ReservoirSamplingBuffer(m)
    model = _model(seed, device)
    bench = online_benchmark(split, batch_size=10)
    stream = split_online_stream(bench.task_stream, 10, shuffle=False,
                                 access_task_boundaries=False, seed=seed)
    replay = ReplayPlugin(mem_size=m, batch_size=10, batch_size_mem=10, storage_policy=storage)
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                     train_mb_size=10, train_epochs=n_iter, plugins=[replay],
                     evaluator=EvaluationPlugin(), device=device)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for exp in stream:
            strategy.train(exp)
    _sync(device)
    return time.perf_counter() - start, _accuracy(model, split, device)


def run_avalanche_ours(split: Any, seed: int, m: int, n_iter: int, device: str
                       ) -> tuple[float, float]:
    return run_avalanche(split, seed, m, n_iter, device, ReservoirBuffer(m, seed=seed))


def run_avalanche_gss(split: Any, seed: int, m: int, n_iter: int, device: str
                      ) -> tuple[float, float]:
    from avalanche.training import GSS_greedy
    from avalanche.training.plugins import EvaluationPlugin

    model = _model(seed, device)
    bench = online_benchmark(split, batch_size=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strategy = GSS_greedy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                              criterion=nn.CrossEntropyLoss(), mem_size=m, mem_strength=10,
                              input_size=list(split.input_shape), train_mb_size=10,
                              train_epochs=n_iter, evaluator=EvaluationPlugin(),
                              device=device)
        start = time.perf_counter()
        for exp in bench.task_stream:
            strategy.train(exp)
    _sync(device)
    return time.perf_counter() - start, _accuracy(model, split, device)


_resnet_library = partial(run_library, arch="resnet")
_resnet_floor = partial(run_floor, arch="resnet")


def _with_la(cls: Any) -> Callable[..., Any]:
    """``cls`` trained with a fresh :class:`LogitAdjustedLoss` (its own window) per run."""
    return lambda **kw: cls(criterion=LogitAdjustedLoss(), **kw)


def _with_ace(cls: Any) -> Callable[..., Any]:
    """``cls`` trained with ER-ACE's loss in ER's joint step, a fresh loss per run."""
    return lambda **kw: cls(criterion=AsymmetricCrossEntropy(), joint=True, **kw)


def _with_mkd(cls: Any) -> Callable[..., Any]:
    """``cls`` with a fresh :class:`MKDPlugin` (the defaults) per run."""
    return lambda **kw: cls(plugins=[MKDPlugin()], **kw)


CASES: dict[str, dict[str, Callable[..., tuple[float, float]]]] = {
    "reservoir-mlp-disjoint": {
        "library": run_library, "floor": run_floor, "avalanche": run_avalanche,
        "avalanche-ours": run_avalanche_ours,
    },
    "gss-greedy-mlp-disjoint": {
        "library": partial(run_library, cls=partial(GSSGreedy, variant="paper")),
        "floor": run_floor, "avalanche": run_avalanche_gss,
    },
    "gss-greedy-authors-mlp-disjoint": {
        "library": partial(run_library, cls=partial(GSSGreedy, variant="authors")),
        "floor": run_floor,
    },
    "cbrs-mlp-disjoint": {"library": partial(run_library, cls=CBRS), "floor": run_floor},
    "cbrs-oc-mlp-disjoint": {"library": partial(run_library,
                                                cls=partial(CBRS, retrieval="other-classes")),
                             "floor": run_floor},
    "cb-gss-mlp-disjoint": {"library": partial(run_library, cls=CBGSS), "floor": run_floor},
    "cb-gss-step-mlp-disjoint": {
        "library": partial(run_library, cls=partial(CBGSS, score_from="step")),
        "floor": run_floor},
    "cbrs-oc-la-mlp-disjoint": {"library": partial(run_library, cls=_with_la(
        partial(CBRS, retrieval="other-classes"))), "floor": run_floor},
    "cb-gss-step-la-mlp-disjoint": {"library": partial(run_library, cls=_with_la(
        partial(CBGSS, score_from="step"))), "floor": run_floor},
    "reservoir-joint-mlp-disjoint": {
        "library": partial(run_library, cls=partial(Reservoir, joint=True)), "floor": run_floor},
    "er-ace-mlp-disjoint": {"library": partial(run_library, cls=_with_ace(Reservoir)),
                            "floor": run_floor},
    "er-mkd-mlp-disjoint": {"library": partial(run_library, cls=_with_mkd(Reservoir)),
                            "floor": run_floor},
    "csrel-mlp-disjoint": {"library": partial(run_library, cls=CSReL), "floor": run_floor},
    "cbrs-oc-ace-mlp-disjoint": {"library": partial(run_library, cls=_with_ace(
        partial(CBRS, retrieval="other-classes"))), "floor": run_floor},
    "cbrs-oc-la-mkd-mlp-disjoint": {"library": partial(run_library, cls=_with_mkd(_with_la(
        partial(CBRS, retrieval="other-classes")))), "floor": run_floor},
    "ocs-mlp-disjoint": {"library": partial(run_library, cls=OCS), "floor": run_floor},
    "gcr-mlp-disjoint": {"library": partial(run_library, cls=GCR), "floor": run_floor},
    "reservoir-resnet-cifar": {"library": _resnet_library, "floor": _resnet_floor},
    "gss-greedy-resnet-cifar": {"library": partial(_resnet_library, cls=GSSGreedy),
                                "floor": _resnet_floor},
    "gss-iqp-resnet-cifar": {"library": partial(_resnet_library, cls=GSSIQP),
                             "floor": _resnet_floor},
}
DEFAULT_CASES = [c for c in CASES if "resnet" not in c]  # the ResNet cases are opt-in
PHASED = ("library", "floor")  # the impls --phases times


def _arch(case: str) -> str:
    return "resnet" if "resnet" in case else "mlp"


def _data(arch: str, args: argparse.Namespace, cache: dict[str, Any]) -> tuple[Any, int]:
    """The case's dataset (loaded once) and its training samples per task."""
    per_task = args.samples_per_task or DEFAULTS[arch]["samples_per_task"]
    if arch not in cache:
        if arch == "resnet":  # 5 tasks of 2 classes: half a task's samples per class
            cache[arch] = synthetic_images(train_per_class=-(-per_task // 2),
                                           test_per_class=args.test_per_class)
        else:
            cache[arch] = load_dataset(args.data)
    data = cache[arch]
    per_task = min(per_task, min(int((data.y_train == c).sum()) for c in data.classes) * 2)
    return data, per_task


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--repeats", type=int, default=3, help="runs per impl (seeds 0..R-1)")
    parser.add_argument("--buffer-size", type=int, default=None,
                        help="M (default: 300 for the MLP cases, 1000 for the ResNet ones)")
    parser.add_argument("--n-iter", type=int, default=3)
    parser.add_argument("--data", default="mnist", help="the MLP cases' data")
    parser.add_argument("--cases", nargs="+", default=DEFAULT_CASES, choices=list(CASES),
                        help="default: the MLP cases (the ResNet ones are opt-in)")
    parser.add_argument("--impls", nargs="+", default=["library", "floor", "avalanche"],
                        choices=["library", "floor", "avalanche", "avalanche-ours"],
                        help="a case runs the impls it has")
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when present, else cpu) | cpu | cuda | cuda:N")
    parser.add_argument("--samples-per-task", type=int, default=None,
                        help="default 1000 (MLP; capped by what the data hold: 800 with the "
                        "offline digits) and 2000 (ResNet)")
    parser.add_argument("--test-per-class", type=int, default=100,
                        help="test samples per class of the ResNet cases' stand-in")
    parser.add_argument("--phases", action="store_true",
                        help="also time each phase (syncs at every phase edge on CUDA)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: batches of 10 gain nothing from more)")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ValueError as err:
        parser.error(f"argument --device: {err}")
    impls = list(dict.fromkeys(args.impls))
    torch.set_num_threads(args.threads)
    datasets: dict[str, Any] = {}
    records = []
    for arch in dict.fromkeys(_arch(case) for case in args.cases):
        warm_up(arch, device)
    for case in args.cases:
        arch = _arch(case)
        data, per_task = _data(arch, args, datasets)
        m = args.buffer_size or DEFAULTS[arch]["buffer_size"]
        chosen = [i for i in impls if i in CASES[case]]
        runs: dict[str, tuple[list[float], list[float], list[dict[str, float]]]] = {
            impl: ([], [], []) for impl in chosen}
        # Seed by seed, every impl in turn: a drift of the machine's speed during the
        # case then hits the library and the floor alike.
        for seed in range(args.repeats):
            split = disjoint_tasks(data, samples_per_task=per_task, seed=seed)
            for impl in chosen:
                extra: dict[str, Any] = {}
                if args.phases and impl in PHASED:
                    extra["timer"] = PhaseTimer(device)
                seconds, acc = CASES[case][impl](split, seed, m, args.n_iter, device, **extra)
                runs[impl][0].append(seconds)
                runs[impl][1].append(acc)
                if extra:
                    runs[impl][2].append(extra["timer"].close(seconds))
        for impl in chosen:
            times, accs, phases = runs[impl]
            record = {
                "case": case, "impl": impl, "median_ms": 1000 * statistics.median(times),
                "times_ms": [1000 * t for t in times], "repeats": args.repeats,
                "samples": sum(split.train_sizes), "buffer_size": m,
                "n_iter": args.n_iter, "avg_accuracy": statistics.fmean(accs),
                "accuracies": accs, "data_source": data.source, "device": device,
            }
            if arch == "resnet":
                record.update(model="reduced ResNet-18 (GEM, nf=20)", lr=LR[arch])
            if phases:
                record["phases_ms"] = {k: 1000 * statistics.median(p[k] for p in phases)
                                       for k in phases[0]}
                record["phases_note"] = ("--phases run: on CUDA a sync at every phase edge "
                                         "inflates times_ms; compare plain runs' median_ms")
            records.append(record)
    print(f"{'case':<31} {'impl':<14} {'median ms':>10} {'x floor':>8} {'avg acc':>8}")
    for r in records:
        floor = next((f["median_ms"] for f in records
                      if f["impl"] == "floor" and f["case"] == r["case"]), None)
        if floor:
            r["ratio_vs_floor"] = r["median_ms"] / floor
        ratio = f"{r['median_ms'] / floor:8.2f}" if floor else f"{'-':>8}"
        print(f"{r['case']:<31} {r['impl']:<14} {r['median_ms']:10.1f} {ratio} "
              f"{r['avg_accuracy']:8.2f}")
    if args.phases:
        print("\nper phase, ms (median over repeats; --phases syncs at each edge on CUDA)")
        print(table(records))
    accel = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    machine = (f"{platform.node()} {platform.machine()} {platform.processor() or ''} "
               f"torch {torch.__version__} threads {torch.get_num_threads()}; "
               f"device {accel}").strip()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "online_throughput", "machine": machine, "records": records},
                      f, indent=1)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
