"""which-buffer's answer with its uncertainty: the pick on evidence of equivalence, ablations.

The seeds are the replicates: a seed's runs share its draws (the streams' samples and the
initial weights) across the columns, so each seed's accuracy of a policy is first averaged
over the columns, each stream family an equal share of the mix unless the protocol's
``family_weights`` (``--family-weights``) say otherwise
(:mod:`~avalanche_gss.reproduce.reports.equivalence`).
From a report's rows this module computes, as measured and (with ``--compute-matched``)
compute-matched:

- ``recommendation``: each policy classed against the best with a practical margin
  ``delta`` (*equivalent*: shown within it; *worse*: shown below the best; *undecided*),
  and the pick, the cheapest of the best and the policies shown equivalent to it
  (:data:`DECISION_RULE`), for the data and the mix the report ran on; ``None`` with one
  seed, or when no policy could be classed (``recommendation_note`` says why);
- ``equivalence``: the same classes for each stream family alone, and for the mix;
- ``ablations``: the questions of :data:`ABLATIONS`, each a paired difference over the
  seeds with an interval at the Bonferroni level over the ablations and the verdict that
  interval gives;
- ``stability``: the recommendation made again on each half of the seeds, and whether
  each half's pick lies in the other half's group;
- ``comparisons``: every pair of policies over the (column, seed) pairs, with the Wilcoxon
  signed-rank test Holm-corrected over all pairs and an unadjusted 95 % t interval: data
  for one's own analysis, from which no verdict is printed.

Every interval printed beside a verdict is the one the verdict is read from.
:func:`add_statistics` adds them to a report; :func:`statistics_lines` writes them as
Markdown; :func:`restate` recomputes them for a ``which_buffer.json`` already written.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from avalanche_gss._files import read_regular
from avalanche_gss.reproduce.experiments.protocols import label_of
from avalanche_gss.reproduce.experiments.which_buffer_records import (
    AblationRecord,
    DecisionRecord,
    EquivalenceRecord,
    ReportRecord,
    RowRecord,
    ScopeRecord,
    SequentialRecord,
    StabilityRecord,
)
from avalanche_gss.reproduce.reports.comparisons import MIN_SEEDS, compare
from avalanche_gss.reproduce.reports.equivalence import ALPHA as EQUIVALENCE_ALPHA
from avalanche_gss.reproduce.reports.equivalence import (
    COST_TOLERANCE,
    DELTA,
    Classed,
    Contrast,
    classify,
    contrasts,
    family_weights,
    pick,
    seed_means,
)
from avalanche_gss.reproduce.reports.sequential import SequentialResult, run_sequential

__all__ = ["ABLATIONS", "AS_MEASURED", "COMPUTE_MATCHED", "DECISION_RULE", "EQUIVALENCE_RULE",
           "NO_RECOMMENDATION", "SEQUENTIAL_NOTE", "SEQUENTIAL_RULE", "Ablation", "Stability",
           "Undecided", "Way", "add_statistics", "decide", "decide_sequential", "equivalence",
           "equivalence_lines", "paired_values", "recommendation_sentence", "restate",
           "seed_accuracies", "sequential_lines", "sequential_replay", "stability",
           "statistics_lines"]

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


DECISION_RULE = (
    "seeds are the replicates: each seed's accuracy is averaged over the columns, each "
    "stream family weighing as stated and its columns alike; best: the policy of the highest "
    "mean over the seeds; each other policy's paired difference from it over the seeds has a "
    "t interval at the Bonferroni level over the policies compared with the best (the "
    "interval printed is the one decided on); equivalent: the interval lies inside "
    "(-delta, +delta) (two one-sided t-tests); worse: it lies below 0; undecided: neither; "
    "group: the best and the policies shown equivalent to it; pick: the group's cheapest, "
    "costs within the tolerance counting as equal (then the most accurate); no pick when no "
    "policy is classed (every one undecided)")
"""The recommendation rule in words, as the report records it."""


SEQUENTIAL_RULE = (
    "the sequential design's classes: seeds added in rounds (the first two, then one more "
    "for the policies not yet classed), each look classing the open policies against the "
    "best on the seeds run as the fixed design's rule does (seeds as replicates, paired t "
    "intervals at the Bonferroni level over the policies compared, equivalent inside "
    "(-delta, +delta), worse below 0) at alpha over the looks the cap allows; a policy "
    "classed runs no more seeds; group: the best and the policies shown equivalent to it; "
    "pick: the group's cheapest, costs within the tolerance counting as equal (then the most "
    "accurate); no pick when no policy is classed")
"""The recommendation rule of a ``--sequential`` run, in words."""

SEQUENTIAL_NOTE = (
    "the per-family classes, the ablations and the pairs are not computed for a sequential "
    "run: they pair every policy over the same seeds, and a sequential run stops each "
    "policy at its own (run the fixed design for them)")
"""Why a sequential run's report has the recommendation alone."""


