"""What ``python -m reproduce which-buffer`` writes: its rows, ranking, table, CSV and plot."""

from __future__ import annotations

import csv
import io
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Literal, cast

from avalanche_gss.reproduce.experiments.policies import POLICIES, STREAMS
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS, label_of
from avalanche_gss.reproduce.experiments.which_buffer_matched import (
    MatchedCell,
    MatchedRun,
    RunKey,
)
from avalanche_gss.reproduce.experiments.which_buffer_records import (
    Json,
    ProtocolRecord,
    RankRecord,
    ReportRecord,
    RowRecord,
)
from avalanche_gss.reproduce.experiments.which_buffer_statistics import statistics_lines
from avalanche_gss.reproduce.reports.comparisons import mean_interval
from avalanche_gss.reproduce.reports.plotting import (
    Interval,
    Panel,
    Series,
    plot_intervals,
    plot_panels,
)
from avalanche_gss.reproduce.reports.rows import Row, warning_lines
from avalanche_gss.reproduce.reports.writing import (
    DIVERGED_SHARE,
    data_lines,
    diverged,
    format_cell,
    protocol_line,
    provenance_line,
    replay_words,
    shared_places,
)
from avalanche_gss.reproduce.runs.training import RunResult, default_retrieval

NAME = "which-buffer"
"""The experiment's name on the command line."""

STEM = "which_buffer"
"""The outputs' file name stem."""


@dataclass
class PolicyRow(Row):
    """A cell of the comparison: one policy (``keys["policy"]``) on one stream at one size.

    :param matched: its compute-matched runs (``--compute-matched``), else ``None``.
    """

    matched: MatchedCell | None = None

    @property
    def policy(self) -> str:
        """The policy's label (a key of :data:`.policies.POLICIES`)."""
        return str(self.keys["policy"])

    @property
    def stream(self) -> str:
        """The stream's name (a key of :data:`.policies.STREAMS`)."""
        return str(self.keys["stream"])

    def record(self) -> RowRecord:
        """The row as the report records it.

        :meth:`Row.to_dict`, then ``family``, ``train_seconds_mean`` and ``_std``, then
        with compute-matched runs ``relative_cost`` (exact fraction strings),
        ``relative_cost_mean``, ``kept_batches``, ``batches``, ``matched_avg``,
        ``matched_avg_mean``, ``matched_avg_std``, ``matched_train_seconds`` and
        ``matched_train_seconds_mean``.
        """
        record = cast(RowRecord, super().to_dict())  # Row's record: these keys, untyped
        record["family"] = STREAMS[self.stream].family
        record["train_seconds_mean"] = statistics.fmean(self.train_seconds)
        record["train_seconds_std"] = _std(self.train_seconds)
        m = self.matched
        if m is not None:
            record["relative_cost"] = [str(r.job.c) for r in m.runs]
            record["relative_cost_mean"] = m.relative_cost_mean
            record["kept_batches"] = [r.job.kept_batches for r in m.runs]
            record["batches"] = [r.job.batches for r in m.runs]
            record["matched_avg"] = m.avg
            record["matched_avg_mean"] = statistics.fmean(m.avg)
            record["matched_avg_std"] = _std(m.avg)
            record["matched_train_seconds"] = m.train_seconds
            record["matched_train_seconds_mean"] = statistics.fmean(m.train_seconds)
        return record


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


@dataclass(frozen=True)
class Placing:
    """A policy's place in a ranking.

    :param policy: the policy.
    :param mean_rank: its rank in each column, averaged over the columns.
    :param wins: the columns where it has the best accuracy (a tie counts for each).
    :param columns: the columns it ran in.
    :param mean_accuracy: its mean accuracy over the columns.
    :param mean_train_seconds: its mean training seconds of one run over the columns.
    :param time_vs_fastest: the mean over the columns of its time over the fastest's.
    :param place: its place, ``"=2"`` when it shares its mean rank at two decimals.
    """

    policy: str
    mean_rank: float
    wins: int
    columns: int
    mean_accuracy: float
    mean_train_seconds: float
    time_vs_fastest: float
    place: str = ""

    def record(self) -> RankRecord:
        """The placing as the report records it."""
        return cast(RankRecord, asdict(self))


@dataclass(frozen=True)
class Ranking:
    """The policies ranked over the columns, and each column's best.

    :param table: the placings, best first (by mean rank, then mean accuracy).
    :param best: each column's best policies (highest mean accuracy at the table's
        precision), keyed ``"stream M=m"``.
    """

    table: list[Placing]
    best: dict[str, list[str]]

    def records(self) -> list[RankRecord]:
        """The placings as the report records them."""
        return [t.record() for t in self.table]


