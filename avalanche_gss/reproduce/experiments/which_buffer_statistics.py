"""which-buffer's answer with its uncertainty: paired comparisons, ablations, recommendation.

Every run of a policy is paired with every other policy's run on the same stream, buffer
size and seed (:mod:`~avalanche_gss.reproduce.reports.comparisons`). From a report's rows this
module computes, as measured and (with ``--compute-matched``) compute-matched:

- ``recommendation``: the group of policies not significantly worse than the best and
  the cheapest of them (:func:`~avalanche_gss.reproduce.reports.comparisons.recommend`), for the
  data the report ran on; ``None`` with one seed (:data:`NO_RECOMMENDATION` says why), or
  with too few (column, seed) pairs for any test to decide (``recommendation_note`` says
  how many more seeds would);
- ``comparisons``: every pair of policies, Holm-corrected over all pairs;
- ``ablations``: the questions of :data:`ABLATIONS`, each a paired mean difference with
  its interval, Holm-corrected over the ablations;
- ``stability``: the recommendation made again on each half of the seeds, and whether
  each half's pick lies in the other half's group (:func:`stability`).

:func:`add_statistics` adds them to a report; :func:`statistics_lines` writes them as
Markdown; :func:`restate` recomputes them for a ``which_buffer.json`` already written.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from avalanche_gss._files import read_regular
from avalanche_gss.reproduce.experiments.protocols import label_of
from avalanche_gss.reproduce.experiments.which_buffer_records import (
    AblationRecord,
    AdviceRecord,
    EquivalenceRecord,
    ReportRecord,
    RowRecord,
    ScopeRecord,
    SequentialRecord,
    StabilityRecord,
)
from avalanche_gss.reproduce.reports.comparisons import (
    ALPHA,
    MIN_SEEDS,
    Comparison,
    ComparisonRecord,
    Recommendation,
    RecommendationRecord,
    TooFewPairs,
    compare,
    pairs_needed,
    recommend,
)
from avalanche_gss.reproduce.reports.equivalence import ALPHA as EQUIVALENCE_ALPHA
from avalanche_gss.reproduce.reports.equivalence import (
    COST_TOLERANCE,
    DELTA,
    classify,
    family_weights,
    pick,
    seed_means,
)
from avalanche_gss.reproduce.reports.sequential import SequentialResult, run_sequential

__all__ = ["ABLATIONS", "AS_MEASURED", "COMPUTE_MATCHED", "NO_RECOMMENDATION", "Ablation",
           "Advice", "EQUIVALENCE_RULE", "Stability", "Way", "add_statistics", "equivalence",
           "equivalence_lines", "paired_values", "sequential_lines", "sequential_replay",
           "recommendation_sentence", "restate", "stability", "statistics_lines"]

ABLATIONS: tuple[tuple[str, str, str], ...] = (
    ("the gradient score, with the loss", "CB-GSS (step)+LA", "CBRS+OC+LA"),
    ("the gradient score", "CB-GSS", "CBRS+OC"),
    ("the gradient score, read off the training step", "CB-GSS (step)", "CBRS+OC"),
    ("the logit-adjusted loss, on Reservoir", "ER+LA", "Reservoir"),
    ("the logit-adjusted loss, on CBRS+OC", "CBRS+OC+LA", "CBRS+OC"),
    ("the logit-adjusted loss, on CB-GSS (step)", "CB-GSS (step)+LA", "CB-GSS (step)"),
    ("the class quotas", "CBRS", "Reservoir"),
    ("the other-class replay", "CBRS+OC", "CBRS"),
    ("ER-ACE's loss in a joint step, on Reservoir", "ER-ACE", "Reservoir"),
    ("ER-ACE's loss, against its paper's baseline (the same joint step)", "ER-ACE",
     "ER (joint)"),
    ("the joint step, on Reservoir", "ER (joint)", "Reservoir"),
    ("momentum distillation (MKD), on Reservoir", "ER+MKD", "Reservoir"),
    ("the reducible-loss selection, against reservoir sampling", "CSReL", "Reservoir"),
)
"""Each ablation: what it asks (what the first policy adds to the second), and the pair."""

NO_RECOMMENDATION = ("one seed is not a ranking: with a single seed, a policy's luck on that "
                     "seed's streams and initial weights cannot be told from the policy, so "
                     f"no recommendation is made; run at least {MIN_SEEDS} seeds (the "
                     "default runs enough to decide)")
"""Why a report of fewer than :data:`~avalanche_gss.reproduce.reports.comparisons.MIN_SEEDS` seeds
recommends nothing."""

Accuracy = Literal["avg", "matched_avg"]
"""A row's per-seed accuracies: as measured, or compute-matched."""


