"""What every ``python -m reproduce`` experiment shares: data, run settings, the command."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from avalanche_gss.benchmarks import ArrayDataset, load_dataset, synthetic_images
from avalanche_gss.experiments import BUFFER_METHODS, RunSettings
from reproduce.protocols import METHOD_OVERRIDES, Protocol

log = logging.getLogger("reproduce")

STANDIN = "cifar10-standin"
"""The generated stand-in used by ``--quick`` when CIFAR-10 cannot be loaded."""

_DATA: dict[tuple[Any, ...], ArrayDataset] = {}


def load(name: str, root: str | None, download: bool) -> ArrayDataset:
    """Load a dataset once per process (``cifar10-standin``: the generated stand-in)."""
    key = (name, root, download)
    if key not in _DATA:
        if name == STANDIN:
            _DATA[key] = synthetic_images(STANDIN, shape=(3, 32, 32), num_classes=10,
                                          train_per_class=100, test_per_class=50)
        else:
            _DATA[key] = load_dataset(name, root=root, download=download)
    return _DATA[key]


def resolve_data(args: argparse.Namespace, protocol: Protocol) -> tuple[str, ArrayDataset]:
    """The dataset to use: ``--data``, the protocol's, or (``--quick`` only) the stand-in."""
    name = args.data or protocol.dataset
    try:
        return name, load(name, args.root, args.download)
    except FileNotFoundError as err:
        if not (protocol.standin and args.quick and args.data is None):
            raise SystemExit(f"{err}\nGive --root with the data, or --download (needs "
                             "internet); --quick falls back to a generated stand-in.") from err
        log.warning("%s; --quick runs on a generated stand-in instead (not CIFAR-10)", err)
        return STANDIN, load(STANDIN, None, False)


def settings_for(args: argparse.Namespace, protocol: Protocol, method: str,
                 **fields: Any) -> RunSettings:
    """Return a run's settings.

    The protocol's, then the authors' per-method overrides, then the command line's
    ``--lr``/``--n-iter``/``--device``, then ``fields``.
    """
    values: dict[str, Any] = {"lr": protocol.lr, "n_iter": protocol.n_iter,
                              "device": args.device, "model": protocol.model}
    values.update(METHOD_OVERRIDES.get(method, {}))
    if args.n_iter is not None and method in BUFFER_METHODS:
        values["n_iter"] = args.n_iter
    if args.lr is not None:
        values["lr"] = args.lr
    values.update(fields)
    return RunSettings(method=method, **values)


def command(argv: Sequence[str] | None = None) -> str:
    """The command line, as it is recorded in every output."""
    words = sys.argv[1:] if argv is None else argv
    return "python -m reproduce " + " ".join(shlex.quote(a) for a in words)
