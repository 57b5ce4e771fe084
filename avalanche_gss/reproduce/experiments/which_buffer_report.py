"""What ``python -m reproduce which-buffer`` writes: its rows, ranking, table, CSV and plot."""

from __future__ import annotations

import csv
import io
import os
import statistics
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from avalanche_gss.reproduce.experiments.policies import POLICIES, STREAMS
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS, label_of
from avalanche_gss.reproduce.experiments.which_buffer_statistics import statistics_lines
from avalanche_gss.reproduce.reports.comparisons import mean_interval
from avalanche_gss.reproduce.reports.plotting import (
    Interval,
    Panel,
    Series,
    plot_intervals,
    plot_panels,
)
from avalanche_gss.reproduce.reports.rows import Row
from avalanche_gss.reproduce.reports.writing import (
    DIVERGED_SHARE,
    data_lines,
    diverged,
    format_cell,
    protocol_line,
    provenance_line,
    shared_places,
)
from avalanche_gss.reproduce.runs.training import RunResult, default_retrieval

NAME = "which-buffer"
"""The experiment's name on the command line."""

STEM = "which_buffer"
"""The outputs' file name stem."""


class PolicyRow(Row):
    """A row of the comparison: one policy (``keys["policy"]``) on one stream at one size.

    Its record adds the stream's ``family`` and the mean and std of the training seconds.
    """

    @property
    def policy(self) -> str:
        """The policy's label (a key of :data:`.policies.POLICIES`)."""
        return str(self.keys["policy"])

    @property
    def stream(self) -> str:
        """The stream's name (a key of :data:`.policies.STREAMS`)."""
        return str(self.keys["stream"])

    def to_dict(self) -> dict[str, Any]:
        """:meth:`Row.to_dict`, then ``family``, ``train_seconds_mean`` and ``_std``."""
        return {**super().to_dict(), "family": STREAMS[self.stream].family,
                "train_seconds_mean": statistics.fmean(self.train_seconds),
                "train_seconds_std": _std(self.train_seconds)}


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


def protocol_lines(report: dict[str, Any]) -> list[str]:
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
        ref = PROTOCOLS[s['protocol']].paper_ref
        name = (f"- {s['name']} ({s['description']}; {ref}'s settings): " if "description" in s
                else f"- {s['name']} ({ref}'s {s['family']} stream): ")
        text = protocol_line({"stream": stream, "lr": s["lr"], "n_iter": s["n_iter"]},
                             prefix=name) or name
        if s["deviations"]:
            text += " Deviations from the paper's protocol: " + "; ".join(s["deviations"]) + "."
        lines.append(text)
    return lines


def markdown(report: dict[str, Any], columns: Sequence[tuple[str, int]], png: str) -> str:
    """The Markdown report: the table, the ranking, the policies, the provenance.

    :param report: the JSON report (rows as :meth:`PolicyRow.to_dict` records them).
    :param columns: ``(stream, buffer size)`` of each column.
    :param png: the figure's path.
    """
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
        *protocol_lines(report), "",
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
              "column, averaged over the columns. A mean rank states no uncertainty: which "
              "differences the runs support is under Recommendation."
              + (" **One seed: this order is one draw of the streams and weights, not a "
                 "ranking; it makes no recommendation.**" if len(seeds) < 2 else ""), "",
              "| rank | policy | mean rank | columns won | mean accuracy | mean train s "
              "per run | time vs fastest |",
              "|---|---|---|---|---|---|---|"]
    for t in report["ranking"]:
        lines.append(f"| {t['place']} | {t['policy']} | {t['mean_rank']:.2f} | {t['wins']} / "
                     f"{t['columns']} | {t['mean_accuracy']:.1f} | "
                     f"{t['mean_train_seconds']:.2f} | {t['time_vs_fastest']:.2f}× |")
    if "ranking_compute_matched" in report:
        lines += matched_lines(report, columns)
    lines += statistics_lines(report)
    left_out = report["protocol"].get("policies_left_out") or {}
    if left_out:
        lines += ["", "Left out of the default policies: "
                  + "; ".join(f"{p} ({why})" for p, why in left_out.items()) + "."]
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
              "", provenance_line(report["provenance"]), "", f"Plot: `{png}`"
              + ("; each policy against the best, with intervals: "
                 f"`{STEM}_intervals.png`" if report.get("recommendation") else ""), "",
              f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def runs_csv(pairs: Sequence[tuple[dict[str, Any], RunResult]], prov: dict[str, Any],
             matched: dict[tuple[Any, ...], dict[str, Any]] | None = None,
             data: str = "") -> str:
    """One line per run: policy, stream, buffer size, seed, accuracies, time, device, data.

    :param data: the data the runs used (the dataset's name, e.g. ``cifar10-standin``).
    :param matched: with ``--compute-matched``, each run's compute-matched run by
        ``(policy, stream, buffer size, seed)`` (``C``, ``kept_batches``, ``batches``,
        ``avg``): four more columns.
    """
    n_tasks = max(len(res.task_accuracy) for _, res in pairs)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["policy", "method", "options", "stream", "family", "buffer_size", "seed",
                     "avg", *[f"T{k + 1}" for k in range(n_tasks)], "train_seconds",
                     "skipped_steps", "diverged", "device", "threads", "data",
                     *(("relative_cost", "kept_batches", "batches", "matched_avg")
                       if matched is not None else ())])
    for keys, res in pairs:
        options = ";".join(f"{k}={v}" for k, v in POLICIES[keys["policy"]].items()
                           if k != "method")
        accs = [f"{a:.2f}" for a in res.task_accuracy]
        writer.writerow([keys["policy"], res.settings.method, options, keys["stream"],
                         STREAMS[keys["stream"]].family, res.settings.buffer_size,
                         res.settings.seed, f"{res.avg:.2f}",
                         *accs, *[""] * (n_tasks - len(accs)), f"{res.train_seconds:.3f}",
                         res.extras.get("skipped_steps", 0), diverged(res.extras),
                         prov["device"], prov["threads"], data,
                         *_matched_cells(matched, keys, res)])
    return buffer.getvalue()


