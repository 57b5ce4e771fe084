"""``python -m reproduce <experiment>``: the paper's tables from this library (Contract 1)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
from typing import Any

import torch

from avalanche_gss.experiments import (
    BUFFER_METHODS,
    METHODS,
    TASK_AWARE,
    VARIANT_METHODS,
    VARIANTS,
    RunResult,
    RunSettings,
)
from avalanche_gss.experiments import run as run_one
from avalanche_gss.metrics import buffer_metrics
from avalanche_gss.paper import PAPER_AVERAGES, PAPER_TABLES
from avalanche_gss.reporting import rows_from_runs, write_outputs
from avalanche_gss.sweep import config_key, run_sweep
from reproduce.common import command, load, resolve_data, settings_for
from reproduce.composition import composition
from reproduce.figures import FIGURES
from reproduce.protocols import METHOD_OVERRIDES, PROTOCOLS, Protocol

log = logging.getLogger("reproduce")

RESULTS_VERSION = 1
"""Bump when a change makes cached results stale (it is part of every run's cache key)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m reproduce", description=__doc__)
    parser.add_argument("experiment", choices=sorted([*PROTOCOLS, *FIGURES, "composition"]))
    parser.add_argument("--data", default=None,
                        help="mnist | mnist-5k | cifar10 | PATH.npz (default: the experiment's)")
    parser.add_argument("--root", default=None, help="torchvision data root")
    parser.add_argument("--download", action="store_true",
                        help="let torchvision download the dataset (needs internet)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--buffer-sizes", nargs="+", type=int, default=None)
    parser.add_argument("--n-iter", type=int, default=None, help="iterations per batch")
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--out", default="results", help="output folder")
    parser.add_argument("--quick", action="store_true", help="a short version of the run")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=1, help="runs in parallel processes")
    parser.add_argument("--cache", default=None,
                        help="finished runs are kept here, keyed by their full configuration, "
                        "so a stopped sweep resumes (default: OUT/cache/EXPERIMENT)")
    parser.add_argument("--launcher", choices=("local", "submitit"), default="local",
                        help="submitit: send the runs to a SLURM cluster")
    parser.add_argument("--tensorboard", default=None, metavar="DIR",
                        help="log each buffer method's buffer composition (per class and "
                        "task) and surrogate value every 100 batches to TensorBoard under DIR")
    parser.add_argument("--cluster", default=None,
                        help="submitit cluster (slurm, local, debug; default: auto)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="GSS-Greedy, GSS-Clust and FSS-Clust as the paper writes them "
                        "(paper) and/or as the authors' code does them (authors); each is "
                        "its own row")
    return parser.parse_args(argv)


def plan(args: argparse.Namespace, protocol: Protocol) -> tuple[list[dict[str, Any]], dict]:
    """List the runs to do (``variant``, ``row`` keys, ``settings``) and the choices used."""
    chosen: dict[str, Any] = {
        "methods": protocol.methods, "buffer_sizes": protocol.buffer_sizes,
        "seeds": protocol.seeds, "variants": protocol.variants,
    }
    if args.quick:
        chosen.update(protocol.quick)
    for key in ("methods", "buffer_sizes", "seeds"):
        if getattr(args, key) is not None:
            chosen[key] = tuple(getattr(args, key))
    runs = []
    stream_extra = ({"samples_per_task": chosen["samples_per_task"]}
                    if "samples_per_task" in chosen else {})
    for variant in chosen["variants"]:
        for seed in chosen["seeds"]:
            for method in chosen["methods"]:
                flavours: list[dict[str, Any]] = list(protocol.flavours.get(method, ({},)))
                if method in VARIANT_METHODS:
                    flavours = [{**f, "variant": v} for f in flavours for v in args.variants]
                for flavour in flavours:
                    row = {**variant, **flavour}
                    for m in chosen["buffer_sizes"]:
                        runs.append({"variant": {**variant, **stream_extra}, "row": row,
                                     "settings": settings_for(args, protocol, method,
                                                              buffer_size=m, seed=seed,
                                                              **flavour)})
    return runs, chosen