@dataclass
class _Tally:
    """One policy's per-column ranks, accuracies, seconds and time over the fastest's."""

    ranks: list[float]
    accs: list[float]
    secs: list[float]
    slow: list[float]
    wins: int = 0


def _tally(rows: Sequence[RowRecord], policies: Sequence[str],
           columns: Sequence[tuple[str, int]]) -> tuple[dict[str, _Tally], dict[str, list[str]]]:
    """Each policy's per-column values, and each column's best policies."""
    cell = {(r["policy"], r["stream"], r["buffer_size"]): r for r in rows}
    tally = {p: _Tally([], [], [], []) for p in policies}
    best: dict[str, list[str]] = {}
    for stream, m in columns:
        here = {p: cell[(p, stream, m)] for p in policies if (p, stream, m) in cell}
        if not here:
            continue
        shown = {p: round(r["avg_mean"], 1) for p, r in here.items()}
        top = max(shown.values())
        best[f"{stream} M={m}"] = [p for p, v in shown.items() if v == top]
        for p in best[f"{stream} M={m}"]:
            tally[p].wins += 1
        fastest = min(r["train_seconds_mean"] for r in here.values())
        for p, rank in _ranks(shown).items():
            t, r = tally[p], here[p]
            t.ranks.append(rank)
            t.accs.append(r["avg_mean"])
            t.secs.append(r["train_seconds_mean"])
            t.slow.append(r["train_seconds_mean"] / fastest if fastest > 0 else 1.0)
    return tally, best


def ranking(rows: Sequence[RowRecord], policies: Sequence[str],
            columns: Sequence[tuple[str, int]]) -> Ranking:
    """Rank the policies in each column (stream x buffer size) and overall.

    :param rows: the report's rows (one per policy, stream and buffer size).
    :param policies: the policies, in table order.
    :param columns: ``(stream, buffer size)`` of each column.
    :return: the policies sorted by mean rank, then by mean accuracy, and each column's
        best policies (:class:`Ranking`).
    """
    tally, best = _tally(rows, policies, columns)
    table = [Placing(p, statistics.fmean(t.ranks), t.wins, len(t.ranks),
                     statistics.fmean(t.accs), statistics.fmean(t.secs),
                     statistics.fmean(t.slow))
             for p, t in tally.items() if t.ranks]
    table.sort(key=lambda t: (round(t.mean_rank, 2), -t.mean_accuracy))
    places = shared_places([round(t.mean_rank, 2) for t in table])
    return Ranking([replace(t, place=place) for t, place in zip(table, places, strict=True)],
                   best)


def _cell(row: RowRecord, bold: bool) -> str:
    acc = format_cell(row["avg_mean"], row["avg_std"])
    mark = " ‡" if any(row.get("diverged", [])) else ""
    return (f"**{acc}**" if bold else acc) + f" ({row['train_seconds_mean']:.1f} s){mark}"


def _cells(rows: Sequence[RowRecord]) -> dict[tuple[str, str, int], RowRecord]:
    """The rows by policy, stream and buffer size."""
    return {(r["policy"], r["stream"], r["buffer_size"]): r for r in rows}


def protocol_lines(report: ReportRecord) -> list[str]:
    """The protocol as run: what every stream shares, then one line per stream.

    :param report: the JSON report (its ``protocol``).
    """
    protocol = report["protocol"]
    seeds = protocol["seeds"]
    lines = [f"Protocol: M = {'/'.join(map(str, protocol['buffer_sizes']))}; "
             + ("seeds " if len(seeds) > 1 else "seed ") + " ".join(map(str, seeds))
             + f"; {replay_words(protocol['batch_size'], protocol['replay_batch_size'])}"
             + (f"; MIR scores {protocol['mir_candidates']} buffer samples per replay step"
                if protocol.get("mir_candidates") else "")
             + f"; the {protocol['model']} model; each stream "
             "with its protocol's learning rate and iterations per batch:", ""]
    for s in protocol["streams"]:
        stream = {**s["stream"], "blurry": s.get("blur") and {"keep": s["blur"]}}
        # A stream of one's own with its own protocol: no paper's settings to name.
        ref = PROTOCOLS[s["protocol"]].paper_ref if s["protocol"] in PROTOCOLS else None
        whose = f"{ref}'s settings" if ref else "its own protocol's settings"
        name = (f"- {s['name']} ({s['description']}; {whose}): " if "description" in s
                else f"- {s['name']} ({ref}'s {s['family']} stream): ")
        text = protocol_line({"stream": stream, "lr": s["lr"], "n_iter": s["n_iter"]},
                             prefix=name) or name
        if s["deviations"]:
            text += " Deviations from the paper's protocol: " + "; ".join(s["deviations"]) + "."
        lines.append(text)
    return lines


