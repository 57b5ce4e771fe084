"""The table experiments of ``python -m reproduce`` (``table1`` ... ``table4``, ``constrained``).

A table is a plan of runs (:func:`plan`), swept through
:func:`avalanche_gss.reproduce.runs.jobs.run_job`
and cached by everything that determines a run's result, then grouped into rows
(:func:`~avalanche_gss.reproduce.reports.rows.group_rows`) and written as JSON, CSV and Markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from avalanche_gss.reproduce.common import (
    command,
    data_fields,
    data_identity,
    method_code,
    prog_of,
    resolve_choices,
    resolve_data,
    settings_by_method,
    settings_for,
)
from avalanche_gss.reproduce.experiments.policies import parse_method_text
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS, Protocol
from avalanche_gss.reproduce.reports.event_logs import write_event_logs
from avalanche_gss.reproduce.reports.outputs import show_outputs
from avalanche_gss.reproduce.reports.paper import PAPER_AVERAGES, PAPER_TABLES
from avalanche_gss.reproduce.reports.writing import group_rows, provenance, write_outputs
from avalanche_gss.reproduce.runs.jobs import run_job, run_logged_job
from avalanche_gss.reproduce.runs.planning import (
    Run,
    check_buffer_sizes,
    check_model,
    job_config,
    run_result,
    sweep,
)
from avalanche_gss.reproduce.runs.sweep import config_key
from avalanche_gss.reproduce.runs.training import (
    BUFFER_METHODS,
    TASK_AWARE,
    VARIANT_METHODS,
    RunSettings,
    default_retrieval,
    run_label,
    settings_dict,
)

log = logging.getLogger("reproduce")


def plan(args: argparse.Namespace, protocol: Protocol) -> tuple[list[Run], dict[str, Any]]:
    """List the runs to do (their stream ``variant``, row keys, settings) and the choices.

    A ``--methods`` value ``METHOD:OPTION=VALUE,...`` runs that method with those options
    and settings (:func:`~avalanche_gss.reproduce.experiments.policies.parse_method_text`),
    in rows of their own: the row key ``options`` holds the text after the colon.
    """
    chosen = resolve_choices(
        args, {"methods": protocol.methods, "buffer_sizes": protocol.buffer_sizes,
               "seeds": protocol.seeds, "variants": protocol.variants},
        protocol.quick, ("methods", "buffer_sizes", "seeds"))
    runs = []
    stream_extra = ({"samples_per_task": chosen["samples_per_task"]}
                    if "samples_per_task" in chosen else {})
    for variant in chosen["variants"]:
        for seed in chosen["seeds"]:
            for text in chosen["methods"]:
                method, keywords = parse_method_text(text)
                own = {"options": text.partition(":")[2].strip()} if keywords else {}
                for flavour in _flavours(args, protocol, method):
                    row = {**variant, **flavour, **own}
                    extra = ({"mir_candidates": args.mir_candidates}
                             if flavour.get("retrieval") == "mir" and args.mir_candidates
                             else {})
                    for m in chosen["buffer_sizes"]:
                        settings = _settings(args, protocol, text, buffer_size=m, seed=seed,
                                             **flavour, **extra, **keywords)
                        runs.append(Run(settings, row,
                                        {"variant": {**variant, **stream_extra}}))
    return runs, chosen


def _flavours(args: argparse.Namespace, protocol: Protocol, method: str
              ) -> list[dict[str, Any]]:
    """A method's rows beyond its stream: the protocol's flavours, variants, retrievals."""
    flavours: list[dict[str, Any]] = list(protocol.flavours.get(method, ({},)))
    if method in VARIANT_METHODS:
        flavours = [{**f, "variant": v} for f in flavours for v in args.variants]
    if method in BUFFER_METHODS:
        flavours = [r for f in flavours for r in _retrievals(args, method, f)]
    return flavours


def _settings(args: argparse.Namespace, protocol: Protocol, text: str,
              **keywords: object) -> RunSettings:
    """A run's settings (:func:`settings_for`) of a ``--methods`` value.

    :raises SystemExit: the settings are refused (an option the method lacks, a bad
        value), in one line naming the value.
    """
    try:
        return settings_for(args, protocol, text.partition(":")[0].strip(), **keywords)
    except ValueError as err:
        raise SystemExit(f"{prog_of(args)}: error: argument --methods: {text}: "
                         f"{' '.join(str(err).split())}") from None


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


def job_label(settings: RunSettings, stream: dict[str, Any]) -> str:
    """A table run's name in its log line and in failure lines (its job's ``label``).

    Its settings' :func:`run_label` (method, variant, update, retrieval, buffer size,
    seed) and its stream's row keys (``"Reservoir-M300-seed0-sequence1"``): what tells
    its row and seed from the others of the table (not what all its runs share, such as
    ``--quick``'s ``samples_per_task``).

    :param settings: the run's settings (as its job runs them).
    :param stream: its stream's row keys (``{"sequence": 1}``; ``{}`` for one stream).
    """
    return "-".join([run_label(settings), *(f"{k}{v}" for k, v in stream.items())])


def _job_configs(args: argparse.Namespace, runs: list[Run], chosen: dict[str, Any],
                 data_name: str, identity: dict[str, str]) -> list[dict[str, Any]]:
    configs = []
    for r in runs:
        s = r.settings
        # Methods without a buffer give the same run for every buffer size: run them once.
        base = (dataclasses.replace(s, buffer=dataclasses.replace(
                    s.buffer, size=chosen["buffer_sizes"][0]))
                if _bufferless(s.method) else s)
        label = job_label(base, {k: v for k, v in r.job["variant"].items() if k in r.keys})
        config = job_config(args, args.experiment, data_name, identity, **r.job,
                            settings=settings_dict(base), label=label,
                            **method_code(base.method))
        configs.append(config)
    return configs


def _log_folders(args: argparse.Namespace, runs: list[Run]) -> list[str | None]:
    """Each run's ``--tensorboard`` folder (``DIR/EXPERIMENT/LABEL``); ``None`` for a baseline.

    Not part of a run's cache key: where its logs go changes no result.
    """
    folders: list[str | None] = []
    for r in runs:
        s = r.settings
        if s.method not in BUFFER_METHODS:
            folders.append(None)
            continue
        tag = "-".join([run_label(s), *(f"{k}{v}" for k, v in r.job["variant"].items())])
        folders.append(os.path.join(args.tensorboard, args.experiment, tag))
    return folders


def table(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Run one table experiment; write and print its outputs; return the exit status."""
    protocol = PROTOCOLS[args.experiment]
    data_name, data = resolve_data(args, protocol)
    runs, chosen = plan(args, protocol)
    prog = prog_of(args)
    try:
        check_buffer_sizes(args.buffer_sizes, data, data_name)
    except ValueError as err:
        raise SystemExit(f"{prog}: error: argument --buffer-sizes: {err}") from None
    try:
        protocol.check(data)
        check_model(data, [r.settings for r in runs])
    except ValueError as err:
        raise SystemExit(f"{prog}: error: --data {data_name}: {err}") from None
    identity = data_identity(data)
    configs = _job_configs(args, runs, chosen, data_name, identity)
    log.info("%s: %d runs on %s (%s), %d torch thread(s) per run", args.experiment,
             len({config_key(c) for c in configs}), data.name, data.source, args.threads)
    start = time.perf_counter()
    results = sweep(args, args.experiment, configs,
                    run_logged_job if args.tensorboard else run_job)
    if args.tensorboard:
        write_event_logs(_log_folders(args, runs), results, args.tensorboard)
    rows = group_rows([(r.keys, run_result(r.settings, result))
                       for r, result in zip(runs, results, strict=True)])
    sample_split = protocol.stream(data, chosen["seeds"][0], runs[0].job["variant"])
    title, paper_data = protocol.heading(data, tuple(chosen["buffer_sizes"]))
    by_method = settings_by_method([settings_dict(r.settings) for r in runs])
    buffer_like = [m for m in by_method if not _bufferless(m)] or list(by_method)
    base = by_method[buffer_like[0]]
    overrides = {m: {k: s[k] for k in ("lr", "n_iter") if s[k] != base[k]}
                 for m, s in by_method.items()}
    report = {
        "experiment": args.experiment,
        "title": title,
        **data_fields(data),
        "command": command(argv, prog),
        "protocol": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items()},
            "method_variants": list(args.variants),
            "retrieval": (list(args.retrieval) if args.retrieval else
                          {m: default_retrieval(m) for m in chosen["methods"]
                           if m in BUFFER_METHODS}),
            **({"mir_candidates": args.mir_candidates or RunSettings.mir_candidates}
               if "mir" in (args.retrieval or ()) else {}),
            "stream": {k: v for k, v in sample_split.protocol.items() if k != "deviations"},
            "deviations": [*sample_split.protocol.get("deviations", []),
                           *([f"--quick: {chosen['samples_per_task']} samples per task, a "
                              f"short run of {protocol.paper_ref}'s stream"]
                             if "samples_per_task" in chosen else [])],
            "lr": base["lr"], "n_iter": base["n_iter"], "model": base["model"],
            "method_overrides": {m: o for m, o in overrides.items() if o},
            "settings_by_method": by_method,
            "batch_size": 10, "replay_batch_size": 10,
            "task_aware": [m for m in chosen["methods"] if m in TASK_AWARE],
            "quick": args.quick,
            "paper_numbers_shown": paper_data,
        },
        "provenance": provenance(args.device, args.threads),
        "rows": [r.to_dict() for r in rows],
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
    bad = [f"{r.method} M={r.buffer_size} seed {seed}" for r in rows
           for seed, d in zip(r.seeds, r.diverged or [], strict=False) if d]
    return show_outputs(paths, bad, prog)
