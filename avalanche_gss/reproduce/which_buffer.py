"""``python -m reproduce which-buffer``: which buffer policy for which stream, and its cost.

Not a table of the paper: every policy of :data:`~avalanche_gss.reproduce.policies.POLICIES`
on every stream of :data:`~avalanche_gss.reproduce.policies.STREAMS` (disjoint, permuted,
imbalanced sequences 1-5, blurry; all on the digits) at every buffer size and seed, each run
with its stream's protocol (learning rate, iterations per batch). The runs go through the
tables' job (:func:`~avalanche_gss.reproduce.jobs.run_job`) and
:func:`~avalanche_gss.sweep.run_sweep`, so they are cached and a stopped sweep resumes.
Outputs, in ``--out``:

- ``which_buffer.md``: one table, rows = policies, columns = streams x buffer sizes, each
  cell the final average accuracy ``mean ± std`` over seeds and the mean training seconds
  of one run; the best policy of each column in bold; then the policies ranked by their
  mean rank across the columns.
- ``which_buffer.csv``: one line per run (policy, stream, buffer size, seed, accuracy per
  task, training seconds); ``which_buffer.json``: the same, grouped by seeds, with the
  ranking, each stream's protocol and the provenance (data source, seeds, command,
  versions).
- ``which_buffer.png``: accuracy against training seconds, one panel per stream family.
- ``which_buffer_composition.md`` / ``.json`` / ``.csv``: what each policy's buffer holds
  at every task end of the disjoint stream and of the first imbalanced sequence run (each
  task's share of the stored samples), traced during the same runs.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import logging
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from avalanche_gss.experiments import BUFFER_METHODS, RunResult, default_retrieval, make_settings
from avalanche_gss.plotting import Panel, Series, plot_panels
from avalanche_gss.reporting import (
    DIVERGED_SHARE,
    data_lines,
    diverged,
    format_cell,
    protocol_line,
    provenance,
    provenance_line,
    rows_from_runs,
    shared_places,
    write_text,
)
from avalanche_gss.reproduce.common import (
    code_identity,
    command,
    data_fields,
    data_identity,
    method_code,
    resolve_data,
    settings_for,
)
from avalanche_gss.reproduce.composition import at_task_ends, task_shares
from avalanche_gss.reproduce.jobs import build_split, run_job
from avalanche_gss.reproduce.policies import (
    BUFFER_SIZES,
    COMPOSITION_STREAMS,
    POLICIES,
    QUICK,
    SEEDS,
    STREAM_GROUPS,
    STREAMS,
)
from avalanche_gss.reproduce.protocols import BLURRY_KEEP, PROTOCOLS, data_label
from avalanche_gss.reproduce.tables import RESULTS_VERSION, check_model, show_outputs
from avalanche_gss.sweep import config_key, run_sweep

log = logging.getLogger("reproduce")

NAME = "which-buffer"
"""The experiment's name on the command line."""

STEM = "which_buffer"
"""The outputs' file name stem."""

_PROG = "python -m reproduce"

_PER_RUN = ("method", "buffer_size", "seed", "device")
"""RunSettings fields the experiment sets per run: a policy may not set them."""


# --------------------------------------------------------------------------- policies


def policy_problem(label: str) -> str | None:
    """What keeps policy ``label`` from running with this version, or ``None``.

    :param label: a key of :data:`~avalanche_gss.reproduce.policies.POLICIES`.
    :return: a few words: its method is not in the registry, it sets a keyword
        its method does not take (or one the experiment sets per run), or
        ``RunSettings`` refuses its values.
    """
    keywords = dict(POLICIES[label])
    method = keywords.pop("method", None)
    if method not in BUFFER_METHODS:
        return f"no buffer method {method!r} in the registry"
    per_run = sorted(set(keywords) & set(_PER_RUN))
    if per_run:
        return f"it sets {', '.join(per_run)}, which {NAME} sets per run"
    try:  # a keyword that is no RunSettings field is one of the method's options
        make_settings(method, **keywords)
    except (TypeError, ValueError) as err:
        return " ".join(str(err).split())
    return None