def _header(columns: Sequence[tuple[str, int]]) -> list[str]:
    return ["| policy | " + " | ".join(f"{s} M={m}" for s, m in columns) + " |",
            "|---|" + "---|" * len(columns)]


def _table_lines(report: ReportRecord, columns: Sequence[tuple[str, int]]) -> list[str]:
    """The legend, then the table: a row per policy, a column per stream and size."""
    seeds = report["protocol"]["seeds"]
    cell = _cells(report["rows"])
    best = report["best"]
    spread = (f"mean ± std over {len(seeds)} seeds" if len(seeds) > 1
              else "one seed, so no spread")
    lines = [
        "Columns: a stream (see Protocol) at a buffer size M. Each cell: final average "
        f"accuracy over the stream's tasks ({spread}), and in "
        "parentheses the mean training time of one run in seconds (evaluation excluded). "
        "**Bold**: the best policy of the column. Times are wall-clock on this machine "
        f"with {report['protocol']['workers']} run(s) at a time and "
        f"{report['provenance']['threads']} torch thread(s) each, read from the cache for "
        "runs done before: compare them within one table.", "", *_header(columns)]
    for p in report["protocol"]["policies"]:
        cells = []
        for s, m in columns:
            r = cell.get((p, s, m))
            cells.append(_cell(r, p in best.get(f"{s} M={m}", [])) if r else "-")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _ranking_table(table: Sequence[RankRecord]) -> list[str]:
    """A ranking as a Markdown table."""
    lines = ["| rank | policy | mean rank | columns won | mean accuracy | mean train s "
             "per run | time vs fastest |",
             "|---|---|---|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['place']} | {t['policy']} | {t['mean_rank']:.2f} | {t['wins']} / "
                     f"{t['columns']} | {t['mean_accuracy']:.1f} | "
                     f"{t['mean_train_seconds']:.2f} | {t['time_vs_fastest']:.2f}× |")
    return lines


def _ranking_lines(report: ReportRecord, columns: Sequence[tuple[str, int]]) -> list[str]:
    """The ranking section: its legend, then its table."""
    one_seed = len(report["protocol"]["seeds"]) < 2
    return ["", "## Ranking", "",
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
               "ranking; it makes no recommendation.**" if one_seed else ""), "",
            *_ranking_table(report["ranking"])]


def _policy_lines(report: ReportRecord) -> list[str]:
    """The policies left out, then each policy's keywords."""
    lines = []
    left_out = report["protocol"].get("policies_left_out") or {}
    if left_out:
        lines += ["", "Left out of the default policies: "
                  + "; ".join(f"{p} ({why})" for p, why in left_out.items()) + "."]
    protocol = report["protocol"]
    tuned = protocol.get("tuned_lr") or {}
    if tuned:
        grid = ", ".join(f"{lr:g}" for lr in protocol.get("lr_grid", []))
        seeds = " ".join(map(str, protocol.get("tune_seeds", [])))
        lines += ["", f"Learning rates tuned per policy over {grid}, on seeds {seeds} (not "
                  "reported here), every stream and buffer size; each policy runs at the rate "
                  "of its best mean accuracy there (each seed the mix of the families):", ""]
        for p, lr in tuned.items():
            scores = protocol.get("tuning", {}).get(p, {})
            tried = ", ".join(f"{float(k):g}: {v:.1f}" for k, v in scores.items())
            lines.append(f"- {p}: lr {lr:g} ({tried})")
    lines += ["", "Policies (RunSettings keywords; the step schedule: the incoming and the "
              "replay batch in one joint SGD step per iteration, or in separate steps):", ""]
    for p in protocol["policies"]:
        policy = POLICIES[p]
        keywords = ", ".join(f"{k}={v}" for k, v in policy.keywords().items())
        own = default_retrieval(policy.method)
        if "retrieval" not in policy.settings and own != "random":
            keywords += f" (its own retrieval: {own})"
        schedule = "joint step" if policy.settings.get("joint") else "separate steps"
        lines.append(f"- {p}: {keywords}; {schedule}"
                     + (f"; lr {tuned[p]:g} (tuned)" if p in tuned else ""))
    return lines


