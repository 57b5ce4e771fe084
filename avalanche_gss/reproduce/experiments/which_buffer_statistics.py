"""which-buffer's answer with its uncertainty: paired comparisons, ablations, recommendation.

Every run of a policy is paired with every other policy's run on the same stream, buffer
size and seed (:mod:`~avalanche_gss.reproduce.reports.comparisons`). From a report's rows this
module computes, as measured and (with ``--compute-matched``) compute-matched:

- ``recommendation``: the group of policies not significantly worse than the best and
  the cheapest of them (:func:`~avalanche_gss.reproduce.reports.comparisons.recommend`), for the
  data the report ran on; ``None`` with one seed (:data:`NO_RECOMMENDATION` says why);
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
import os
import statistics
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from avalanche_gss.reproduce.experiments.protocols import label_of
from avalanche_gss.reproduce.reports.comparisons import ALPHA, MIN_SEEDS, compare, recommend

__all__ = ["ABLATIONS", "NO_RECOMMENDATION", "add_statistics", "paired_values",
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
)
"""Each ablation: what it asks (what the first policy adds to the second), and the pair."""

NO_RECOMMENDATION = ("one seed is not a ranking: with a single seed, a policy's luck on that "
                     "seed's streams and initial weights cannot be told from the policy, so "
                     f"no recommendation is made; run at least {MIN_SEEDS} seeds (the "
                     "default runs enough to decide)")
"""Why a report of fewer than :data:`~avalanche_gss.reproduce.reports.comparisons.MIN_SEEDS` seeds
recommends nothing."""


def paired_values(rows: Sequence[dict[str, Any]], key: str = "avg"
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


def _costs(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, float], str]:
    """Each policy's cost: its mean relative compute C, else its mean training seconds."""
    counted = all("relative_cost_mean" in r for r in rows)
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["policy"], []).append(
            float(r["relative_cost_mean"]) if counted else statistics.fmean(r["train_seconds"]))
    return ({p: statistics.fmean(v) for p, v in by.items()},
            "C" if counted else "mean train seconds per run")


def _data(report: dict[str, Any]) -> str:
    return label_of(report["dataset"], report.get("data_verified_as"))


def _recommendation(report: dict[str, Any], key: str) -> dict[str, Any]:
    """The recommendation rule applied to the report's runs, as reports record it."""
    rows = report["rows"]
    values = paired_values(rows, key)
    columns: dict[Hashable, Hashable] = {k: (k[0], k[1]) for v in values.values() for k in v}
    cost, cost_name = _costs(rows)
    rec = recommend(values, columns, cost, _data(report), cost_name)
    record = rec.to_dict()
    record["mean_cost"] = {p: cost[p] for p in rec.group}
    record["cost"] = cost_name
    return record


def _evaluate(report: dict[str, Any], key: str) -> dict[str, Any]:
    values = paired_values(report["rows"], key)
    ablations = [(q, a, b) for q, a, b in ABLATIONS if a in values and b in values]
    ablated = compare(values, [(a, b) for _, a, b in ablations])
    return {
        "recommendation": _recommendation(report, key),
        "comparisons": [c.to_dict() for c in compare(values)],
        "ablations": [{"question": q, **c.to_dict()}
                      for (q, _, _), c in zip(ablations, ablated, strict=True)],
    }


def _half(report: dict[str, Any], seeds: Sequence[int]) -> dict[str, Any]:
    """The report with only the runs of ``seeds``."""
    keep = set(seeds)
    rows = []
    for r in report["rows"]:
        at = [i for i, s in enumerate(r["seeds"]) if s in keep]
        row = {**r, "seeds": [r["seeds"][i] for i in at]}
        for key in ("avg", "matched_avg", "train_seconds"):
            if key in r:
                row[key] = [r[key][i] for i in at]
        rows.append(row)
    return {**report, "rows": rows, "protocol": {**report["protocol"], "seeds": list(seeds)}}