def check_policies(labels: Sequence[str]) -> None:
    """Refuse, before any run, policies this version cannot run; one line for all of them.

    :param labels: the chosen policies.
    :raises SystemExit: naming each policy and what it lacks, the registry's methods and
        the policies that can run.
    """
    problems = [f"{label} ({problem})" for label in labels
                if (problem := policy_problem(label)) is not None]
    if problems:
        ready = [label for label in POLICIES if policy_problem(label) is None]
        raise SystemExit(f"{_PROG}: error: --policies: this version cannot run "
                         + ", ".join(problems)
                         + f"; its registry has {', '.join(BUFFER_METHODS)}; policies it can "
                         f"run: {', '.join(ready)}")


# --------------------------------------------------------------------------- plan


def choices(args: argparse.Namespace) -> dict[str, Any]:
    """The policies, streams, buffer sizes and seeds to run (defaults, ``--quick``, options).

    :param args: the parsed command line.
    """
    chosen: dict[str, Any] = {"policies": tuple(POLICIES), "streams": tuple(STREAMS),
                              "buffer_sizes": BUFFER_SIZES, "seeds": SEEDS}
    if args.quick:
        chosen.update(QUICK)
    if args.policies is not None:
        chosen["policies"] = tuple(args.policies)
    if args.streams is not None:
        chosen["streams"] = tuple(s for name in args.streams
                                  for s in STREAM_GROUPS.get(name, (name,)))
    for key in ("buffer_sizes", "seeds"):
        if getattr(args, key) is not None:
            chosen[key] = tuple(getattr(args, key))
    return chosen


def traced_streams(streams: Sequence[str]) -> tuple[str, ...]:
    """The streams whose runs record the buffer's composition (:data:`COMPOSITION_STREAMS`).

    Each entry names a stream or a family; a family stands for its first stream chosen.

    :param streams: the chosen streams, in order.
    """
    traced = []
    for wanted in COMPOSITION_STREAMS:
        match = [s for s in streams if s == wanted or STREAMS[s].family == wanted]
        if match and match[0] not in traced:
            traced.append(match[0])
    return tuple(traced)


def stream_config(name: str, chosen: dict[str, Any]) -> dict[str, Any]:
    """The part of a job's config that builds stream ``name`` (see :func:`run_job`).

    Runs on every stream of :data:`~avalanche_gss.reproduce.policies.COMPOSITION_STREAMS` record the
    buffer's composition (a counter read per batch, a snapshot per task end), so the
    report can show any of them.

    :param name: a key of :data:`~avalanche_gss.reproduce.policies.STREAMS`.
    :param chosen: :func:`choices`' result (its ``samples_per_task`` under ``--quick``).
    """
    spec = STREAMS[name]
    variant = dict(spec.variant)
    if "samples_per_task" in chosen:
        variant["samples_per_task"] = chosen["samples_per_task"]
    config: dict[str, Any] = {"protocol": spec.protocol, "variant": variant}
    if spec.blurred:
        config["blur"] = BLURRY_KEEP
    if name in COMPOSITION_STREAMS or spec.family in COMPOSITION_STREAMS:
        config["trace"] = True  # whichever streams are chosen: the same cache key
    return config


