"""The table experiments of ``python -m reproduce`` (and the dispatch to the figures).

A table is a sweep of runs (:func:`avalanche_gss.reproduce.jobs.run_job`), cached by everything that
determines a run's result, then grouped into rows and written as JSON, CSV and Markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from avalanche_gss.experiments import (
    BUFFER_METHODS,
    TASK_AWARE,
    VARIANT_METHODS,
    RunResult,
    RunSettings,
    default_retrieval,
    resolve_device,
    run_label,
    settings_dict,
)
from avalanche_gss.models import make_model
from avalanche_gss.paper import PAPER_AVERAGES, PAPER_TABLES
from avalanche_gss.reporting import DIVERGED_SHARE, provenance, rows_from_runs, write_outputs
from avalanche_gss.reproduce.common import (
    code_identity,
    command,
    data_fields,
    data_identity,
    method_code,
    resolve_data,
    settings_by_method,
    settings_for,
)
from avalanche_gss.reproduce.jobs import run_job
from avalanche_gss.reproduce.protocols import PROTOCOLS, Protocol
from avalanche_gss.sweep import SweepError, UncachedResultWarning, config_key, run_sweep

log = logging.getLogger("reproduce")

RESULTS_VERSION = 2
"""Bump when a change makes cached results stale (it is part of every run's cache key)."""

_PROG = "python -m reproduce"

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
                if method in BUFFER_METHODS:
                    flavours = [r for f in flavours for r in _retrievals(args, method, f)]
                for flavour in flavours:
                    row = {**variant, **flavour}
                    extra = ({"mir_candidates": args.mir_candidates}
                             if flavour.get("retrieval") == "mir" and args.mir_candidates
                             else {})
                    for m in chosen["buffer_sizes"]:
                        runs.append({"variant": {**variant, **stream_extra}, "row": row,
                                     "settings": settings_for(args, protocol, method,
                                                              buffer_size=m, seed=seed,
                                                              **flavour, **extra)})
    return runs, chosen


def _retrievals(args: argparse.Namespace, method: str, flavour: dict[str, Any]
                ) -> list[dict[str, Any]]:
    """A buffer method's rehearsal rows, one per ``--retrieval`` (none given: one row).

    The method's own retrieval (:func:`default_retrieval`) has no row key; any other is
    the row's ``retrieval``. A constrained update has no replay batch: its row stays as
    it is.
    """
    if flavour.get("update", "rehearsal") != "rehearsal":
        return [flavour]
    own = default_retrieval(method)
    return [flavour if r in (None, own) else {**flavour, "retrieval": r}
            for r in args.retrieval or [None]]


def _bufferless(method: str) -> bool:
    return method in ("Single", "iid-online", "iid-offline")


def _job_configs(args: argparse.Namespace, runs: list[dict[str, Any]], chosen: dict[str, Any],
                 data_name: str, identity: dict[str, str]) -> list[dict[str, Any]]:
    configs = []
    for r in runs:
        s = r["settings"]
        # Methods without a buffer give the same run for every buffer size: run them once.
        base = (dataclasses.replace(s, buffer_size=chosen["buffer_sizes"][0])
                if _bufferless(s.method) else s)
        config = {"version": RESULTS_VERSION, **code_identity(),
                  "experiment": args.experiment, "data": data_name, "root": args.root,
                  "download": args.download, **identity, "threads": args.threads,
                  "variant": r["variant"], "settings": settings_dict(base),
                  **method_code(base.method)}
        if args.tensorboard:  # a logged run is its own job: its side effect differs
            tag = "-".join([run_label(base), *(f"{k}{v}" for k, v in r["variant"].items())])
            config["tensorboard"] = os.path.join(args.tensorboard, args.experiment, tag)
        configs.append(config)
    return configs


def check_model(data: Any, runs: Sequence[dict[str, Any]]) -> None:
    """Refuse, before any run, a model that cannot train on the smallest batch a run sees.

    A buffer of one sample replays batches of one; a network whose BatchNorm then sees one
    value per channel (e.g. ResNet-18 on 8x8 images) would fail in every run.
    """
    smallest: dict[str, int] = {}
    for r in runs:
        s = r["settings"]
        batch = min(s.batch_size, s.replay_batch_size, s.buffer_size)
        smallest[s.model] = min(batch, smallest.get(s.model, batch))
    for name, batch in smallest.items():
        with torch.random.fork_rng(devices=[]):
            model = make_model(name, data.input_shape, data.num_classes)
        model.train()
        try:
            model(data.x_train[:batch])
        except (RuntimeError, ValueError) as err:
            raise ValueError(
                f"the {name} model cannot train on a batch of {batch} sample(s) of shape "
                f"{tuple(data.input_shape)} ({' '.join(str(err).split())}); use larger "
                "inputs or buffer sizes") from None


def check_buffer_sizes(sizes: Sequence[int] | None, data: Any, name: str) -> None:
    """Refuse, before any run, a buffer size (``--buffer-sizes``) above the data's training set.

    :param sizes: the buffer sizes the command line gives (``None``: the experiment's own).
    :param data: the loaded data (an ``ArrayDataset``).
    :param name: the data as the command line names them.
    :raises ValueError: naming the first size too large and the bound.
    """
    samples = len(data.y_train)
    too_large = [m for m in sizes or () if m > samples]
    if too_large:
        raise ValueError(f"{too_large[0]} is more than the {samples} training samples of "
                         f"{name}; give at most {samples}")


_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)