EQUIVALENCE_RULE = (
    "each seed's accuracy is averaged over the columns, each stream family weighing as "
    "stated and its columns alike; against the best (the highest mean over the seeds), each "
    "policy's paired difference over the seeds has a t interval at the Bonferroni level "
    "over the policies compared with it (the interval printed is the one decided on); "
    "equivalent: the interval lies inside (-delta, +delta) (two one-sided t-tests); worse: "
    "it lies below 0; undecided: neither; pick: the cheapest of the best and the "
    "equivalent policies, costs within the tolerance counting as equal (then the most "
    "accurate)")
"""The equivalence rule in words, as the report records it."""


@dataclass(frozen=True)
class Way:
    """One way of reading the runs, and the report's keys of its statistics.

    :param words: how the Markdown names it.
    :param value: the rows' per-seed accuracies it compares.
    :param recommendation: the report's key of its recommendation.
    :param comparisons: ... of every pair of policies.
    :param ablations: ... of the ablations.
    :param stability: ... of the recommendation on each half of the seeds.
    :param equivalence: ... of the equivalence classes against the best.
    """

    words: str
    value: Accuracy
    recommendation: Literal["recommendation", "recommendation_compute_matched"]
    comparisons: Literal["comparisons", "comparisons_compute_matched"]
    ablations: Literal["ablations", "ablations_compute_matched"]
    stability: Literal["stability", "stability_compute_matched"]
    equivalence: Literal["equivalence", "equivalence_compute_matched"]


AS_MEASURED = Way("as measured", "avg", "recommendation", "comparisons", "ablations",
                  "stability", "equivalence")
"""The runs as measured."""

COMPUTE_MATCHED = Way("compute-matched", "matched_avg", "recommendation_compute_matched",
                      "comparisons_compute_matched", "ablations_compute_matched",
                      "stability_compute_matched", "equivalence_compute_matched")
"""The compute-matched runs (``--compute-matched``)."""


@dataclass(frozen=True)
class Advice:
    """The recommendation for a report's runs, with what its group's policies cost.

    :param recommendation: the rule applied to the runs.
    :param mean_cost: each policy of the group's cost.
    :param cost: what the cost is (``"C"``, or the training seconds without pass counts).
    """

    recommendation: Recommendation
    mean_cost: dict[str, float]
    cost: str

    def record(self) -> AdviceRecord:
        """The recommendation as the report records it: its fields, then the costs."""
        record = self.recommendation.to_dict()
        return AdviceRecord(**record, mean_cost=self.mean_cost, cost=self.cost)


@dataclass(frozen=True)
class Ablation:
    """One ablation: what it asks and the paired comparison that answers it.

    :param question: what the first policy adds to the second.
    :param comparison: the first policy against the second.
    """

    question: str
    comparison: Comparison

    def record(self) -> AblationRecord:
        """The ablation as the report records it: the question, then the comparison."""
        return AblationRecord(question=self.question, **self.comparison.to_dict())


@dataclass(frozen=True)
class Stability:
    """The recommendation made on each half of the seeds.

    :param halves: the seeds of each half.
    :param picks: each half's pick.
    :param groups: each half's group.
    :param holds: whether each half's pick lies in the other half's group.
    """

    halves: list[list[int]]
    picks: list[str]
    groups: list[list[str]]
    holds: bool

    def record(self) -> StabilityRecord:
        """The check as the report records it."""
        return StabilityRecord(halves=self.halves, picks=self.picks, groups=self.groups,
                               holds=self.holds)