def stability(report: dict[str, Any], key: str = "avg") -> dict[str, Any] | None:
    """The recommendation made on each half of the seeds, and whether the halves agree.

    They agree when each half's pick lies in the other half's group. ``None`` with fewer
    than ``2 x MIN_SEEDS`` seeds.

    :param report: a which-buffer report.
    :param key: ``"avg"`` (as measured) or ``"matched_avg"`` (compute-matched).
    """
    seeds = list(report["protocol"]["seeds"])
    if len(seeds) < 2 * MIN_SEEDS:
        return None
    halves = [seeds[: len(seeds) // 2], seeds[len(seeds) // 2:]]
    recs = [_recommendation(_half(report, h), key) for h in halves]
    holds = recs[0]["pick"] in recs[1]["group"] and recs[1]["pick"] in recs[0]["group"]
    return {"halves": halves, "picks": [r["pick"] for r in recs],
            "groups": [r["group"] for r in recs], "holds": holds}


def add_statistics(report: dict[str, Any]) -> dict[str, Any]:
    """Add the recommendation, the pairwise comparisons and the ablations to a report.

    With fewer than two seeds or two policies, ``recommendation`` is ``None`` and
    ``recommendation_note`` says why. With compute-matched rows, each key gains a
    ``_compute_matched`` twin.

    :param report: a which-buffer report (its ``rows``, ``protocol`` and data fields).
    :return: the same report, updated.
    """
    seeds = report["protocol"]["seeds"]
    policies = {r["policy"] for r in report["rows"]}
    ways = [("", "avg")]
    if report["rows"] and all("matched_avg" in r for r in report["rows"]):
        ways.append(("_compute_matched", "matched_avg"))
    for suffix, key in ways:
        for name in ("recommendation", "comparisons", "ablations", "stability"):
            report.pop(name + suffix, None)
        if len(seeds) < MIN_SEEDS or len(policies) < 2:
            report["recommendation" + suffix] = None
            report["recommendation_note"] = (
                NO_RECOMMENDATION if len(seeds) < MIN_SEEDS
                else "a recommendation compares at least two policies")
            continue
        report.pop("recommendation_note", None)
        try:
            evaluated = _evaluate(report, key)
        except ValueError as err:  # e.g. policies run on different pairs: say it, keep the runs
            report["recommendation" + suffix] = None
            report["recommendation_note"] = f"no paired comparison is possible: {err}"
            continue
        for name, value in evaluated.items():
            report[name + suffix] = value
        report["stability" + suffix] = stability(report, key)
    return report


def _interval(c: dict[str, Any]) -> str:
    return f"{c['mean_difference']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]"


def _verdict(c: dict[str, Any]) -> str:
    if c["p_holm"] > ALPHA:
        return "tie (not significant)"
    return "higher" if c["mean_difference"] > 0 else "lower"


def recommendation_sentence(rec: dict[str, Any], way: str) -> str:
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


def statistics_lines(report: dict[str, Any]) -> list[str]:
    """The recommendation, the ablations and each policy against the best, as Markdown.

    :param report: a report that :func:`add_statistics` completed.
    """
    lines = ["", "## Recommendation", ""]
    if report.get("recommendation") is None:
        return [*lines, f"No recommendation: {report.get('recommendation_note', '')}."]
    pairs = report["recommendation"]["against_best"][0]["pairs"]
    lines += [f"For {report['recommendation']['data']}, these streams and buffer sizes: the "
              f"recommendation holds for data like these, not for every stream. Paired "
              f"over {pairs} (column, seed) pairs per two policies; intervals are 95 % "
              "t intervals of the mean difference in accuracy points; p-values from the "
              "Wilcoxon signed-rank test, Holm-corrected.", ""]
    ways = [("as measured", "")]
    if report.get("recommendation_compute_matched") is not None:
        ways.append(("compute-matched", "_compute_matched"))
    for way, suffix in ways:
        rec = report["recommendation" + suffix]
        lines.append(f"- **{recommendation_sentence(rec, way)}**")
    for way, suffix in ways:
        half = report.get("stability" + suffix)
        if half is not None:
            a, b = (" ".join(map(str, h)) for h in half["halves"])
            lines.append(f"- Stability ({way}): seeds {a} pick {half['picks'][0]} (group: "
                         f"{', '.join(half['groups'][0])}); seeds {b} pick {half['picks'][1]} "
                         f"(group: {', '.join(half['groups'][1])}): "
                         + ("each pick lies in the other half's group." if half["holds"] else
                            "the halves disagree: a pick lies outside the other half's group, "
                            "so this recommendation is not stable."))
    lines += ["", f"Rule: {report['recommendation']['rule']}.", ""]
    for way, suffix in ways:
        rec = report["recommendation" + suffix]
        test = rec["friedman"]
        alike = ("the policies differ" if test["p"] <= ALPHA
                 else "the data cannot reject that all policies are alike")
        lines += [f"### Each policy against the best ({way})", "",
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
        lines.append("")
    if report.get("ablations"):
        lines += ["### Ablations", "",
                  "What one part adds: the first policy minus the second, paired; Holm over "
                  "the ablations.", "",
                  "| what it adds | policies | as measured: mean [95 % interval], verdict |"
                  + (" compute-matched |" if len(ways) > 1 else ""),
                  "|---|---|---|" + ("---|" if len(ways) > 1 else "")]
        matched = {(c["a"], c["b"]): c for c in report.get("ablations_compute_matched", [])}
        for c in report["ablations"]:
            cells = f"{_interval(c)}, {_verdict(c)}"
            m = matched.get((c["a"], c["b"]))
            extra = f" {_interval(m)}, {_verdict(m)} |" if m else (
                " - |" if len(ways) > 1 else "")
            lines.append(f"| {c['question']} | {c['a']} − {c['b']} | {cells} |{extra}")
        lines.append("")
    lines.append("Every pair of policies, with its interval and tests: `comparisons` in the JSON.")
    return lines


def restate(report_path: str | os.PathLike[str]) -> dict[str, Any]:
    """A ``which_buffer.json`` with its statistics computed again, as this version does.

    The runs stay what they were; only the comparisons, the ablations and the
    recommendation are recomputed (the file is not changed).

    :param report_path: the report.
    """
    return add_statistics(json.loads(Path(report_path).read_text()))