def _unwritten(err: OSError, out: str) -> int:
    """Report, in one line naming the file, an output that could not be written; exit status.

    :raises OSError: ``err`` again when it names no file and is no disk or permission error.
    """
    where = err.filename2 or err.filename
    reason = " ".join((err.strerror or str(err)).split())
    if where is not None:
        line = f"{os.fsdecode(where)}: {reason}"
    elif reason.startswith("cannot write "):  # the atomic writer names its file
        line = reason
    elif err.errno in _DISK_ERRORS:
        line = f"--out {out}: {reason}"
    else:
        raise err
    print(f"{_PROG}: error: {line}", file=sys.stderr)
    return 1


def _one_line_cache_warnings() -> None:
    """Show a result that could not be cached as one line naming the file (command line only)."""
    shown = warnings.formatwarning
    if getattr(shown, "one_line_cache_warnings", False):
        return  # installed by an earlier command in this process

    def formatwarning(message: Warning | str, category: type[Warning], filename: str,
                      lineno: int, line: str | None = None) -> str:
        if issubclass(category, UncachedResultWarning):
            return f"{_PROG}: warning: {message}\n"
        return shown(message, category, filename, lineno, line)

    formatwarning.one_line_cache_warnings = True  # type: ignore[attr-defined]
    warnings.formatwarning = formatwarning


def _label(config: dict[str, Any]) -> str:
    try:
        return run_label(RunSettings(**config["settings"]))
    except (KeyError, TypeError, ValueError):
        return f"job {config_key(config)[:12]}"


def _failed(err: SweepError) -> int:
    """Report each failed run's own error, one line each; return the exit status."""
    log.error("%d run(s) failed:", len(err.failures))
    for cfg, exc in err.failures:
        log.error("  %s: %s: %s", _label(cfg), type(exc).__name__, exc)
    first_cfg, first = err.failures[0]
    message = " ".join(str(first).split())
    print(f"{_PROG}: error: {len(err.failures)} run(s) failed; first: {_label(first_cfg)}: "
          f"{type(first).__name__}: {message}", file=sys.stderr)
    return 1