def markdown(report: ReportRecord, columns: Sequence[tuple[str, int]], png: str) -> str:
    """The Markdown report: the table, the ranking, the policies, the provenance.

    :param report: the JSON report (rows as :meth:`PolicyRow.record` records them).
    :param columns: ``(stream, buffer size)`` of each column.
    :param png: the figure's path.
    """
    lines = [f"# {NAME}: {report['title']}", "", *data_lines(dict(report)),
             *protocol_lines(report), "", *_table_lines(report, columns),
             *_ranking_lines(report, columns)]
    if "ranking_compute_matched" in report:
        lines += matched_lines(report, columns)
    lines += statistics_lines(report)
    lines += _policy_lines(report)
    if any(any(r.get("diverged", [])) for r in report["rows"]):
        lines += ["", f"‡: a run skipped more than {DIVERGED_SHARE:.0%} of its training "
                  "iterations and diverged: its accuracy says nothing about the policy."]
    lines += warning_lines(report["rows"], lambda r: f"{r['policy']}, {r['stream']}, "
                                                     f"M={r['buffer_size']}")
    lines += ["", f"Buffer composition along the stream: `{STEM}_composition.md`.",
              "", provenance_line(report["provenance"]), "", f"Plot: `{png}`"
              + ("; each policy against the best, with intervals: "
                 f"`{STEM}_intervals.png`" if report.get("recommendation") else ""), "",
              f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def runs_csv(pairs: Sequence[tuple[dict[str, str], RunResult]], prov: dict[str, Json],
             matched: dict[RunKey, MatchedRun] | None = None, data: str = "") -> str:
    """One line per run: policy, stream, buffer size, seed, accuracies, time, device, data.

    :param pairs: each run's row keys (``policy``, ``stream``) and result.
    :param prov: the report's provenance (``device``, ``threads``).
    :param matched: with ``--compute-matched``, each run's compute-matched run by
        ``(policy, stream, buffer size, seed)``: four more columns (``C``, kept batches,
        batches, accuracy).
    :param data: the data the runs used (the dataset's name, e.g. ``cifar10-standin``).
    """
    n_tasks = max(len(res.task_accuracy) for _, res in pairs)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["policy", "method", "options", "stream", "family", "buffer_size",
                     "batch_size", "replay_batch_size", "seed",
                     "avg", *[f"T{k + 1}" for k in range(n_tasks)], "train_seconds",
                     "skipped_steps", "diverged", "device", "threads", "data",
                     *(("relative_cost", "kept_batches", "batches", "matched_avg")
                       if matched is not None else ())])
    for keys, res in pairs:
        options = ";".join(f"{k}={v}" for k, v in POLICIES[keys["policy"]].settings.items())
        accs = [f"{a:.2f}" for a in res.task_accuracy]
        writer.writerow([keys["policy"], res.settings.method, options, keys["stream"],
                         STREAMS[keys["stream"]].family, res.settings.buffer_size,
                         res.settings.batch_size, res.settings.replay_batch_size,
                         res.settings.seed, f"{res.avg:.2f}",
                         *accs, *[""] * (n_tasks - len(accs)), f"{res.train_seconds:.3f}",
                         res.extras.get("skipped_steps", 0), diverged(res.extras),
                         prov["device"], prov["threads"], data,
                         *_matched_cells(matched, keys, res)])
    return buffer.getvalue()


def _matched_cells(matched: dict[RunKey, MatchedRun] | None, keys: dict[str, str],
                   res: RunResult) -> list[str | int]:
    if matched is None:
        return []
    m = matched[(keys["policy"], keys["stream"], res.settings.buffer_size, res.settings.seed)]
    return [str(m.job.c), m.job.kept_batches, m.job.batches, f"{m.avg:.2f}"]


def matched_lines(report: ReportRecord, columns: Sequence[tuple[str, int]]) -> list[str]:
    """The compute-matched section: C and the rule, a table, a ranking by its accuracy.

    :param report: the JSON report, with compute-matched runs.
    :param columns: ``(stream, buffer size)`` of each column.
    """
    cell = _cells(report["rows"])
    best = report["best_compute_matched"]
    lines = ["", "## Compute-matched", "", report["compute_matched"], "",
             "Each cell: the compute-matched final average accuracy, then in parentheses C "
             "(the mean over seeds) and the accuracy as measured (table above). **Bold**: the "
             "best compute-matched accuracy of the column.", "", *_header(columns)]
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
    return [*lines, "", "Ranking by compute-matched accuracy (columns as in the ranking "
            "above; the train seconds are the compute-matched runs', shown beside, not ranked "
            "on):", "", *_ranking_table(report["ranking_compute_matched"])]