class Undecided(ValueError):
    """No policy could be classed against the best: every one is undecided, so no pick.

    :param seeds: the seeds the runs had.
    :param policies: the policies compared with the best.
    """

    def __init__(self, seeds: int, policies: int, delta: float) -> None:
        self.seeds, self.policies = seeds, policies
        super().__init__(
            f"no pick: with {seeds} seeds none of the {policies} policies compared with the "
            f"best is shown within ±{delta:g} of it or shown worse (every one is undecided); "
            "run more seeds (--seeds), or --sequential to add them only where needed")


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
class Ablation:
    """One ablation: what it asks and the paired contrast over the seeds that answers it.

    :param question: what the first policy adds to the second.
    :param contrast: the first policy against the second.
    """

    question: str
    contrast: Contrast

    def record(self) -> AblationRecord:
        """The ablation as the report records it: the question, then the contrast."""
        return AblationRecord(question=self.question, **self.contrast.to_dict())


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


def _shares(columns: Sequence[tuple[str, str]], weights: Mapping[str, float],
            order: Iterable[str]) -> dict[str, float]:
    """Each family's share of the columns' weights, the families in ``order``."""
    families = list(dict.fromkeys(order))
    return {f: math.fsum(weights[c] for c, g in columns if g == f) for f in families}


def _mix(report: ReportRecord) -> dict[str, float] | None:
    """The family weights of the report's mix (``None``: equal)."""
    weights = report["protocol"].get("family_weights")
    return None if weights is None else {f: float(w) for f, w in weights.items()}


def decide(rows: Sequence[RowRecord], data: str, key: Accuracy = "avg",
           delta: float = DELTA, families: Mapping[str, float] | None = None
           ) -> DecisionRecord:
    """The recommendation for a report's runs: each policy classed against the best, the pick.

    (:func:`~avalanche_gss.reproduce.reports.equivalence.classify` on the seeds' weighted
    means, then :func:`~avalanche_gss.reproduce.reports.equivalence.pick`; the cost is the
    relative compute ``C`` where the rows hold it, else the median training seconds.)

    :param rows: the report's rows.
    :param data: the data the runs used, as the report names them.
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    :param delta: the practical margin, in points.
    :param families: each stream family's weight in the mix (``None``: equal).
    :raises Undecided: no policy is classed against the best.
    :raises ValueError: fewer than 2 seeds or policies, policies on other columns or seeds,
        a non-finite accuracy, or bad weights.
    """
    family_of, cells, columns = _column_cells(rows, key)
    weights = family_weights(columns, families)
    classed: list[Classed] = classify(seed_means(cells, weights), delta=delta)
    others = classed[1:]
    if all(c.verdict == "undecided" for c in others):
        raise Undecided(classed[0].seeds, len(others), delta)
    return _decision(classed, rows, data, _shares(columns, weights, family_of.values()), delta,
                     EQUIVALENCE_ALPHA, DECISION_RULE)


def _decision(classed: Sequence[Classed], rows: Sequence[RowRecord], data: str,
              weights: dict[str, float], delta: float, alpha: float, rule: str
              ) -> DecisionRecord:
    """The recommendation record of policies classed against the best (the best first)."""
    others = classed[1:]
    costs, cost_name = _costs(rows)
    return DecisionRecord(
        data=data, weights=weights, delta=delta, alpha=alpha,
        seeds=classed[0].seeds, best=classed[0].policy, pick=pick(classed, costs),
        group=[c.policy for c in classed if c.verdict in ("best", "equivalent")],
        undecided=[c.policy for c in others if c.verdict == "undecided"],
        worse=[c.policy for c in others if c.verdict == "worse"],
        classes=[c.to_dict() for c in classed], mean_cost=costs,
        cost=cost_name, cost_tolerance=COST_TOLERANCE, rule=rule)