def paired_values(rows: Sequence[RowRecord], key: Accuracy = "avg"
                  ) -> dict[str, dict[tuple[str, int, int], float]]:
    """Each policy's accuracy per ``(stream, buffer size, seed)``, from a report's rows.

    :param rows: the report's rows (one per policy, stream and buffer size, with ``seeds``
        and, per seed, ``key``).
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    """
    values: dict[str, dict[tuple[str, int, int], float]] = {}
    for r in rows:
        mine = values.setdefault(r["policy"], {})
        for seed, acc in zip(r["seeds"], r[key], strict=True):
            mine[(r["stream"], int(r["buffer_size"]), int(seed))] = float(acc)
    return values


def _costs(rows: Sequence[RowRecord]) -> tuple[dict[str, float], str]:
    """Each policy's cost: its mean relative compute C, else its runs' median seconds.

    Seconds move with the machine's load: the median over a policy's runs is not moved
    by one run slowed by something else, where a mean would be.
    """
    counted = all("relative_cost_mean" in r for r in rows)
    by: dict[str, list[float]] = {}
    for r in rows:
        if counted:
            by.setdefault(r["policy"], []).append(float(r["relative_cost_mean"]))
        else:
            by.setdefault(r["policy"], []).extend(float(t) for t in r["train_seconds"])
    if counted:
        return {p: statistics.fmean(v) for p, v in by.items()}, "C"
    return {p: statistics.median(v) for p, v in by.items()}, "median train seconds per run"


def _data(report: ReportRecord) -> str:
    return label_of(report["dataset"], report.get("data_verified_as"))


def _advice(rows: Sequence[RowRecord], data: str, key: Accuracy) -> Advice:
    """The recommendation rule applied to the rows' runs, with the group's costs."""
    values = paired_values(rows, key)
    columns: dict[Hashable, Hashable] = {k: (k[0], k[1]) for v in values.values() for k in v}
    cost, cost_name = _costs(rows)
    rec = recommend(values, columns, cost, data, cost_name)
    return Advice(rec, {p: cost[p] for p in rec.group}, cost_name)


def _ablations(values: dict[str, dict[tuple[str, int, int], float]]) -> list[Ablation]:
    """The ablations whose two policies ran, Holm-corrected over them."""
    asked = [(q, a, b) for q, a, b in ABLATIONS if a in values and b in values]
    ablated = compare(values, [(a, b) for _, a, b in asked])
    return [Ablation(q, c) for (q, _, _), c in zip(asked, ablated, strict=True)]


def _half(rows: Sequence[RowRecord], seeds: Sequence[int]) -> list[RowRecord]:
    """The rows with only the runs of ``seeds``."""
    keep = set(seeds)
    half = []
    for r in rows:
        at = [i for i, s in enumerate(r["seeds"]) if s in keep]
        row = r.copy()
        row["seeds"] = [r["seeds"][i] for i in at]
        if "avg" in r:
            row["avg"] = [r["avg"][i] for i in at]
        if "matched_avg" in r:
            row["matched_avg"] = [r["matched_avg"][i] for i in at]
        if "train_seconds" in r:
            row["train_seconds"] = [r["train_seconds"][i] for i in at]
        half.append(row)
    return half