def plan(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """List the runs: every policy x stream x buffer size x seed.

    :param args: the parsed command line.
    :return: the runs (``policy``, ``stream``, ``stream_config`` and ``settings``, a
        :class:`RunSettings` made by the stream's protocol, then the policy's keywords)
        and :func:`choices`' result.
    :raises SystemExit: a chosen policy this version cannot run (:func:`check_policies`).
    """
    chosen = choices(args)
    check_policies(chosen["policies"])
    runs = []
    for stream in chosen["streams"]:
        spec = STREAMS[stream]
        protocol = PROTOCOLS[spec.protocol]
        config = stream_config(stream, chosen)
        for seed in chosen["seeds"]:
            for label in chosen["policies"]:
                keywords = {k: v for k, v in POLICIES[label].items() if k != "method"}
                for m in chosen["buffer_sizes"]:
                    settings = settings_for(args, protocol, POLICIES[label]["method"],
                                            buffer_size=m, seed=seed, **keywords)
                    runs.append({"policy": label, "stream": stream, "stream_config": config,
                                 "settings": settings})
    return runs, chosen


def _job_configs(args: argparse.Namespace, runs: list[dict[str, Any]], data_name: str,
                 identity: dict[str, str]) -> list[dict[str, Any]]:
    configs = []
    for r in runs:
        s = r["settings"]
        config = {"version": RESULTS_VERSION, **code_identity(),
                  "experiment": NAME, "data": data_name, "root": args.root,
                  "download": args.download, **identity, "threads": args.threads,
                  **r["stream_config"], "settings": dataclasses.asdict(s),
                  **method_code(s.method)}
        if args.tensorboard:
            config["tensorboard"] = os.path.join(
                args.tensorboard, NAME,
                f"{r['policy']}-{r['stream']}-M{s.buffer_size}-seed{s.seed}")
        configs.append(config)
    return configs


# --------------------------------------------------------------------------- report


def _std(values: Sequence[float]) -> float | None:
    return statistics.pstdev(values) if len(values) > 1 else None


def _ranks(values: dict[str, float]) -> dict[str, float]:
    """Rank 1 for the highest value; tied values share their mean rank."""
    ordered = sorted(values.values(), reverse=True)
    ranks = {}
    for key, v in values.items():
        first = ordered.index(v) + 1
        ties = ordered.count(v)
        ranks[key] = first + (ties - 1) / 2
    return ranks


def ranking(rows: Sequence[dict[str, Any]], policies: Sequence[str],
            columns: Sequence[tuple[str, int]]) -> tuple[list[dict[str, Any]],
                                                         dict[str, list[str]]]:
    """Rank the policies in each column (stream x buffer size) and overall.

    :param rows: the report's rows (one per policy, stream and buffer size).
    :param policies: the policies, in table order.
    :param columns: ``(stream, buffer size)`` of each column.
    :return: the policies sorted by mean rank, then by mean accuracy (each with
        ``mean_rank``, ``place``: its place, ``"=2"`` when it shares its mean rank at two
        decimals with others, ``wins``, ``mean_accuracy``, ``mean_train_seconds``,
        ``time_vs_fastest``: the mean over the columns of its time over the column's
        fastest), and each column's best
        policies (highest mean accuracy at the table's precision), keyed ``stream M=m``.
    """
    cell = {(r["policy"], r["stream"], r["buffer_size"]): r for r in rows}
    ranks: dict[str, list[float]] = {p: [] for p in policies}
    accs: dict[str, list[float]] = {p: [] for p in policies}
    secs: dict[str, list[float]] = {p: [] for p in policies}
    slow: dict[str, list[float]] = {p: [] for p in policies}
    wins = dict.fromkeys(policies, 0)
    best: dict[str, list[str]] = {}
    for stream, m in columns:
        here = {p: cell[(p, stream, m)] for p in policies if (p, stream, m) in cell}
        if not here:
            continue
        shown = {p: round(r["avg_mean"], 1) for p, r in here.items()}
        top = max(shown.values())
        best[f"{stream} M={m}"] = [p for p, v in shown.items() if v == top]
        for p in best[f"{stream} M={m}"]:
            wins[p] += 1
        fastest = min(r["train_seconds_mean"] for r in here.values())
        for p, rank in _ranks(shown).items():
            ranks[p].append(rank)
            accs[p].append(here[p]["avg_mean"])
            secs[p].append(here[p]["train_seconds_mean"])
            slow[p].append(here[p]["train_seconds_mean"] / fastest if fastest > 0 else 1.0)
    table: list[dict[str, Any]] = [
        {"policy": p, "mean_rank": statistics.fmean(ranks[p]), "wins": wins[p],
         "columns": len(ranks[p]), "mean_accuracy": statistics.fmean(accs[p]),
         "mean_train_seconds": statistics.fmean(secs[p]),
         "time_vs_fastest": statistics.fmean(slow[p])}
        for p in policies if ranks[p]]
    table.sort(key=lambda t: (round(t["mean_rank"], 2), -t["mean_accuracy"]))
    for t, place in zip(table, shared_places([round(t["mean_rank"], 2) for t in table]),
                        strict=True):
        t["place"] = place
    return table, best


def _cell(row: dict[str, Any], bold: bool) -> str:
    acc = format_cell(row["avg_mean"], row["avg_std"])
    mark = " ‡" if any(row.get("diverged", [])) else ""
    return (f"**{acc}**" if bold else acc) + f" ({row['train_seconds_mean']:.1f} s){mark}"


def _protocol_lines(report: dict[str, Any]) -> list[str]:
    """The protocol as run: what every stream shares, then one line per stream."""
    protocol = report["protocol"]
    seeds = protocol["seeds"]
    lines = [f"Protocol: M = {'/'.join(map(str, protocol['buffer_sizes']))}; "
             + ("seeds " if len(seeds) > 1 else "seed ") + " ".join(map(str, seeds))
             + f"; batches of {protocol['batch_size']}, replay batches of "
             f"{protocol['replay_batch_size']}; the {protocol['model']} model; each stream "
             "with its protocol's learning rate and iterations per batch:", ""]
    for s in protocol["streams"]:
        stream = {**s["stream"], "blurry": s.get("blur") and {"keep": s["blur"]}}
        name = f"- {s['name']} ({PROTOCOLS[s['protocol']].paper_ref}'s {s['family']} stream): "
        text = protocol_line({"stream": stream, "lr": s["lr"], "n_iter": s["n_iter"]},
                             prefix=name) or name
        if s["deviations"]:
            text += " Deviations from the paper's protocol: " + "; ".join(s["deviations"]) + "."
        lines.append(text)
    return lines


def _markdown(report: dict[str, Any], columns: Sequence[tuple[str, int]],
              png: str) -> str:
    rows = report["rows"]
    policies = report["protocol"]["policies"]
    seeds = report["protocol"]["seeds"]
    cell = {(r["policy"], r["stream"], r["buffer_size"]): r for r in rows}
    best = report["best"]
    spread = (f"mean ± std over {len(seeds)} seeds" if len(seeds) > 1
              else "one seed, so no spread")
    lines = [
        f"# {NAME}: {report['title']}", "",
        *data_lines(report),
        *_protocol_lines(report), "",
        "Columns: a stream (see Protocol) at a buffer size M. Each cell: final average "
        f"accuracy over the stream's tasks ({spread}), and in "
        "parentheses the mean training time of one run in seconds (evaluation excluded). "
        "**Bold**: the best policy of the column. Times are wall-clock on this machine "
        f"with {report['protocol']['workers']} run(s) at a time and "
        f"{report['provenance']['threads']} torch thread(s) each, read from the cache for "
        "runs done before: compare them within one table.", "",
        "| policy | " + " | ".join(f"{s} M={m}" for s, m in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for p in policies:
        cells = []
        for s, m in columns:
            r = cell.get((p, s, m))
            cells.append(_cell(r, p in best.get(f"{s} M={m}", [])) if r else "-")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines += ["", "## Ranking", "",
              f"Policies by mean rank over the {len(columns)} column(s) above. Columns: "
              "rank: the policy's place (policies with the same mean rank share it, e.g. =2, "
              "and are listed by mean accuracy); mean rank: its rank in each column (1 = "
              "best accuracy; policies tied at the table's precision share their mean rank), "
              "averaged over the columns; columns won: the columns where it has the best "
              "accuracy (a tie counts for each); mean accuracy: over the columns; mean train "
              "s per run: training seconds of one run, averaged over the columns; time vs "
              "fastest: each run's training time over the fastest policy's in the same "
              "column, averaged over the columns.", "",
              "| rank | policy | mean rank | columns won | mean accuracy | mean train s "
              "per run | time vs fastest |",
              "|---|---|---|---|---|---|---|"]
    for t in report["ranking"]:
        lines.append(f"| {t['place']} | {t['policy']} | {t['mean_rank']:.2f} | {t['wins']} / "
                     f"{t['columns']} | {t['mean_accuracy']:.1f} | "
                     f"{t['mean_train_seconds']:.2f} | {t['time_vs_fastest']:.2f}× |")
    lines += ["", "Policies (RunSettings keywords):", ""]
    for p in policies:
        keywords = ", ".join(f"{k}={v}" for k, v in POLICIES[p].items())
        own = default_retrieval(POLICIES[p]["method"])
        if "retrieval" not in POLICIES[p] and own != "random":
            keywords += f" (its own retrieval: {own})"
        lines.append(f"- {p}: {keywords}")
    bad = [r for r in rows if any(r.get("diverged", []))]
    if bad:
        lines += ["", f"‡: a run skipped more than {DIVERGED_SHARE:.0%} of its training "
                  "iterations and diverged: its accuracy says nothing about the policy."]
    lines += ["", f"Buffer composition along the stream: `{STEM}_composition.md`.",
              "", provenance_line(report["provenance"]), "", f"Plot: `{png}`", "",
              f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def _csv(pairs: Sequence[tuple[dict[str, Any], RunResult]], prov: dict[str, Any]) -> str:
    n_tasks = max(len(res.task_accuracy) for _, res in pairs)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["policy", "method", "options", "stream", "family", "buffer_size", "seed",
                     "avg", *[f"T{k + 1}" for k in range(n_tasks)], "train_seconds",
                     "skipped_steps", "diverged", "device", "threads"])
    for keys, res in pairs:
        options = ";".join(f"{k}={v}" for k, v in POLICIES[keys["policy"]].items()
                           if k != "method")
        accs = [f"{a:.2f}" for a in res.task_accuracy]
        writer.writerow([keys["policy"], res.settings.method, options, keys["stream"],
                         STREAMS[keys["stream"]].family, res.settings.buffer_size,
                         res.settings.seed, f"{res.avg:.2f}",
                         *accs, *[""] * (n_tasks - len(accs)), f"{res.train_seconds:.3f}",
                         res.extras.get("skipped_steps", 0), diverged(res.extras),
                         prov["device"], prov["threads"]])
    return buffer.getvalue()


def _figure(rows: Sequence[dict[str, Any]], chosen: dict[str, Any], path: str,
            title: str) -> str:
    """Accuracy against training seconds, one panel per stream family, a series per policy.

    A family of several streams (imbalanced sequences) gives, per seed, the mean over its
    streams; points are the means over seeds, error bars their std.
    """
    families: dict[str, list[str]] = {}
    for s in chosen["streams"]:
        families.setdefault(STREAMS[s].family, []).append(s)
    cell = {(r["policy"], r["stream"], r["buffer_size"]): r for r in rows}
    panels = []
    for family, streams in families.items():
        series = []
        for p in chosen["policies"]:
            xs, ys, errs, notes = [], [], [], []
            for m in sorted(chosen["buffer_sizes"]):
                members = [cell[(p, s, m)] for s in streams if (p, s, m) in cell]
                if not members:
                    continue
                n_seeds = len(members[0]["seeds"])
                acc = [statistics.fmean(r["avg"][i] for r in members) for i in range(n_seeds)]
                sec = [statistics.fmean(r["train_seconds"][i] for r in members)
                       for i in range(n_seeds)]
                xs.append(statistics.fmean(sec))
                ys.append(statistics.fmean(acc))
                errs.append(_std(acc) or 0.0)
                notes.append(f"M={m}")
            if xs:
                series.append(Series(p, xs, ys, errs, "markers",
                                     notes if len(chosen["buffer_sizes"]) > 1 else None))
        xs_all = [x for s in series for x in s.x if x > 0]
        logx = bool(xs_all) and max(xs_all) > 5 * min(xs_all)
        name = streams[0] if len(streams) == 1 else (
            f"{family} (mean over {', '.join(streams)})")
        panels.append(Panel(name, "train seconds per run", "final average accuracy (%)",
                            series, logx=logx, data_ticks=False))
    return plot_panels(panels, path, title=title)


def _composition_csv(rows: Sequence[dict[str, Any]]) -> str:
    """One line per traced run and task end: each task's share of the stored samples."""
    n_tasks = max((len(r["train_sizes"]) for r in rows), default=0)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["policy", "method", "stream", "buffer_size", "seed", "after_task",
                     *[f"share_T{k + 1}" for k in range(n_tasks)], "admitted_in_task"])
    for r in rows:
        for k, (shares, took) in enumerate(zip(r["task_end_shares"], r["task_end_admitted"],
                                               strict=True)):
            if shares is None:
                continue
            writer.writerow([r["policy"], r["method"], r["stream"], r["buffer_size"], r["seed"],
                             k + 1, *[f"{v:.4f}" for v in shares], f"{took:.4f}"])
    return buffer.getvalue()


def _composition(report: dict[str, Any], runs: list[dict[str, Any]],
                 results: list[dict[str, Any]], out: str) -> dict[str, str]:
    """Write ``which_buffer_composition.json``, ``.csv`` and ``.md`` from the traced runs."""
    shown = traced_streams([s["name"] for s in report["protocol"]["streams"]])
    rows = []
    for r, result in zip(runs, results, strict=True):
        trace = result["extras"].get("trace")
        if trace is None or r["stream"] not in shown:
            continue
        sizes = result["extras"]["train_sizes"]
        ends = at_task_ends(trace, sizes)
        rows.append({"policy": r["policy"], "method": r["settings"].method,
                     "stream": r["stream"], "buffer_size": r["settings"].buffer_size,
                     "seed": r["settings"].seed, "train_sizes": sizes,
                     "task_accuracy": result["task_accuracy"], "avg": result["avg"],
                     "task_end_shares": [task_shares(e) if e else None for e in ends],
                     "task_end_admitted": [e["admitted_in_task"] if e else None
                                           for e in ends],
                     "trace": trace})
    traced = [s for s in shown if any(r["stream"] == s for r in rows)]
    comp = {"experiment": f"{NAME}-composition",
            "title": f"buffer composition at each task end ({', '.join(traced) or 'none'})",
            **{k: report[k] for k in ("dataset", "data_source", "data_sha256",
                                      "data_verified_as", "data_verification", "command",
                                      "provenance")},
            "protocol": {k: report["protocol"][k] for k in ("policies", "seeds",
                                                           "buffer_sizes")},
            "streams": traced,
            "shares": "task_end_shares[k][t]: share of the stored samples from task t+1 "
                      "right after task k+1 ends; task_end_admitted[k]: share of task k+1's "
                      "samples the buffer took in",
            "rows": rows}
    paths = {f"composition_{ext}": os.path.join(out, f"{STEM}_composition.{ext}")
             for ext in ("json", "csv", "md")}
    write_text(paths["composition_json"], json.dumps(comp, indent=1))
    write_text(paths["composition_csv"], _composition_csv(rows))
    seeds = report["protocol"]["seeds"]
    streams = [s for s in report["protocol"]["streams"] if s["name"] in traced]
    lines = [f"# {NAME}: what each policy's buffer holds at every task end", "",
             *data_lines(report),
             *_protocol_lines({**report, "protocol": {**report["protocol"],
                                                      "streams": streams}}), "",
             "Columns: after Tk: right after task k ends; final accuracy per task: test "
             "accuracy (%) on each task at the end of the stream. Each cell: the share (%) of "
             "the stored samples from tasks 1, 2, ... right "
             "after that task ends, and in parentheses the share of that task's samples the "
             "buffer took in; "
             + (f"mean over {len(seeds)} seeds" if len(seeds) > 1 else "one seed")
             + ". Traced in the runs of the main table (stream protocol and settings "
             "alike).", ""]
    if not rows:
        lines += [f"No stream to trace: {NAME} traces the disjoint stream and the first "
                  "imbalanced sequence it runs.", ""]
    for stream in traced:
        for m in report["protocol"]["buffer_sizes"]:
            mine = [r for r in rows if r["stream"] == stream and r["buffer_size"] == m]
            if not mine:
                continue
            n_tasks = len(mine[0]["train_sizes"])
            lines += [f"## {stream}, M = {m} (tasks of "
                      f"{'/'.join(map(str, mine[0]['train_sizes']))} samples)", "",
                      "| policy | " + " | ".join(f"after T{k + 1}" for k in range(n_tasks))
                      + " | final accuracy per task |",
                      "|---|" + "---|" * (n_tasks + 1)]
            for p in report["protocol"]["policies"]:
                runs_p = [r for r in mine if r["policy"] == p]
                if not runs_p:
                    continue
                cells = []
                for k in range(n_tasks):
                    shares = [r["task_end_shares"][k] for r in runs_p
                              if r["task_end_shares"][k] is not None]
                    took = [r["task_end_admitted"][k] for r in runs_p
                            if r["task_end_admitted"][k] is not None]
                    if not shares:
                        cells.append("-")
                        continue
                    mean = [100 * statistics.fmean(v) for v in zip(*shares, strict=True)]
                    cells.append("/".join(f"{v:.0f}" for v in mean)
                                 + f" ({100 * statistics.fmean(took):.0f}% in)")
                acc = [statistics.fmean(v) for v in
                       zip(*(r["task_accuracy"] for r in runs_p), strict=True)]
                cells.append(" / ".join(f"{a:.1f}" for a in acc))
                lines.append(f"| {p} | " + " | ".join(cells) + " |")
            lines.append("")
    lines += [provenance_line(report["provenance"]), "", f"Command: `{report['command']}`",
              ""]
    write_text(paths["composition_md"], "\n".join(lines))
    return paths


def which_buffer(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Run the comparison; write and print its outputs; return the exit status.

    :param args: the parsed command line.
    :param argv: the command line (for the record; ``sys.argv`` by default).
    :return: 0, or 3 when a run diverged.
    """
    runs, chosen = plan(args)
    data_name, data = resolve_data(args, PROTOCOLS[STREAMS[chosen["streams"][0]].protocol])
    try:
        for s in chosen["streams"]:
            PROTOCOLS[STREAMS[s].protocol].check(data)
        check_model(data, runs)
    except ValueError as err:
        raise SystemExit(f"{_PROG}: error: --data {data_name}: {err}") from None
    identity = data_identity(data)
    configs = _job_configs(args, runs, data_name, identity)
    log.info("%s: %d runs (%d policies x %d streams x %d buffer sizes x %d seeds) on %s "
             "(%s), %d torch thread(s) per run", NAME, len({config_key(c) for c in configs}),
             len(chosen["policies"]), len(chosen["streams"]), len(chosen["buffer_sizes"]),
             len(chosen["seeds"]), data.name, data.source, args.threads)
    start = time.perf_counter()
    cache_dir = args.cache or os.path.join(args.out, "cache", NAME)
    results = run_sweep(configs, run_job, cache_dir=cache_dir, workers=args.workers,
                        launcher=args.launcher, cluster=args.cluster, threads=args.threads)
    pairs = []
    for r, result in zip(runs, results, strict=True):
        extras = {k: v for k, v in result["extras"].items() if k not in ("trace", "train_sizes")}
        res = RunResult(settings=r["settings"], task_accuracy=result["task_accuracy"],
                        avg=result["avg"], train_seconds=result["train_seconds"], extras=extras)
        pairs.append(({"policy": r["policy"], "stream": r["stream"]}, res))
    rows = rows_from_runs(pairs)
    for row in rows:
        row["family"] = STREAMS[row["stream"]].family
        row["train_seconds_mean"] = statistics.fmean(row["train_seconds"])
        row["train_seconds_std"] = _std(row["train_seconds"])
    columns = [(s, m) for s in chosen["streams"] for m in chosen["buffer_sizes"]]
    table, best = ranking(rows, chosen["policies"], columns)
    streams = []
    for s in chosen["streams"]:
        config = stream_config(s, chosen)
        split = build_split(data, config, chosen["seeds"][0])
        settings = next(r["settings"] for r in runs if r["stream"] == s)
        streams.append({"name": s, "family": STREAMS[s].family,
                        "protocol": STREAMS[s].protocol, "variant": config["variant"],
                        "blur": config.get("blur"), "traced": bool(config.get("trace")),
                        "lr": settings.lr, "n_iter": settings.n_iter,
                        "stream": {k: v for k, v in split.protocol.items()
                                   if k != "deviations"},
                        "deviations": split.protocol.get("deviations", [])})
    label = data_label(data)
    sizes = "/".join(map(str, chosen["buffer_sizes"]))
    report: dict[str, Any] = {
        "experiment": NAME,
        "title": f"which buffer policy for which stream, on {label}: final average accuracy "
                 f"and train time per run, M = {sizes} (ours, not a table of the paper)",
        **data_fields(data),
        "command": command(argv),
        "protocol": {
            "policies": list(chosen["policies"]),
            "policy_settings": {p: POLICIES[p] for p in chosen["policies"]},
            "streams": streams,
            "buffer_sizes": list(chosen["buffer_sizes"]),
            "seeds": list(chosen["seeds"]),
            "model": runs[0]["settings"].model,
            "batch_size": runs[0]["settings"].batch_size,
            "replay_batch_size": runs[0]["settings"].replay_batch_size,
            "quick": args.quick,
            "workers": args.workers,
            "train_seconds": "wall time of training one run (evaluation excluded), in its "
                             "worker; runs found in the cache keep the time they took then",
        },
        "provenance": provenance(args.device, args.threads),
        "rows": rows,
        "best": best,
        "ranking": table,
        "wall_seconds": time.perf_counter() - start,
    }
    os.makedirs(args.out, exist_ok=True)
    paths = {ext: os.path.join(args.out, f"{STEM}.{ext}") for ext in ("json", "csv", "md")}
    paths["png"] = _figure(rows, chosen, os.path.join(args.out, f"{STEM}.png"),
                           f"Accuracy vs train time per run, {label}, "
                           f"{len(chosen['seeds'])} seed(s)")
    write_text(paths["json"], json.dumps(report, indent=1))
    write_text(paths["csv"], _csv(pairs, report["provenance"]))
    write_text(paths["md"], _markdown(report, columns, paths["png"]))
    paths.update(_composition(report, runs, results, args.out))
    bad = [f"{r['policy']} on {r['stream']} M={r['buffer_size']} seed {seed}" for r in rows
           for seed, d in zip(r["seeds"], r.get("diverged", []), strict=False) if d]
    return show_outputs(paths, bad)