def _matched_cells(matched: dict[tuple[Any, ...], dict[str, Any]] | None,
                   keys: dict[str, Any], res: RunResult) -> list[Any]:
    if matched is None:
        return []
    m = matched[(keys["policy"], keys["stream"], res.settings.buffer_size, res.settings.seed)]
    return [m["C"], m["kept_batches"], m["batches"], f"{m['avg']:.2f}"]


def matched_lines(report: dict[str, Any], columns: Sequence[tuple[str, int]]) -> list[str]:
    """The compute-matched section: C and the rule, a table, a ranking by its accuracy."""
    cell = {(r["policy"], r["stream"], r["buffer_size"]): r for r in report["rows"]}
    best = report["best_compute_matched"]
    lines = ["", "## Compute-matched", "", report["compute_matched"], "",
             "Each cell: the compute-matched final average accuracy, then in parentheses C "
             "(the mean over seeds) and the accuracy as measured (table above). **Bold**: the "
             "best compute-matched accuracy of the column.", "",
             "| policy | " + " | ".join(f"{s} M={m}" for s, m in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for p in report["protocol"]["policies"]:
        cells = []
        for s, m in columns:
            r = cell.get((p, s, m))
            if r is None:
                cells.append("-")
                continue
            acc = format_cell(r["matched_avg_mean"], r["matched_avg_std"])
            bold = p in best.get(f"{s} M={m}", [])
            cells.append((f"**{acc}**" if bold else acc)
                         + f" (C = {r['relative_cost_mean']:.2f}; measured {r['avg_mean']:.1f})")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines += ["", "Ranking by compute-matched accuracy (columns as in the ranking above; "
              "the train seconds are the compute-matched runs', shown beside, not ranked "
              "on):", "",
              "| rank | policy | mean rank | columns won | mean accuracy | mean train s "
              "per run | time vs fastest |",
              "|---|---|---|---|---|---|---|"]
    for t in report["ranking_compute_matched"]:
        lines.append(f"| {t['place']} | {t['policy']} | {t['mean_rank']:.2f} | {t['wins']} / "
                     f"{t['columns']} | {t['mean_accuracy']:.1f} | "
                     f"{t['mean_train_seconds']:.2f} | {t['time_vs_fastest']:.2f}× |")
    return lines


def figure(rows: Sequence[dict[str, Any]], chosen: dict[str, Any], path: str,
           title: str) -> str:
    """Accuracy against cost, one panel per stream family, a series per policy.

    With compute-matched runs (``--compute-matched``) the cost is the relative compute
    C, a pass count that does not move with the machine's load: a row of panels of the
    accuracy as measured and one of the compute-matched accuracy, both against C.
    Without, the cost is the training seconds of a run (wall time on this machine).
    A family of several streams (imbalanced sequences) gives, per seed, the mean over its
    streams; points are the means over seeds, error bars their 95 % t intervals.
    """
    if not any("matched_avg" in r for r in rows):
        return plot_panels(_panels(rows, chosen, "avg", "train_seconds", ""), path,
                           title=title)
    panels = _panels(rows, chosen, "avg", "relative_cost", ", as measured")
    panels += _panels(rows, chosen, "matched_avg", "relative_cost", ", compute-matched")
    return plot_panels(panels, path, title=title, columns=len(panels) // 2, one_legend=True)


def time_figure(rows: Sequence[dict[str, Any]], chosen: dict[str, Any], path: str,
                title: str) -> str:
    """Accuracy as measured against the training seconds of a run (wall time).

    A second figure beside :func:`figure` when that one plots against C: seconds move with
    the machine's load (read them from runs done idle, in one sweep).
    """
    return plot_panels(_panels(rows, chosen, "avg", "train_seconds", ", as measured"), path,
                       title=title, columns=None, one_legend=True)


def intervals_figure(report: dict[str, Any], path: str) -> str | None:
    """Each policy minus the best, with its 95 % interval; the recommended group filled.

    One panel as measured and, with compute-matched runs, one compute-matched. ``None``
    (nothing drawn) when the report makes no recommendation.
    """
    panels: dict[str, list[Interval]] = {}
    for way, suffix in (("as measured", ""), ("compute-matched", "_compute_matched")):
        rec = report.get("recommendation" + suffix)
        if rec is None:
            continue
        rows = [Interval(rec["best"], 0.0, 0.0, 0.0, True)]
        rows += [Interval(c["a"], c["mean_difference"], c["low"], c["high"],
                          c["a"] in rec["group"])
                 for c in sorted(rec["against_best"], key=lambda c: -c["mean_difference"])]
        panels[f"{way}: minus {rec['best']}"] = rows
    if not panels:
        return None
    seeds = len(report["protocol"]["seeds"])
    return plot_intervals(panels, path, xlabel="accuracy minus the best's (points)",
                          title=f"Each policy against the best: paired mean difference, 95 % "
                                f"interval, {seeds} seeds (filled: the recommended group)")


def figure_title(label: str, n_seeds: int, cost: str = "train time per run") -> str:
    """The figure's title for data named ``label`` (:func:`~.protocols.data_label`)."""
    return f"Accuracy vs {cost}, {label}, {n_seeds} seed(s)"


def draw(report: dict[str, Any], out: str | os.PathLike[str]) -> dict[str, str]:
    """Every figure of a report, in folder ``out``; their paths by kind.

    ``png``: :func:`figure`; with compute-matched runs ``time_png``
    (:func:`time_figure`); with a recommendation ``intervals_png``
    (:func:`intervals_figure`).

    :param report: the JSON report (completed by
        :func:`~avalanche_gss.reproduce.experiments.which_buffer_statistics.add_statistics`).
    :param out: the folder.
    """
    protocol = report["protocol"]
    chosen = {"policies": protocol["policies"], "buffer_sizes": protocol["buffer_sizes"],
              "streams": [s["name"] for s in protocol["streams"]]}
    label = label_of(report["dataset"], report.get("data_verified_as"))
    n_seeds = len(protocol["seeds"])
    rows = report["rows"]
    matched = bool(rows) and all("matched_avg" in r for r in rows)
    paths = {"png": figure(rows, chosen, os.path.join(out, f"{STEM}.png"),
                           figure_title(label, n_seeds, "relative compute C" if matched
                                        else "train time per run"))}
    if matched:
        paths["time_png"] = time_figure(rows, chosen, os.path.join(out, f"{STEM}_time.png"),
                                        figure_title(label, n_seeds, "train time per run "
                                                     "(wall time, this machine)"))
    intervals = intervals_figure(report, os.path.join(out, f"{STEM}_intervals.png"))
    if intervals is not None:
        paths["intervals_png"] = intervals
    return paths


def redraw(report_path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
           ) -> dict[str, str]:
    """Draw the figures of a ``which_buffer.json`` again, as the command draws them now.

    For a report written by an earlier version (its runs stay what they were; the
    statistics are recomputed, then the figures drawn), or figures restyled without
    running anything again.

    :param report_path: the report.
    :param out: the folder of the PNGs; the report's own by default.
    :return: the figures' paths (:func:`draw`).
    """
    from avalanche_gss.reproduce.experiments.which_buffer_statistics import restate

    report = restate(report_path)
    return draw(report, Path(report_path).parent if out is None else out)


def _panels(rows: Sequence[dict[str, Any]], chosen: dict[str, Any], acc_key: str,
            seconds_key: str, suffix: str) -> list[Panel]:
    """One panel per stream family: ``acc_key`` against ``seconds_key`` of the rows."""
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
                acc = [statistics.fmean(r[acc_key][i] for r in members) for i in range(n_seeds)]
                sec = [statistics.fmean(float(Fraction(r[seconds_key][i])) for r in members)
                       for i in range(n_seeds)]
                xs.append(statistics.fmean(sec))
                ys.append(statistics.fmean(acc))
                errs.append(_half_interval(acc))
                notes.append(f"M={m}")
            if xs:
                series.append(Series(p, xs, ys, errs, "markers",
                                     notes if len(chosen["buffer_sizes"]) > 1 else None))
        xs_all = [x for s in series for x in s.x if x > 0]
        logx = bool(xs_all) and max(xs_all) > 5 * min(xs_all)
        name = streams[0] if len(streams) == 1 else (
            f"{family} (mean over {len(streams)} streams)")
        xlabel = ("relative compute C (passes over Reservoir's)" if seconds_key ==
                  "relative_cost" else "train seconds per run (wall time)")
        panels.append(Panel(name + suffix, xlabel, "final average accuracy (%), 95 % interval",
                            series, logx=logx, data_ticks=False))
    return panels


def _half_interval(values: Sequence[float]) -> float:
    """Half the width of the 95 % t interval of the mean of ``values`` (0 for one value)."""
    if len(values) < 2:
        return 0.0
    mean, _, high = mean_interval(values)
    return high - mean