def decide_sequential(rows: Sequence[RowRecord], record: SequentialRecord, data: str,
                      families: Mapping[str, float] | None = None) -> DecisionRecord:
    """The recommendation of a ``--sequential`` run: its design's classes, and the pick.

    The classes are those the design reached (each policy's when it was classed, or at the
    last look; :func:`~avalanche_gss.reproduce.reports.sequential.step`), not recomputed:
    the policies ran on different seeds, which the fixed design's rule cannot pair.

    :param rows: the report's rows (their costs).
    :param record: the report's ``sequential`` record.
    :param data: the data the runs used, as the report names them.
    :param families: each stream family's weight in the mix (``None``: equal).
    :raises Undecided: no policy is classed against the best.
    """
    classed = [Classed(c["policy"], c["class"], c["mean_difference"], c["low"], c["high"],
                       c["seeds"]) for c in record["classes"]]
    others = classed[1:]
    if all(c.verdict == "undecided" for c in others):
        raise Undecided(classed[0].seeds, len(others), record["delta"])
    family_of = {r["stream"]: r.get("family", r["stream"]) for r in rows}
    columns = sorted({(f"{r['stream']}/{r['buffer_size']}", family_of[r["stream"]])
                      for r in rows}, key=lambda c: c[0])
    weights = family_weights(columns, families)
    return _decision(classed, rows, data, _shares(columns, weights, family_of.values()),
                     record["delta"], EQUIVALENCE_ALPHA / record["looks"], SEQUENTIAL_RULE)


def seed_accuracies(rows: Sequence[RowRecord], key: Accuracy = "avg",
                    families: Mapping[str, float] | None = None
                    ) -> dict[str, dict[int, float]]:
    """Each policy's accuracy per seed: the weighted mean over the report's columns.

    The replicates every verdict of this module is drawn from.

    :param rows: the report's rows.
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    :param families: each stream family's weight (``None``: equal); a family's columns
        share its weight alike.
    """
    _, cells, columns = _column_cells(rows, key)
    return seed_means(cells, family_weights(columns, families))


def _ablations(rows: Sequence[RowRecord], key: Accuracy, delta: float,
               families: Mapping[str, float] | None) -> list[Ablation]:
    """The ablations whose two policies ran, paired over the seeds, Bonferroni over them."""
    means = seed_accuracies(rows, key, families)
    asked = [(q, a, b) for q, a, b in ABLATIONS if a in means and b in means]
    found = contrasts(means, [(a, b) for _, a, b in asked], delta=delta)
    return [Ablation(q, c) for (q, _, _), c in zip(asked, found, strict=True)]


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
    than ``2 x MIN_SEEDS`` seeds, when a half classes no policy (:class:`Undecided`), or
    when a half's seeds were not run for every policy (``--sequential``).

    :param report: a which-buffer report.
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    """
    seeds = list(report["protocol"]["seeds"])
    if len(seeds) < 2 * MIN_SEEDS:
        return None
    halves = [seeds[: len(seeds) // 2], seeds[len(seeds) // 2:]]
    delta = _margin(report)
    try:
        recs = [decide(_half(report["rows"], h), _data(report), key, delta, _mix(report))
                for h in halves]
    except ValueError:  # a half classes no policy (Undecided), or has no runs (--sequential)
        return None
    holds = recs[0]["pick"] in recs[1]["group"] and recs[1]["pick"] in recs[0]["group"]
    return Stability(halves, [r["pick"] for r in recs], [list(r["group"]) for r in recs],
                     holds)


def _margin(report: ReportRecord) -> float:
    """The report's practical margin (the default for a report written before it had one)."""
    return float(report["protocol"].get("equivalence_margin", DELTA))


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
    delta, mix = _margin(report), _mix(report)
    decision: DecisionRecord | None = None
    sequential = report.get("sequential")
    if sequential is not None and way.value == "avg":
        try:
            decision = decide_sequential(report["rows"], sequential, _data(report), mix)
            report["recommendation_note"] = SEQUENTIAL_NOTE
        except Undecided as err:
            report["recommendation_note"] = f"{err}; {SEQUENTIAL_NOTE}"
        report[way.recommendation] = decision
        return
    try:
        try:
            decision = decide(report["rows"], _data(report), way.value, delta, mix)
        except Undecided as err:  # no pick, but the classes and contrasts are still the data's
            report["recommendation_note"] = str(err)
        comparisons = compare(paired_values(report["rows"], way.value))
        ablations = _ablations(report["rows"], way.value, delta, mix)
        classes = equivalence(report["rows"], way.value, delta, mix)
    except ValueError as err:  # e.g. policies run on other seeds: say it, keep the runs
        report[way.recommendation] = None
        report["recommendation_note"] = f"no paired comparison is possible: {err}"
        return
    report[way.recommendation] = decision
    report[way.equivalence] = classes
    report[way.comparisons] = [c.to_dict() for c in comparisons]
    report[way.ablations] = [a.record() for a in ablations]
    half = None if decision is None else stability(report, way.value)
    report[way.stability] = None if half is None else half.record()


