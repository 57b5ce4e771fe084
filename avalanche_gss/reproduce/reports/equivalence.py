"""Equivalence to the best on evidence: each policy classed within a practical margin.

"Not significantly worse than the best" is absence of evidence: a policy with few pairs,
or noisy ones, passes it whatever its accuracy. This module asks the question the other
way round, with a margin ``delta`` fixed before the runs (default 1 point of accuracy):
is the policy *shown* to be within ``delta`` of the best, *shown* to be worse, or neither?

The method, and why:

- **Replicates are seeds.** Runs of one seed share its draws (the streams' samples and the
  initial weights) across the columns of a table, so the (column, seed) pairs of one seed
  are not independent. Each seed's accuracy of a policy is therefore first averaged over
  the columns, with stated weights (:func:`seed_means`: equal per stream family by
  default, each family's columns alike), and the seeds are the replicates.
- **Paired intervals against the best.** For policy ``p`` and the best ``b`` (the highest
  mean), ``d_s = m_p(s) - m_b(s)`` over the ``n`` seeds; the interval is
  ``mean(d) ± t(1 - a, n - 1) · sd(d) / sqrt(n)`` with ``a = alpha / (k - 1)``, Bonferroni
  over the ``k - 1`` policies compared with the best, so that every interval printed holds
  the same adjustment as the verdicts drawn from it.
- **Two one-sided tests (TOST).** *Equivalent*: the interval lies inside
  ``(-delta, +delta)`` (both one-sided tests reject at level ``a``); *worse*: it lies below
  0 (and is not equivalent); *undecided*: anything else, said as such. A policy shown
  worse by less than ``delta`` is equivalent: the margin is what the user accepts.
- **What it does not correct.** The best is picked from the same runs, which biases the
  differences against the others; this makes *worse* slightly liberal and *equivalent*
  conservative. The error rates are measured on synthetic data with a known answer in
  ``tests/reproduce/test_equivalence.py``.

The pick (:func:`pick`) is the cheapest *equivalent* policy, costs within
``cost_tolerance`` of the cheapest counting as equal (then the most accurate of them).
Given pairs of policies are compared the same way by :func:`contrasts` (which-buffer's
ablations): seeds as replicates, Bonferroni over the pairs asked, the verdict read from the
interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

__all__ = ["ALPHA", "COST_TOLERANCE", "DELTA", "ClassRecord", "Classed", "Contrast",
           "ContrastRecord", "EquivalenceClass", "classify", "contrasts", "family_weights",
           "pick", "seed_means"]

ALPHA = 0.05
"""The error rate of each class: every one-sided test, before the Bonferroni split."""

DELTA = 1.0
"""The default practical margin, in points of accuracy."""

COST_TOLERANCE = 0.1
"""Costs within this share of the cheapest equivalent policy's count as equal."""

EquivalenceClass = Literal["best", "equivalent", "worse", "undecided"]

ClassRecord = TypedDict("ClassRecord", {"policy": str, "class": EquivalenceClass,
                                        "mean_difference": float, "low": float,
                                        "high": float, "seeds": int})
"""A policy's class as a report records it (:meth:`Classed.to_dict`)."""


@dataclass(frozen=True)
class Classed:
    """One policy against the best.

    :param policy: the policy.
    :param verdict: ``"best"``, ``"equivalent"`` (shown within ``delta``), ``"worse"``
        (shown below the best) or ``"undecided"``.
    :param mean_difference: its mean over the seeds minus the best's, in points.
    :param low: the adjusted interval's low end (``mean_difference`` for the best).
    :param high: its high end.
    :param seeds: the seeds paired.
    """

    policy: str
    verdict: EquivalenceClass
    mean_difference: float
    low: float
    high: float
    seeds: int

    def to_dict(self) -> ClassRecord:
        """The record the report holds."""
        return {"policy": self.policy, "class": self.verdict,
                "mean_difference": self.mean_difference, "low": self.low, "high": self.high,
                "seeds": self.seeds}


class ContrastRecord(TypedDict):
    """A contrast as a report records it (:meth:`Contrast.to_dict`)."""

    a: str
    b: str
    mean_difference: float
    low: float
    high: float
    seeds: int
    verdict: str