def run_job(config: dict[str, Any]) -> dict[str, Any]:
    """One run of a sweep (module-level, so worker processes and submitit can pickle it).

    :param config: ``experiment``, ``data``, ``root``, ``download``, ``variant`` (the
        stream's row keys) and ``settings`` (a :class:`RunSettings` as a dict).
    :return: the :class:`RunResult` as a dict.
    """
    data = load(config["data"], config["root"], config["download"])
    settings = RunSettings(**config["settings"])
    split = PROTOCOLS[config["experiment"]].stream(data, settings.seed, config["variant"])
    metrics: list[Any] = []
    loggers: list[Any] = []
    if config.get("tensorboard") and settings.method in BUFFER_METHODS:
        from avalanche.logging import TensorboardLogger

        task_of_class = ({c: t for t, classes in enumerate(split.task_classes) for c in classes}
                         if split.is_class_disjoint else None)
        metrics = buffer_metrics(every=100, task_of_class=task_of_class)
        loggers = [TensorboardLogger(config["tensorboard"])]
    return run_one(settings, split, metrics=metrics, loggers=loggers).to_dict()


def _bufferless(settings: RunSettings) -> bool:
    return settings.method in ("Single", "iid-online", "iid-offline")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if args.experiment in FIGURES:
        return FIGURES[args.experiment](args)
    if args.experiment == "composition":
        return composition(args)
    protocol = PROTOCOLS[args.experiment]
    data_name, data = resolve_data(args, protocol)
    runs, chosen = plan(args, protocol)
    # Methods without a buffer give the same run for every buffer size: run them once.
    configs = []
    for r in runs:
        s = r["settings"]
        base = (dataclasses.replace(s, buffer_size=chosen["buffer_sizes"][0])
                if _bufferless(s) else s)
        config = {"version": RESULTS_VERSION, "experiment": args.experiment,
                  "data": data_name, "root": args.root, "download": args.download,
                  "variant": r["variant"], "settings": dataclasses.asdict(base)}
        if args.tensorboard:  # a logged run is its own job: its side effect differs
            tag = "-".join([base.method, base.variant, base.update, f"M{base.buffer_size}",
                            f"seed{base.seed}", *(f"{k}{v}" for k, v in r["variant"].items())])
            config["tensorboard"] = os.path.join(args.tensorboard, args.experiment, tag)
        configs.append(config)
    log.info("%s: %d runs on %s (%s)", args.experiment, len({config_key(c) for c in configs}),
             data.name, data.source)
    start = time.perf_counter()
    cache_dir = args.cache or os.path.join(args.out, "cache", args.experiment)
    if args.workers == 1 and args.launcher == "local":
        torch.set_num_threads(1)  # batches of 10: more threads only add contention
    results = run_sweep(configs, run_job, cache_dir=cache_dir, workers=args.workers,
                        launcher=args.launcher, cluster=args.cluster)
    pairs = []
    for r, result in zip(runs, results, strict=True):
        res = RunResult(settings=r["settings"], task_accuracy=result["task_accuracy"],
                        avg=result["avg"], train_seconds=result["train_seconds"],
                        extras=result["extras"])
        pairs.append((r["row"], res))
    sample_split = protocol.stream(data, chosen["seeds"][0], runs[0]["variant"])
    report = {
        "experiment": args.experiment,
        "title": protocol.title,
        "dataset": data.name,
        "data_source": data.source,
        "command": command(argv),
        "protocol": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items()},
            "method_variants": list(args.variants),
            "stream": {k: v for k, v in sample_split.protocol.items() if k != "deviations"},
            "deviations": sample_split.protocol.get("deviations", []),
            "lr": protocol.lr, "n_iter": protocol.n_iter, "model": protocol.model,
            "method_overrides": METHOD_OVERRIDES,
            "batch_size": 10, "replay_batch_size": 10,
            "task_aware": [m for m in chosen["methods"] if m in TASK_AWARE],
            "quick": args.quick,
        },
        "rows": rows_from_runs(pairs),
        "wall_seconds": time.perf_counter() - start,
    }
    if protocol.columns_by == "buffer_size":
        columns = [(f"M={m}", m) for m in chosen["buffer_sizes"]]
    else:
        columns = [(f"Seq{v[protocol.columns_by]}", v[protocol.columns_by])
                   for v in chosen["variants"]]
    paper = PAPER_TABLES.get(args.experiment, {})
    paths = write_outputs(report, args.out, columns=columns, row_key=protocol.columns_by,
                          paper=paper, paper_avg=PAPER_AVERAGES.get(args.experiment))
    with open(paths["md"]) as f:
        print(f.read())
    print("Wrote " + ", ".join(paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