def add_statistics(report: ReportRecord) -> ReportRecord:
    """Add the recommendation, the equivalence classes, the ablations and every pair.

    With fewer than two seeds or two policies, or when no policy can be classed against
    the best, ``recommendation`` is ``None`` and ``recommendation_note`` says why (in the
    last case the classes, ablations and comparisons are still added). With
    compute-matched rows, each key gains a ``_compute_matched`` twin.

    :param report: a which-buffer report (its ``rows``, ``protocol`` and data fields).
    :return: the same report, updated.
    """
    for way in _ways(report):
        _add_way(report, way)
    return report


def _band(centre: float, low: float, high: float) -> str:
    return f"{centre:+.2f} [{low:+.2f}, {high:+.2f}]"


def _weights_words(weights: Mapping[str, float]) -> str:
    return ", ".join(f"{f} {w:.2f}" for f, w in weights.items() if w > 0)


def recommendation_sentence(rec: DecisionRecord, way: str) -> str:
    """The recommendation in one sentence, as the README and the results page state it.

    :param rec: a report's ``recommendation`` (or ``recommendation_compute_matched``).
    :param way: ``"as measured"`` or ``"compute-matched"``.
    """
    shown = ", ".join(p for p in rec["group"] if p != rec["best"]) or "none"
    undecided = ", ".join(rec["undecided"]) or "none"
    return (f"{way.capitalize()}: pick {rec['pick']} (best mean accuracy: {rec['best']}; "
            f"shown within ±{rec['delta']:g} of it: {shown}; undecided: {undecided}; "
            f"shown worse: {len(rec['worse'])} of {len(rec['classes']) - 1}).")


def _stability_line(half: StabilityRecord, words: str) -> str:
    """Each half of the seeds' pick and group, and whether they agree."""
    a, b = (" ".join(map(str, h)) for h in half["halves"])
    return (f"- Stability ({words}): seeds {a} pick {half['picks'][0]} (group: "
            f"{', '.join(half['groups'][0])}); seeds {b} pick {half['picks'][1]} "
            f"(group: {', '.join(half['groups'][1])}): "
            + ("each pick lies in the other half's group." if half["holds"] else
               "the halves disagree: a pick lies outside the other half's group, "
               "so this recommendation is not stable."))


def _against_best_lines(rec: DecisionRecord, words: str) -> list[str]:
    """Each policy against the best, with its class and the interval it was read from."""
    lines = [f"### Each policy against the best ({words})", "",
             f"Over {rec['seeds']} seeds, each a weighted mean over the columns "
             f"({_weights_words(rec['weights'])}); intervals at the Bonferroni level over "
             f"the {len(rec['classes']) - 1} policies compared with the best (one-sided "
             f"{rec['alpha']:g} each before the split), margin ±{rec['delta']:g}.", "",
             f"| policy | minus {rec['best']}: mean [interval] | class | "
             f"cost ({rec['cost']}) |", "|---|---|---|---|",
             f"| {rec['best']} | best | | {rec['mean_cost'][rec['best']]:.3g} |"]
    for c in rec["classes"][1:]:
        band = _band(c["mean_difference"], c["low"], c["high"])
        lines.append(f"| {c['policy']} | {band} | {c['class']} | "
                     f"{rec['mean_cost'][c['policy']]:.3g} |")
    return [*lines, ""]