@dataclass(frozen=True)
class Contrast:
    """One policy against another, paired over the seeds, with the verdict its interval gives.

    :param a: the first policy.
    :param b: the second.
    :param mean_difference: ``a``'s mean over the seeds minus ``b``'s, in points.
    :param low: the adjusted interval's low end.
    :param high: its high end.
    :param seeds: the seeds paired.
    :param verdict: ``"higher"`` (the interval above 0), ``"lower"`` (below 0), either
        followed by ``"by less than DELTA"`` when the interval also lies inside the margin;
        ``"within ±DELTA"`` (inside the margin, across 0); or ``"undecided"``.
    """

    a: str
    b: str
    mean_difference: float
    low: float
    high: float
    seeds: int
    verdict: str

    def to_dict(self) -> ContrastRecord:
        """The record the report holds."""
        return {"a": self.a, "b": self.b, "mean_difference": self.mean_difference,
                "low": self.low, "high": self.high, "seeds": self.seeds,
                "verdict": self.verdict}


def _verdict(low: float, high: float, delta: float) -> str:
    """What an interval of a difference shows, against 0 and the margin ``delta``."""
    inside = -delta < low and high < delta
    if low > 0:
        return f"higher by less than {delta:g}" if inside else "higher"
    if high < 0:
        return f"lower by less than {delta:g}" if inside else "lower"
    return f"within ±{delta:g}" if inside else "undecided"


def _seeds_of(means: Mapping[str, Mapping[int, float]]) -> list[int]:
    """The seeds every policy shares; refuses other seeds, non-finite values, fewer than 2."""
    seeds = sorted(next(iter(means.values())))
    for policy, per_seed in means.items():
        if sorted(per_seed) != seeds:
            raise ValueError(f"{policy} has seeds {sorted(per_seed)}, not {seeds}")
        if not all(math.isfinite(v) for v in per_seed.values()):
            raise ValueError(f"{policy} has a non-finite accuracy")
    if len(seeds) < 2:
        raise ValueError(f"a paired interval over seeds needs at least 2 seeds, got "
                         f"{len(seeds)}")
    return seeds


def _interval(d: Sequence[float], q: float) -> tuple[float, float, float]:
    """``mean(d)`` and ``mean(d) -/+ q sd(d) / sqrt(n)``."""
    centre = statistics.fmean(d)
    half = q * statistics.stdev(d) / math.sqrt(len(d))
    return centre, centre - half, centre + half


def contrasts(means: Mapping[str, Mapping[int, float]], pairs: Sequence[tuple[str, str]],
              delta: float = DELTA, alpha: float = ALPHA) -> list[Contrast]:
    """Each pair's paired difference over the seeds, its interval and what it shows.

    The same statistics as :func:`classify`: the seeds are the replicates; each interval is
    ``mean(d) ± t(1 - a, n - 1) · sd(d) / sqrt(n)`` with ``a = alpha / len(pairs)``
    (Bonferroni over the pairs asked), and the verdict is read from that interval alone:
    *higher* or *lower* where it excludes 0 (a one-sided test at level ``a``), *within
    ±delta* where it lies inside the margin (two one-sided tests), else *undecided*.

    :param means: per policy, its accuracy per seed (:func:`seed_means`), the same seeds.
    :param pairs: the ``(a, b)`` asked: ``a`` minus ``b``.
    :param delta: the practical margin, in points (> 0).
    :param alpha: each one-sided test's level before the Bonferroni split.
    :raises ValueError: a margin that is not positive, a pair naming a policy not in
        ``means``, fewer than 2 seeds, seeds that differ, or a non-finite value.
    """
    if not delta > 0 or not math.isfinite(delta):
        raise ValueError(f"the margin delta must be a positive number, got {delta!r}")
    if not pairs:
        return []
    for a, b in pairs:
        for p in (a, b):
            if p not in means:
                raise ValueError(f"no runs of {p!r} to compare")
    seeds = _seeds_of({p: means[p] for pair in pairs for p in pair})
    from scipy.stats import t as student_t

    q = float(student_t.ppf(1 - alpha / len(pairs), len(seeds) - 1))
    out = []
    for a, b in pairs:
        centre, low, high = _interval([means[a][s] - means[b][s] for s in seeds], q)
        out.append(Contrast(a, b, centre, low, high, len(seeds), _verdict(low, high, delta)))
    return out