Accuracy = Literal["avg", "matched_avg"]
"""A row's per-seed accuracies: as measured, or compute-matched."""

Cost = Literal["train_seconds", "relative_cost"]
"""A row's per-seed cost: training seconds, or relative compute C (exact fractions)."""


@dataclass(frozen=True)
class Layout:
    """What a figure shows: its policies (series), streams (panels) and buffer sizes.

    :param policies: the policies, in legend order.
    :param streams: the streams, grouped into a panel per family.
    :param buffer_sizes: the buffer sizes, a point each.
    """

    policies: Sequence[str]
    streams: Sequence[str]
    buffer_sizes: Sequence[int]

    @classmethod
    def of(cls, protocol: ProtocolRecord) -> Layout:
        """A report's layout, from its protocol.

        :param protocol: the report's ``protocol``.
        """
        return cls(protocol["policies"], [s["name"] for s in protocol["streams"]],
                   protocol["buffer_sizes"])


def figure(rows: Sequence[RowRecord], layout: Layout, path: str, title: str) -> str:
    """Accuracy against cost, one panel per stream family, a series per policy.

    With compute-matched runs (``--compute-matched``) the cost is the relative compute
    C, a pass count that does not move with the machine's load: a row of panels of the
    accuracy as measured and one of the compute-matched accuracy, both against C.
    Without, the cost is the training seconds of a run (wall time on this machine).
    A family of several streams (imbalanced sequences) gives, per seed, the mean over its
    streams; points are the means over seeds, error bars their 95 % t intervals; a point's
    seconds are the median of its runs' (one slow run does not move it).

    :param rows: the report's rows.
    :param layout: its policies, streams and buffer sizes.
    :param path: the PNG to write.
    :param title: the figure's title.
    """
    if not any("matched_avg" in r for r in rows):
        return plot_panels(_panels(rows, layout, "avg", "train_seconds", ""), path,
                           title=title)
    panels = _panels(rows, layout, "avg", "relative_cost", ", as measured")
    panels += _panels(rows, layout, "matched_avg", "relative_cost", ", compute-matched")
    return plot_panels(panels, path, title=title, columns=len(panels) // 2, one_legend=True)


def time_figure(rows: Sequence[RowRecord], layout: Layout, path: str, title: str) -> str:
    """Accuracy as measured against the training seconds of a run (wall time).

    A second figure beside :func:`figure` when that one plots against C: seconds move with
    the machine's load (read them from runs done idle, in one sweep).

    :param rows: the report's rows.
    :param layout: its policies, streams and buffer sizes.
    :param path: the PNG to write.
    :param title: the figure's title.
    """
    return plot_panels(_panels(rows, layout, "avg", "train_seconds", ", as measured"), path,
                       title=title, columns=None, one_legend=True)


def intervals_figure(report: ReportRecord, path: str) -> str | None:
    """Each policy minus the best, with the interval its class was read from; the group filled.

    One panel as measured and, with compute-matched runs, one compute-matched. ``None``
    (nothing drawn) when the report makes no recommendation.

    :param report: the JSON report, with its statistics.
    :param path: the PNG to write.
    """
    panels: dict[str, list[Interval]] = {}
    level = ""
    for way, rec in (("as measured", report.get("recommendation")),
                     ("compute-matched", report.get("recommendation_compute_matched"))):
        if rec is None:
            continue
        panels[f"{way}: minus {rec['best']}"] = [
            Interval(c["policy"], c["mean_difference"], c["low"], c["high"],
                     c["policy"] in rec["group"]) for c in rec["classes"]]
        level = (f"Bonferroni over {len(rec['classes']) - 1}, margin ±{rec['delta']:g}, "
                 f"{rec['seeds']} seeds")
    if not panels:
        return None
    return plot_intervals(panels, path, xlabel="accuracy minus the best's (points)",
                          title=f"Each policy against the best: paired mean difference over "
                                f"the seeds, interval {level} (filled: the best and those "
                                "shown equivalent)")


def figure_title(label: str, n_seeds: int, cost: str = "train time per run") -> str:
    """The figure's title for data named ``label`` (:func:`~.protocols.data_label`).

    :param label: the data's name in titles.
    :param n_seeds: the seeds the points are means over.
    :param cost: what the x axis is.
    """
    return f"Accuracy vs {cost}, {label}, {n_seeds} seed(s)"


def draw(report: ReportRecord, out: str | os.PathLike[str]) -> dict[str, str]:
    """Every figure of a report, in folder ``out``; their paths by kind.

    ``png``: :func:`figure`; with compute-matched runs ``time_png``
    (:func:`time_figure`); with a recommendation ``intervals_png``
    (:func:`intervals_figure`).

    :param report: the JSON report (completed by
        :func:`~avalanche_gss.reproduce.experiments.which_buffer_statistics.add_statistics`).
    :param out: the folder.
    """
    protocol = report["protocol"]
    layout = Layout.of(protocol)
    label = label_of(report["dataset"], report.get("data_verified_as"))
    n_seeds = len(protocol["seeds"])
    rows = report["rows"]
    matched = bool(rows) and all("matched_avg" in r for r in rows)
    paths = {"png": figure(rows, layout, os.path.join(out, f"{STEM}.png"),
                           figure_title(label, n_seeds, "relative compute C" if matched
                                        else "train time per run"))}
    if matched:
        paths["time_png"] = time_figure(rows, layout, os.path.join(out, f"{STEM}_time.png"),
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


def _point(members: Sequence[RowRecord], acc_key: Accuracy, cost_key: Cost
           ) -> tuple[float, float, float]:
    """One point: its cost, mean accuracy over seeds, the accuracy's half interval.

    Each seed's accuracy is the mean over ``members`` (the streams of a family). The cost
    is the mean over seeds of C (a pass count), but the median of the runs' training
    seconds: seconds move with the machine's load, and one run slowed by something else
    would move a mean, not the median.
    """
    n_seeds = len(members[0]["seeds"])
    acc = [statistics.fmean(r[acc_key][i] for r in members) for i in range(n_seeds)]
    if cost_key == "train_seconds":
        cost = statistics.median(float(t) for r in members for t in r["train_seconds"])
    else:
        cost = statistics.fmean(statistics.fmean(float(Fraction(r[cost_key][i]))
                                                 for r in members) for i in range(n_seeds))
    return cost, statistics.fmean(acc), _half_interval(acc)


def _series(cell: dict[tuple[str, str, int], RowRecord], policy: str, streams: Sequence[str],
            layout: Layout, acc_key: Accuracy, cost_key: Cost) -> Series | None:
    """One policy's points over the buffer sizes, on the streams of one panel."""
    xs, ys, errs, notes = [], [], [], []
    for m in sorted(layout.buffer_sizes):
        members = [cell[(policy, s, m)] for s in streams if (policy, s, m) in cell]
        if not members:
            continue
        x, y, err = _point(members, acc_key, cost_key)
        xs.append(x)
        ys.append(y)
        errs.append(err)
        notes.append(f"M={m}")
    if not xs:
        return None
    return Series(policy, xs, ys, errs, "markers",
                  notes if len(layout.buffer_sizes) > 1 else None)


def _panels(rows: Sequence[RowRecord], layout: Layout, acc_key: Accuracy, cost_key: Cost,
            suffix: str) -> list[Panel]:
    """One panel per stream family: ``acc_key`` against ``cost_key`` of the rows."""
    families: dict[str, list[str]] = {}
    for s in layout.streams:
        families.setdefault(STREAMS[s].family, []).append(s)
    cell = _cells(rows)
    panels = []
    for family, streams in families.items():
        series = [line for p in layout.policies
                  if (line := _series(cell, p, streams, layout, acc_key, cost_key)) is not None]
        xs_all = [x for s in series for x in s.x if x > 0]
        logx = bool(xs_all) and max(xs_all) > 5 * min(xs_all)
        name = streams[0] if len(streams) == 1 else (
            f"{family} (mean over {len(streams)} streams)")
        xlabel = ("relative compute C (passes over Reservoir's)" if cost_key ==
                  "relative_cost" else "train seconds per run (wall time, median over runs)")
        panels.append(Panel(name + suffix, xlabel, "final average accuracy (%), 95 % interval",
                            series, logx=logx, data_ticks=False))
    return panels


def _half_interval(values: Sequence[float]) -> float:
    """Half the width of the 95 % t interval of the mean of ``values`` (0 for one value)."""
    if len(values) < 2:
        return 0.0
    mean, _, high = mean_interval(values)
    return high - mean
