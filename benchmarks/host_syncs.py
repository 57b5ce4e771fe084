"""Count the calls of an online run that would make the host wait for a GPU.

A ``torch.overrides.TorchFunctionMode`` sees every torch call of the run (it intercepts
``Tensor.item``, ``__bool__``, ``__int__``, ``__float__``, ``__index__``, ``tolist``,
``cpu``, ``to``, indexing, ``nonzero``, ...) and keeps track of which tensors would live on
the device in a GPU run and which on the host, so the count is the same on a CPU-only
machine as on a GPU one. On a GPU, ``torch.cuda.set_sync_debug_mode("warn")`` gives the
real list (``--cuda-debug`` checks it there).

Host tensors: the stream's data before it is moved, and whatever is made from host tensors
only (a factory called without ``device=``, a draw from a CPU generator, ``.cpu()``).
Every other tensor (the model's parameters and their gradients, factories called with
``device=``, anything computed from a device tensor) is a device tensor. Counted as syncs:

- ``read``: a device value read by the host (``item``, ``bool``, ``int``, ``float``,
  ``__index__``, ``tolist``, ``numpy``, ``cpu``);
- ``shape``: an op whose output size depends on device values (``nonzero``, ``unique``,
  ``masked_select``, boolean-mask indexing, ...);
- ``h2d``: a blocking host-to-device copy (``.to(device)`` without ``non_blocking=True``,
  ``torch.tensor(..., device=)``, a device tensor indexed with a host index tensor),
  which synchronises the stream in PyTorch.

Known blind spot: ``.to(torch.device("cpu"))`` of a device tensor is taken for a move to
the run's device (on a CPU machine the two are the same object); ``.to("cpu")`` with the
string is counted as a read.

Run: ``python benchmarks/host_syncs.py [--methods Reservoir GSS-Greedy GSS-IQP] [--model
mlp|resnet] [--device cpu|cuda]``; it prints the syncs per online batch with their
``file:line`` and writes them with ``--json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakTensorKeyDictionary

REPO = Path(__file__).resolve().parents[1]
_TORCH_DIR = str(Path(torch.__file__).parent)
_READS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist", "numpy", "cpu"}
_SHAPES = {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select",
           "bincount", "repeat_interleave", "nonzero_static"}
_INDEXING = {"__getitem__", "__setitem__", "index_select", "index_put_", "index_put",
             "gather", "scatter", "scatter_", "index_copy_", "index_add_", "take"}
_FACTORIES_COPYING = {"tensor", "as_tensor"}


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _where() -> str:
    """``file:line (function)`` of the innermost caller outside torch and this file."""
    for frame in reversed(traceback.extract_stack()):
        name = frame.filename
        if name.startswith(_TORCH_DIR) or name == __file__:
            continue
        short = name
        for root in (str(REPO) + "/", "site-packages/"):
            if root in name:
                short = name.split(root, 1)[1]
        return f"{short}:{frame.lineno} ({frame.name})"
    return "?"


class SyncCounter(TorchFunctionMode):
    """Record the calls that would synchronise a GPU, by kind and place.

    :param host: tensors that live on the host in a GPU run (the stream's data).
    """

    def __init__(self, host: list[torch.Tensor] = ()) -> None:  # type: ignore[assignment]
        super().__init__()
        self._host: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        for t in host:
            self._host[t] = True
        self.events: list[tuple[str, str, str]] = []  # (kind, op, where)

    def is_host(self, t: torch.Tensor) -> bool:
        """Whether ``t`` would be a host tensor in a GPU run."""
        return t in self._host

    def __enter__(self) -> SyncCounter:
        # the library's host-or-device branches follow this model of a GPU run
        import avalanche_gss._host as host

        self._on_host = host.on_host
        host.on_host = lambda *tensors: all(self.is_host(t) for t in tensors)
        return super().__enter__()  # type: ignore[no-any-return]

    def __exit__(self, *exc: Any) -> None:
        import avalanche_gss._host as host

        host.on_host = self._on_host
        super().__exit__(*exc)

    def _note(self, kind: str, op: str) -> None:
        self.events.append((kind, op, _where()))

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        ins = _tensors(args) + _tensors(kwargs)
        on_host = [self.is_host(t) for t in ins]
        out = func(*args, **kwargs)
        result_host = self._classify(name, args, kwargs, ins, on_host)
        if ins and out is ins[0] and result_host != on_host[0]:
            out = out.view_as(out)  # a move that is a no-op here: a new object to tag
        for t in _tensors(out):
            if result_host:
                self._host[t] = True
        return out

    def _classify(self, name: str, args: Any, kwargs: dict[str, Any],
                  ins: list[torch.Tensor], on_host: list[bool]) -> bool:
        """Note the call's syncs; return whether its tensor results are host tensors."""
        device_in = [t for t, h in zip(ins, on_host, strict=True) if not h]
        to_cpu = name == "to" and any(isinstance(a, str) and a == "cpu" for a in args[1:])
        if name in _READS or to_cpu:
            if device_in and ins and not on_host[0]:
                self._note("read", name)
            return True
        if name in ("to", "cuda"):
            target = [a for a in args[1:] if isinstance(a, (str, torch.device, torch.Tensor))]
            if kwargs.get("device") is not None:
                target.append(kwargs["device"])
            if not target:  # a dtype change: stays where it is
                return bool(on_host and on_host[0])
            if isinstance(target[0], torch.Tensor) and self.is_host(target[0]):
                return bool(on_host[0])
            if on_host and on_host[0] and not kwargs.get("non_blocking") and ins[0].dim():
                self._note("h2d", name)
            return False
        if not ins:  # a factory: on the device only when told so
            device = kwargs.get("device")
            if device is not None and name in _FACTORIES_COPYING:
                self._note("h2d", name)
            return device is None
        if not device_in:
            return True
        if name in _SHAPES:
            self._note("shape", name)
        elif name in _INDEXING:
            index = _tensors(args[1:2]) + _tensors(kwargs.get("index"))
            if any(t.dtype == torch.bool and not self.is_host(t) for t in index):
                self._note("shape", f"{name}[mask]")
            elif any(self.is_host(t) and t.dim() for t in index):
                self._note("h2d", f"{name}[host index]")
            elif name == "__setitem__" and any(
                    self.is_host(t) and t.dim() for t in _tensors(args[2:3])):
                self._note("h2d", "__setitem__ host value")
        return False


def _stream(model_name: str, n_batches: int, seed: int) -> tuple[Any, Any]:
    from avalanche_gss.streams import (
        disjoint_tasks,
        load_dataset,
        online_benchmark,
        synthetic_images,
    )
    if model_name == "resnet":
        data = synthetic_images(train_per_class=n_batches * 5, test_per_class=1)
    else:
        data = load_dataset("mnist-5k")
    split = disjoint_tasks(data, n_tasks=1, samples_per_task=10 * n_batches, seed=seed)
    return split, list(online_benchmark(split, batch_size=10).train_stream)


def _host_state(buffer: Any) -> list[torch.Tensor]:
    """The buffer's host tensors: its provenance columns and index, the recent rows'."""
    found = [v for k, v in vars(buffer).items() if isinstance(v, torch.Tensor)]
    found += [v for k, v in vars(buffer.store).items()
              if isinstance(v, torch.Tensor) and k not in ("x", "y", "t", "scores")]
    found += [v for v in vars(buffer.sources._view).values() if isinstance(v, torch.Tensor)]
    recent = getattr(buffer, "recent", None)
    if recent is not None:
        found += [recent.src, recent.idx, recent.plain]
    return found


def count_run(method: str, *, model: str = "mlp", device: str = "cpu", warmup: int = 12,
              batches: int = 4, n_iter: int = 3, mem_size: int = 50, seed: int = 0
              ) -> dict[str, Any]:
    """Train ``warmup`` online batches, then count the syncs of ``batches`` more.

    :param method: a registry method (``"Reservoir"``, ``"GSS-Greedy"``, ``"CB-GSS"``,
        ...), its ready strategy with default options (GSS-IQP's recent buffer is made 20
        so that a merge falls in the counted batches).
    :return: ``{"method", "batches", "syncs", "per_batch", "events": {where: {kind: n}}}``.
    """
    from avalanche_gss import methods
    from avalanche_gss.models import MLP, make_model

    options = {"recent_size": 20} if method == "GSS-IQP" else {}
    torch.manual_seed(seed)
    net = make_model("resnet18", (3, 32, 32), 10) if model == "resnet" else MLP()
    net = net.to(device)
    strategy = methods.get(method).strategy(
        model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.05), mem_size=mem_size,
        n_iter=n_iter, seed=seed, device=device, **options)
    split, stream = _stream(model, warmup + batches, seed)
    strategy.train(stream[:warmup])
    counted = stream[warmup:]
    host = [t for exp in counted for t in exp.tensors] + _host_state(strategy.storage_policy)
    with SyncCounter(host) as counter:
        strategy.train(counted)
    places: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for kind, op, where in counter.events:
        places[where][f"{kind}:{op}"] += 1
    n = len(counter.events)
    return {"method": method, "model": model, "batches": len(counted), "n_iter": n_iter,
            "syncs": n, "per_batch": n / len(counted),
            "events": {w: dict(c) for w, c in sorted(places.items())}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["Reservoir", "GSS-Greedy", "GSS-IQP"])
    parser.add_argument("--model", default="mlp", choices=["mlp", "resnet"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--cuda-debug", action="store_true",
                        help="on CUDA: also let torch.cuda.set_sync_debug_mode('warn') list "
                        "the real syncs of one counted run (printed by PyTorch)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    results = []
    for method in args.methods:
        if args.cuda_debug and args.device.startswith("cuda"):
            torch.cuda.set_sync_debug_mode("warn")
        result = count_run(method, model=args.model, device=args.device, batches=args.batches)
        if args.cuda_debug and args.device.startswith("cuda"):
            torch.cuda.set_sync_debug_mode(0)
        results.append(result)
        print(f"{method}: {result['syncs']} syncs over {result['batches']} online batches "
              f"(n_iter {result['n_iter']}): {result['per_batch']:.1f} per batch")
        for where, kinds in result["events"].items():
            print(f"  {where}: " + ", ".join(f"{k} x{v}" for k, v in kinds.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "host_syncs", "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