def family_weights(columns: Sequence[tuple[str, str]],
                   families: Mapping[str, float] | None = None) -> dict[str, float]:
    """Each column's weight: its family's weight, shared equally by the family's columns.

    :param columns: ``(column, family)`` of every column.
    :param families: each family's weight (``None``: equal); a family left out weighs 0.
    :return: the weights, by column, summing to 1.
    :raises ValueError: a negative weight, or no positive weight on any column.
    """
    present = list(dict.fromkeys(f for _, f in columns))
    chosen = {f: 1.0 for f in present} if families is None else {
        f: float(families.get(f, 0.0)) for f in present}
    if any(w < 0 for w in chosen.values()) or not sum(chosen.values()) > 0:
        raise ValueError(f"family weights must be >= 0 and some > 0 on {present}, got "
                         f"{chosen}")
    total = sum(chosen.values())
    size = {f: sum(1 for _, g in columns if g == f) for f in present}
    return {c: chosen[f] / total / size[f] for c, f in columns}


def seed_means(values: Mapping[str, Mapping[tuple[str, int], float]],
               weights: Mapping[str, float]) -> dict[str, dict[int, float]]:
    """Each policy's weighted mean accuracy per seed, over the weighted columns.

    :param values: per policy, the accuracy of each ``(column, seed)``.
    :param weights: each column's weight (:func:`family_weights`); columns of weight 0 are
        left out.
    :raises ValueError: a policy lacks a weighted column of a seed that another has, or
        has a NaN or infinite accuracy there (naming the policy, the column and the seed).
    """
    used = {c for c, w in weights.items() if w > 0}
    out: dict[str, dict[int, float]] = {}
    for policy, cells in values.items():
        seeds = sorted({s for (c, s) in cells if c in used})
        means = {}
        for s in seeds:
            missing = [c for c in used if (c, s) not in cells]
            if missing:
                raise ValueError(f"policy {policy!r} has no run on {missing[0]} with seed {s}")
            for c in sorted(used):
                if not math.isfinite(cells[(c, s)]):
                    raise ValueError(f"policy {policy!r} has accuracy {cells[(c, s)]!r} on "
                                     f"{c} with seed {s}: the statistics need finite numbers")
            means[s] = math.fsum(weights[c] * cells[(c, s)] for c in used)
        out[policy] = means
    return out


def classify(means: Mapping[str, Mapping[int, float]], delta: float = DELTA,
             alpha: float = ALPHA) -> list[Classed]:
    """Each policy against the best (the highest mean over the seeds), best first.

    :param means: per policy, its accuracy per seed (:func:`seed_means`), the same seeds.
    :param delta: the practical margin, in points (> 0).
    :param alpha: each one-sided test's level before the Bonferroni split over the
        ``k - 1`` policies compared with the best.
    :return: the best, then the others by mean difference (highest first).
    :raises ValueError: fewer than 2 seeds or policies, seeds that differ between policies,
        a margin that is not positive, or a non-finite value.
    """
    if not delta > 0 or not math.isfinite(delta):
        raise ValueError(f"the margin delta must be a positive number, got {delta!r}")
    if len(means) < 2:
        raise ValueError(f"equivalence needs at least 2 policies, got {len(means)}")
    seeds = _seeds_of(means)
    from scipy.stats import t as student_t

    mean = {p: statistics.fmean(v.values()) for p, v in means.items()}
    best = max(mean, key=lambda p: (mean[p], p))
    a = alpha / (len(means) - 1)
    q = float(student_t.ppf(1 - a, len(seeds) - 1))
    out = [Classed(best, "best", 0.0, 0.0, 0.0, len(seeds))]
    for policy in sorted((p for p in means if p != best), key=lambda p: -mean[p]):
        centre, low, high = _interval([means[policy][s] - means[best][s] for s in seeds], q)
        verdict: EquivalenceClass = (
            "equivalent" if -delta < low and high < delta
            else "worse" if high < 0 else "undecided")
        out.append(Classed(policy, verdict, centre, low, high, len(seeds)))
    return out


def pick(classed: Sequence[Classed], cost: Mapping[str, float],
         tolerance: float = COST_TOLERANCE) -> str:
    """The cheapest policy of the best and those equivalent to it.

    Costs within ``tolerance`` (a share) of the cheapest count as equal; among those the
    most accurate is picked (the best, if it is one of them).

    :param classed: :func:`classify`'s result.
    :param cost: each policy's cost (relative compute ``C``, or training seconds).
    :param tolerance: the share within which costs are equal (>= 0).
    """
    if tolerance < 0:
        raise ValueError(f"the cost tolerance must be >= 0, got {tolerance!r}")
    group = [c for c in classed if c.verdict in ("best", "equivalent")]
    cheapest = min(cost[c.policy] for c in group)
    equal = [c for c in group if cost[c.policy] <= cheapest * (1 + tolerance)]
    return max(equal, key=lambda c: (c.mean_difference, c.policy == group[0].policy)).policy