def table(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Run one table experiment; write and print its outputs; return the exit status."""
    protocol = PROTOCOLS[args.experiment]
    data_name, data = resolve_data(args, protocol)
    runs, chosen = plan(args, protocol)
    try:
        check_buffer_sizes(args.buffer_sizes, data, data_name)
    except ValueError as err:
        raise SystemExit(f"{_PROG}: error: argument --buffer-sizes: {err}") from None
    try:
        protocol.check(data)
        check_model(data, runs)
    except ValueError as err:
        raise SystemExit(f"{_PROG}: error: --data {data_name}: {err}") from None
    identity = data_identity(data)
    configs = _job_configs(args, runs, chosen, data_name, identity)
    log.info("%s: %d runs on %s (%s), %d torch thread(s) per run", args.experiment,
             len({config_key(c) for c in configs}), data.name, data.source, args.threads)
    start = time.perf_counter()
    cache_dir = args.cache or os.path.join(args.out, "cache", args.experiment)
    results = run_sweep(configs, run_job, cache_dir=cache_dir, workers=args.workers,
                        launcher=args.launcher, cluster=args.cluster, threads=args.threads)
    pairs = []
    for r, result in zip(runs, results, strict=True):
        res = RunResult(settings=r["settings"], task_accuracy=result["task_accuracy"],
                        avg=result["avg"], train_seconds=result["train_seconds"],
                        extras=result["extras"])
        pairs.append((r["row"], res))
    sample_split = protocol.stream(data, chosen["seeds"][0], runs[0]["variant"])
    title, paper_data = protocol.heading(data, tuple(chosen["buffer_sizes"]))
    by_method = settings_by_method([dataclasses.asdict(r["settings"]) for r in runs])
    buffer_like = [m for m in by_method if not _bufferless(m)] or list(by_method)
    base = by_method[buffer_like[0]]
    overrides = {m: {k: s[k] for k in ("lr", "n_iter") if s[k] != base[k]}
                 for m, s in by_method.items()}
    report = {
        "experiment": args.experiment,
        "title": title,
        **data_fields(data),
        "command": command(argv),
        "protocol": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items()},
            "method_variants": list(args.variants),
            "retrieval": (list(args.retrieval) if args.retrieval else
                          {m: default_retrieval(m) for m in chosen["methods"]
                           if m in BUFFER_METHODS}),
            **({"mir_candidates": args.mir_candidates or RunSettings.mir_candidates}
               if "mir" in (args.retrieval or ()) else {}),
            "stream": {k: v for k, v in sample_split.protocol.items() if k != "deviations"},
            "deviations": sample_split.protocol.get("deviations", []),
            "lr": base["lr"], "n_iter": base["n_iter"], "model": base["model"],
            "method_overrides": {m: o for m, o in overrides.items() if o},
            "settings_by_method": by_method,
            "batch_size": 10, "replay_batch_size": 10,
            "task_aware": [m for m in chosen["methods"] if m in TASK_AWARE],
            "quick": args.quick,
            "paper_numbers_shown": paper_data,
        },
        "provenance": provenance(args.device, args.threads),
        "rows": rows_from_runs(pairs),
        "wall_seconds": time.perf_counter() - start,
    }
    if protocol.columns_by == "buffer_size":
        columns = [(f"M={m}", m) for m in chosen["buffer_sizes"]]
    else:
        columns = [(f"Seq{v[protocol.columns_by]}", v[protocol.columns_by])
                   for v in chosen["variants"]]
    paper = PAPER_TABLES.get(args.experiment, {}) if paper_data else {}
    paper_avg = PAPER_AVERAGES.get(args.experiment) if paper_data else None
    if paper_avg is None and args.experiment in PAPER_AVERAGES:
        paper_avg = {}  # keep the Avg column, without the paper's numbers
    paths = write_outputs(report, args.out, columns=columns, row_key=protocol.columns_by,
                          paper=paper, paper_avg=paper_avg)
    bad = [f"{r['method']} M={r['buffer_size']} seed {seed}" for r in report["rows"]
           for seed, d in zip(r["seeds"], r.get("diverged", []), strict=False) if d]
    return show_outputs(paths, bad)


def show_outputs(paths: dict[str, str], diverged: Sequence[str] = ()) -> int:
    """Print the Markdown report and one line naming the files written; flag divergence.

    :param paths: the files written, the Markdown one under ``"md"``.
    :param diverged: a label for each run that diverged.
    :return: the exit status: 3 if a run diverged, else 0.
    """
    with open(paths["md"]) as f:
        print(f.read())
    print("Wrote " + ", ".join(paths.values()))
    if diverged:
        print(f"{_PROG}: error: {len(diverged)} run(s) diverged (more than "
              f"{DIVERGED_SHARE:.0%} of their steps skipped): {', '.join(diverged)}",
              file=sys.stderr)
        return 3
    return 0


def run_experiment(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Run the experiment the parsed command line names; return the exit status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    _one_line_cache_warnings()
    try:
        args.device = resolve_device(args.device)
    except ValueError as err:
        raise SystemExit(f"{_PROG}: error: argument --device: {err}") from None
    # The command line's own setting (--threads, default 1), not a library side effect.
    torch.set_num_threads(args.threads)
    from avalanche_gss.reproduce.figures import FIGURES

    try:
        if args.experiment == "composition":
            from avalanche_gss.reproduce.composition import composition

            return composition(args, argv)
        if args.experiment == "which-buffer":
            from avalanche_gss.reproduce.which_buffer import which_buffer

            return which_buffer(args, argv)
        if args.experiment in FIGURES:
            return FIGURES[args.experiment](args, argv)
        return table(args, argv)
    except SweepError as err:
        return _failed(err)
    except OSError as err:  # an output (or a cache folder) that cannot be written
        return _unwritten(err, args.out)