def stability(report: ReportRecord, key: Accuracy = "avg") -> Stability | None:
    """The recommendation made on each half of the seeds, and whether the halves agree.

    They agree when each half's pick lies in the other half's group. ``None`` with fewer
    than ``2 x MIN_SEEDS`` seeds, or when a half's pairs are too few to decide
    (:class:`~avalanche_gss.reproduce.reports.comparisons.TooFewPairs`).

    :param report: a which-buffer report.
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    """
    seeds = list(report["protocol"]["seeds"])
    if len(seeds) < 2 * MIN_SEEDS:
        return None
    halves = [seeds[: len(seeds) // 2], seeds[len(seeds) // 2:]]
    try:
        recs = [_advice(_half(report["rows"], h), _data(report), key).recommendation
                for h in halves]
    except TooFewPairs:
        return None
    holds = recs[0].pick in recs[1].group and recs[1].pick in recs[0].group
    return Stability(halves, [r.pick for r in recs], [list(r.group) for r in recs], holds)


def _ways(report: ReportRecord) -> list[Way]:
    """As measured, and compute-matched when every row holds compute-matched runs."""
    rows = report["rows"]
    matched = bool(rows) and all("matched_avg" in r for r in rows)
    return [AS_MEASURED, COMPUTE_MATCHED] if matched else [AS_MEASURED]


def _column_cells(rows: Sequence[RowRecord], key: Accuracy
                  ) -> tuple[dict[str, str], dict[str, dict[tuple[str, int], float]],
                             list[tuple[str, str]]]:
    """A report's accuracies per policy and ``("STREAM/M", seed)``, and its columns.

    :return: each stream's family (a row without one: its stream's own), the cells, and
        every ``("STREAM/M", family)`` column, sorted.
    """
    values = paired_values(rows, key)
    family_of = {r["stream"]: r.get("family", r["stream"]) for r in rows}
    cells = {p: {(f"{s}/{m}", seed): v for (s, m, seed), v in per.items()}
             for p, per in values.items()}
    columns = sorted({(f"{s}/{m}", family_of[s]) for per in values.values()
                      for (s, m, _) in per}, key=lambda c: c[0])
    return family_of, cells, columns


def equivalence(rows: Sequence[RowRecord], key: Accuracy = "avg",
                delta: float = DELTA, families: Mapping[str, float] | None = None
                ) -> EquivalenceRecord:
    """Each policy classed against the best, for the mix of the families and for each.

    (:mod:`~avalanche_gss.reproduce.reports.equivalence`: seeds as replicates, paired t
    intervals at the Bonferroni level, two one-sided tests.) The pick is the cheapest of
    the best and the policies equivalent to it, its cost the relative compute ``C`` where
    the rows hold it, else the median training seconds.

    :param rows: the report's rows.
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    :param delta: the practical margin, in points.
    :param families: the mix's weight of each stream family (``None``: equal).
    :raises ValueError: fewer than 2 seeds or policies, or policies run on other columns.
    """
    family_of, cells, columns = _column_cells(rows, key)
    present = list(dict.fromkeys(family_of[r["stream"]] for r in rows))
    scopes: list[ScopeRecord] = []
    for scope in ("mix", *present):
        wanted = families if scope == "mix" else {scope: 1.0}
        weights = family_weights(columns, wanted)
        shares = {f: math.fsum(weights[c] for c, g in columns if g == f) for f in present}
        classed = classify(seed_means(cells, weights), delta=delta)
        scoped = [r for r in rows if scope == "mix" or family_of[r["stream"]] == scope]
        costs, _ = _costs(scoped)
        scopes.append(ScopeRecord(scope=scope, weights=shares, best=classed[0].policy,
                                  pick=pick(classed, costs),
                                  classes=[c.to_dict() for c in classed]))
    return EquivalenceRecord(delta=delta, alpha=EQUIVALENCE_ALPHA, cost=_costs(rows)[1],
                             cost_tolerance=COST_TOLERANCE, rule=EQUIVALENCE_RULE,
                             scopes=scopes)


def _add_way(report: ReportRecord, way: Way) -> None:
    """One way's statistics into the report, or ``None`` and a note saying why not."""
    for key in (way.recommendation, way.comparisons, way.ablations, way.stability,
                way.equivalence):
        report.pop(key, None)
    seeds = report["protocol"]["seeds"]
    if len(seeds) < MIN_SEEDS or len({r["policy"] for r in report["rows"]}) < 2:
        report[way.recommendation] = None
        report["recommendation_note"] = (
            NO_RECOMMENDATION if len(seeds) < MIN_SEEDS
            else "a recommendation compares at least two policies")
        return
    report.pop("recommendation_note", None)
    advice: Advice | None = None
    try:
        values = paired_values(report["rows"], way.value)
        try:
            advice = _advice(report["rows"], _data(report), way.value)
        except TooFewPairs as err:  # no pick, but the pairs' comparisons are still the data's
            report["recommendation_note"] = str(err)
        comparisons = compare(values)
        ablations = _ablations(values)
    except ValueError as err:  # e.g. policies run on different pairs: say it, keep the runs
        report[way.recommendation] = None
        report["recommendation_note"] = f"no paired comparison is possible: {err}"
        return
    report[way.recommendation] = None if advice is None else advice.record()
    try:
        report[way.equivalence] = equivalence(
            report["rows"], way.value,
            float(report["protocol"].get("equivalence_margin", DELTA)))
    except ValueError:  # policies on other seeds (--sequential): its own record says it
        report[way.equivalence] = None
    report[way.comparisons] = [c.to_dict() for c in comparisons]
    report[way.ablations] = [a.record() for a in ablations]
    half = None if advice is None else stability(report, way.value)
    report[way.stability] = None if half is None else half.record()


def add_statistics(report: ReportRecord) -> ReportRecord:
    """Add the recommendation, the pairwise comparisons and the ablations to a report.

    With fewer than two seeds or two policies, or too few (column, seed) pairs for a test
    to reach the level, ``recommendation`` is ``None`` and ``recommendation_note`` says
    why (with too few pairs, the comparisons and ablations are still added). With
    compute-matched rows, each key gains a ``_compute_matched`` twin.

    :param report: a which-buffer report (its ``rows``, ``protocol`` and data fields).
    :return: the same report, updated.
    """
    for way in _ways(report):
        _add_way(report, way)
    return report


def _interval(c: ComparisonRecord) -> str:
    return f"{c['mean_difference']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]"


def _verdict(c: ComparisonRecord, family: int) -> str:
    """Higher, lower, a tie, or undecided where the pairs could not reach the level.

    :param family: the number of tests ``c`` was Holm-corrected with.
    """
    if c["pairs"] < pairs_needed(family):
        return "undecided (too few pairs)"
    if c["p_holm"] > ALPHA:
        return "tie (not significant)"
    return "higher" if c["mean_difference"] > 0 else "lower"


def recommendation_sentence(rec: RecommendationRecord, way: str) -> str:
    """The recommendation in one sentence, as the README and the results page state it.

    :param rec: a report's ``recommendation`` (or ``recommendation_compute_matched``).
    :param way: ``"as measured"`` or ``"compute-matched"``.
    """
    others = [p for p in rec["group"] if p != rec["pick"]]
    tied = (f"; the data cannot tell it from {', '.join(others)}" if others
            else "; the data tell every other policy apart from it")
    return (f"{way.capitalize()}: pick {rec['pick']} (group of {len(rec['group'])} of "
            f"{int(rec['friedman']['policies'])}: {', '.join(rec['group'])}; best mean "
            f"accuracy: {rec['best']}{tied}).")


def _stability_line(half: StabilityRecord, words: str) -> str:
    """Each half of the seeds' pick and group, and whether they agree."""
    a, b = (" ".join(map(str, h)) for h in half["halves"])
    return (f"- Stability ({words}): seeds {a} pick {half['picks'][0]} (group: "
            f"{', '.join(half['groups'][0])}); seeds {b} pick {half['picks'][1]} "
            f"(group: {', '.join(half['groups'][1])}): "
            + ("each pick lies in the other half's group." if half["holds"] else
               "the halves disagree: a pick lies outside the other half's group, "
               "so this recommendation is not stable."))


def _against_best_lines(rec: AdviceRecord, words: str) -> list[str]:
    """The Friedman test, then each policy against the best, as a table."""
    test = rec["friedman"]
    alike = ("the policies differ" if test["p"] <= ALPHA
             else "the data cannot reject that all policies are alike")
    lines = [f"### Each policy against the best ({words})", "",
             f"Friedman test over the {int(test['columns'])} columns: chi² = "
             f"{test['statistic']:.1f}, p = {test['p']:.2g} ({alike}). "
             + ("The group holds fewer than half of the policies."
                if rec["separates"] else
                "The group holds half of the policies or more: on these data the "
                "comparison cannot separate them."), "",
             f"| policy | minus {rec['best']}: mean [95 % interval] | higher / lower "
             "pairs | Wilcoxon p | Holm p | in the group |",
             "|---|---|---|---|---|---|"]
    for c in sorted(rec["against_best"], key=lambda c: -c["mean_difference"]):
        lines.append(f"| {c['a']} | {_interval(c)} | {c['wins']} / {c['losses']} | "
                     f"{c['p']:.2g} | {c['p_holm']:.2g} | "
                     f"{'yes' if c['a'] in rec['group'] else 'no'} |")
    return [*lines, ""]


def _ablation_lines(report: ReportRecord, both: bool) -> list[str]:
    """The ablations as a table, as measured and (``both``) compute-matched."""
    lines = ["### Ablations", "",
             "What one part adds: the first policy minus the second, paired; Holm over "
             "the ablations.", "",
             "| what it adds | policies | as measured: mean [95 % interval], verdict |"
             + (" compute-matched |" if both else ""),
             "|---|---|---|" + ("---|" if both else "")]
    matched_list = report.get("ablations_compute_matched", [])
    matched = {(c["a"], c["b"]): c for c in matched_list}
    for c in report["ablations"]:
        cells = f"{_interval(c)}, {_verdict(c, len(report['ablations']))}"
        m = matched.get((c["a"], c["b"]))
        extra = (f" {_interval(m)}, {_verdict(m, len(matched_list))} |" if m
                 else (" - |" if both else ""))
        lines.append(f"| {c['question']} | {c['a']} − {c['b']} | {cells} |{extra}")
    return [*lines, ""]


def statistics_lines(report: ReportRecord) -> list[str]:
    """The recommendation, the ablations and each policy against the best, as Markdown.

    :param report: a report that :func:`add_statistics` completed.
    """
    lines = ["", "## Recommendation", ""]
    if report.get("sequential"):
        lines += sequential_lines(report["sequential"])
    measured = report.get("recommendation")
    if measured is None:
        lines.append(f"No recommendation: {report.get('recommendation_note', '')}.")
        for way in (AS_MEASURED, COMPUTE_MATCHED):
            record = report.get(way.equivalence)
            if record is not None:
                lines += ["", *equivalence_lines(record, way.words)]
        if report.get("ablations"):
            lines += ["", *_ablation_lines(report, bool(report.get("ablations_compute_matched")))]
        return lines
    pairs = measured["against_best"][0]["pairs"]
    lines += [f"For {measured['data']}, these streams and buffer sizes: the "
              f"recommendation holds for data like these, not for every stream. Paired "
              f"over {pairs} (column, seed) pairs per two policies; intervals are 95 % "
              "t intervals of the mean difference in accuracy points; p-values from the "
              "Wilcoxon signed-rank test, Holm-corrected.", ""]
    ways = [(AS_MEASURED, measured)]
    matched = report.get("recommendation_compute_matched")
    if matched is not None:
        ways.append((COMPUTE_MATCHED, matched))
    lines += [f"- **{recommendation_sentence(rec, way.words)}**" for way, rec in ways]
    for way, _ in ways:
        half = report.get(way.stability)
        if half is not None:
            lines.append(_stability_line(half, way.words))
    lines += ["", f"Rule: {measured['rule']}.", ""]
    for way, rec in ways:
        lines += _against_best_lines(rec, way.words)
    for way, _ in ways:
        record = report.get(way.equivalence)
        if record is not None:
            lines += equivalence_lines(record, way.words)
    if report.get("ablations"):
        lines += _ablation_lines(report, len(ways) > 1)
    lines.append("Every pair of policies, with its interval and tests: `comparisons` in the JSON.")
    return lines


def sequential_lines(record: SequentialRecord) -> list[str]:
    """What ``--sequential`` ran and decided, as Markdown.

    :param record: the report's ``sequential``.
    """
    lines = [f"### Sequential design: {record['runs']:,} of the fixed design's "
             f"{record['fixed_runs']:,} runs ({100 * record['saved']:.0f} % saved), "
             f"{record['rounds']} round(s) of at most {record['looks']}", "",
             f"The first round ran {record['start']} seeds, each later round one more, for "
             "the policies not yet classed; each look tests at alpha over the looks "
             f"allowed (margin ±{record['delta']:g} accuracy points, seeds averaged over the "
             "columns, each stream family an equal share). The statistics below compare the "
             "policies on the seeds they share.", "",
             "| policy | class | difference from the best [interval] | seeds run |",
             "|---|---|---|---|"]
    for c in record["classes"]:
        seeds = " ".join(map(str, record["seeds"].get(c["policy"], [])))
        lines.append(f"| {c['policy']} | {c['class']} | {c['mean_difference']:+.2f} "
                     f"[{c['low']:+.2f}, {c['high']:+.2f}] | {seeds} |")
    return [*lines, ""]


def equivalence_lines(record: EquivalenceRecord, words: str, shown: int = 5) -> list[str]:
    """Equivalence to the best, per scope, as Markdown: the best, the pick, the classes.

    :param record: :func:`equivalence`'s record.
    :param words: the way's name (``"as measured"``).
    :param shown: the policies listed after the best in each scope (the closest to it).
    """
    lines = [f"### Equivalence to the best, {words} (margin ±{record['delta']:g} accuracy points)",
             "",
             f"Rule: {record['rule']}; one-sided level {record['alpha']:g} before the "
             f"Bonferroni split; costs ({record['cost']}) within "
             f"{100 * record['cost_tolerance']:.0f} % count as equal.", "",
             "| scope | weights | best | pick | the closest others: difference [interval], "
             "class |", "|---|---|---|---|---|"]
    for scope in record["scopes"]:
        weights = ", ".join(f"{f} {w:.2f}" for f, w in scope["weights"].items() if w > 0)
        others = "; ".join(
            f"{c['policy']} {c['mean_difference']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}] "
            f"{c['class']}" for c in scope["classes"][1:shown + 1])
        lines.append(f"| {scope['scope']} | {weights} | {scope['best']} | {scope['pick']} | "
                     f"{others} |")
    return [*lines, ""]


REPORT_BYTES = 256 * 2**20
"""The largest ``which_buffer.json`` :func:`restate` reads."""


def restate(report_path: str | os.PathLike[str]) -> ReportRecord:
    """A ``which_buffer.json`` with its statistics computed again, as this version does.

    The runs stay what they were; only the comparisons, the ablations and the
    recommendation are recomputed (the file is not changed).

    :param report_path: the report (read only if a regular file of at most
        :data:`REPORT_BYTES`).
    :raises OSError: no such file, or not a regular file, or larger: one line naming it.
    :raises ValueError: not JSON, in one line naming it.
    """
    data = read_regular(report_path, limit=REPORT_BYTES, what="report", follow_links=True)
    try:
        report: ReportRecord = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        why = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ValueError(f"report {os.fspath(report_path)} is not readable JSON ({why})"
                         ) from None
    return add_statistics(report)



def sequential_replay(report: ReportRecord, start: int = 2, key: Accuracy = "avg",
                      delta: float = DELTA) -> SequentialResult:
    """The sequential design replayed on a report's runs: what it would have run and decided.

    A run depends on its policy, stream, buffer size and seed alone, so the runs the
    sequential design makes (:func:`~avalanche_gss.reproduce.reports.sequential.
    run_sequential`) are among the fixed design's: this replays them from the report, the
    seeds added in the report's order, each seed's accuracy the mix's (each stream family
    an equal share).

    :param report: a which-buffer report.
    :param start: the seeds of the first round.
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    :param delta: the practical margin.
    """
    _, cells, columns = _column_cells(report["rows"], key)
    means = seed_means(cells, family_weights(columns))
    return run_sequential(list(report["protocol"]["policies"]),
                          list(report["protocol"]["seeds"]),
                          lambda seed, policies: {p: means[p][seed] for p in policies},
                          start=start, delta=delta)