def _ablation_lines(report: ReportRecord, both: bool) -> list[str]:
    """The ablations as a table, as measured and (``both``) compute-matched."""
    first = report["ablations"]
    seeds = first[0]["seeds"] if first else 0
    lines = ["### Ablations", "",
             f"What one part adds: the first policy minus the second, paired over {seeds} "
             "seeds (each a weighted mean over the columns, as above); intervals at the "
             f"Bonferroni level over the {len(first)} ablations, the verdict read from the "
             "interval printed.", "",
             "| what it adds | policies | as measured: mean [interval], verdict |"
             + (" compute-matched |" if both else ""),
             "|---|---|---|" + ("---|" if both else "")]
    matched = {(c["a"], c["b"]): c for c in report.get("ablations_compute_matched", [])}
    for c in first:
        m = matched.get((c["a"], c["b"]))
        extra = (f" {_band(m['mean_difference'], m['low'], m['high'])}, {m['verdict']} |"
                 if m else (" - |" if both else ""))
        band = _band(c["mean_difference"], c["low"], c["high"])
        lines.append(f"| {c['question']} | {c['a']} − {c['b']} | {band}, {c['verdict']} |"
                     f"{extra}")
    return [*lines, ""]


def statistics_lines(report: ReportRecord) -> list[str]:
    """The recommendation, each policy against the best, the families, the ablations.

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
    lines += [f"For {measured['data']}, these streams and buffer sizes, and this mix of the "
              f"stream families ({_weights_words(measured['weights'])}): the recommendation "
              "holds for data like these, not for every stream. The seeds are the "
              "replicates; each interval is a paired t interval at the level its verdict "
              "is read from.", ""]
    ways = [(AS_MEASURED, measured)]
    matched = report.get("recommendation_compute_matched")
    if matched is not None:
        ways.append((COMPUTE_MATCHED, matched))
    lines += [f"- **{recommendation_sentence(rec, way.words)}**" for way, rec in ways]
    n_seeds = len(report["protocol"]["seeds"])
    sequential = bool(report.get("sequential"))
    for way, _ in ways:
        half = report.get(way.stability)
        if half is not None:
            lines.append(_stability_line(half, way.words))
        elif n_seeds >= 2 * MIN_SEEDS and not sequential:
            lines.append(f"- Stability ({way.words}): not checked: a half of the seeds "
                         f"({n_seeds // 2} of {n_seeds}) classes no policy against its best, "
                         "so the halves' picks cannot be compared; more seeds would.")
    lines += ["", f"Rule: {measured['rule']}; costs within "
              f"{100 * measured['cost_tolerance']:.0f} % count as equal.", ""]
    if sequential:  # the classes are the design's, in its table above
        note = report.get("recommendation_note") or SEQUENTIAL_NOTE
        return [*lines, f"{note[0].upper()}{note[1:]}.", ""]
    for way, rec in ways:
        lines += _against_best_lines(rec, way.words)
    for way, _ in ways:
        record = report.get(way.equivalence)
        if record is not None:
            lines += equivalence_lines(record, way.words)
    if report.get("ablations"):
        lines += _ablation_lines(report, len(ways) > 1)
    lines.append("Every pair of policies over the (column, seed) pairs, with the Wilcoxon "
                 "signed-rank test Holm-corrected over all pairs and an unadjusted 95 % t "
                 "interval: `comparisons` in the JSON (data, no verdict).")
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
             "columns, each stream family weighing as in the mix). The recommendation below "
             "is drawn from these classes, each policy on the seeds it ran.", "",
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
    lines = [f"### Each stream family alone, and the mix, {words} (margin "
             f"±{record['delta']:g} accuracy points)", "",
             "The same rule in each scope, the scope's families weighing as shown; one-sided "
             f"level {record['alpha']:g} before the Bonferroni split; costs "
             f"({record['cost']}) within {100 * record['cost_tolerance']:.0f} % count as "
             "equal.", "",
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
    weighing as the report's protocol says: equal by default).

    :param report: a which-buffer report.
    :param start: the seeds of the first round.
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    :param delta: the practical margin.
    """
    means = seed_accuracies(report["rows"], key, _mix(report))
    return run_sequential(list(report["protocol"]["policies"]),
                          list(report["protocol"]["seeds"]),
                          lambda seed, policies: {p: means[p][seed] for p in policies},
                          start=start, delta=delta)
