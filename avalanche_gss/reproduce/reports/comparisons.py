"""Paired comparisons of policies, and the recommendation rule they support.

Runs of two policies on the same stream, buffer size and seed are a *pair*: they see the
same samples in the same order and start from the same weights, so their difference
measures the policies, not the luck of the draw. Over every pair that two policies share
(a column of the table, stream x buffer size, times a seed), this module gives:

- the mean difference with a Student-t 95 % confidence interval (:func:`mean_interval`);
- the Wilcoxon signed-rank test of that difference (:func:`wilcoxon_signed_rank`),
  recommended for comparing two methods over many data sets by Demšar (JMLR 2006),
  whose p-values are corrected for the many pairs tested by Holm's step-down method
  (:func:`holm`). Each pair of policies is tested on its own runs, not through mean
  ranks: a post-hoc test on mean ranks lets a third policy change whether two others
  differ (Benavoli, Corani & Mangili, JMLR 2016);
- the Friedman test that all the policies are alike, over the columns (:func:`friedman`);
- the recommendation rule (:func:`recommend`): the group of policies that the data
  cannot tell from the best one, and the cheapest of them.

The statistics are computed here (tested against ``scipy.stats``); scipy supplies the
normal, t and chi-square distributions only.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypedDict, cast

__all__ = ["ALPHA", "MIN_SEEDS", "Comparison", "ComparisonRecord", "FriedmanTest",
           "Recommendation", "RecommendationRecord", "compare", "friedman", "holm",
           "mean_interval", "rank_average", "recommend", "wilcoxon_signed_rank"]

ALPHA = 0.05
"""The significance level of every test and the miss rate of every interval (95 %)."""

MIN_SEEDS = 2
"""The fewest seeds a recommendation is made from: with one, a policy's luck on that
seed's streams and weights cannot be told from the policy."""

EXACT_PAIRS = 50
"""Up to this many nonzero, untied differences the Wilcoxon test uses its exact null
distribution; otherwise the normal approximation (as ``scipy.stats.wilcoxon`` does)."""


def rank_average(values: Sequence[float]) -> list[float]:
    """Ranks from 1 (smallest value); tied values share the mean of their ranks.

    :param values: the values to rank.
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _tie_sizes(values: Sequence[float]) -> list[int]:
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return [c for c in counts.values() if c > 1]


def mean_interval(differences: Sequence[float], confidence: float = 1 - ALPHA
                  ) -> tuple[float, float, float]:
    """The mean of paired differences and its Student-t confidence interval.

    :param differences: one difference per pair (at least two).
    :param confidence: the interval's nominal coverage.
    :return: ``(mean, low, high)``.
    :raises ValueError: fewer than two differences, or a confidence outside (0, 1).
    """
    from scipy.stats import t as student_t

    n = len(differences)
    if n < 2:
        raise ValueError(f"a confidence interval needs at least 2 paired differences, got {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    mean = math.fsum(differences) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (n - 1))
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _exact_counts(n: int) -> list[int]:
    """How many subsets of the ranks 1..n sum to each w = 0 .. n(n+1)/2."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for w in range(len(counts) - 1, rank - 1, -1):
            counts[w] += counts[w - rank]
    return counts


def wilcoxon_signed_rank(differences: Sequence[float]) -> tuple[float, float]:
    """The two-sided Wilcoxon signed-rank test that paired differences centre on zero.

    Zero differences are dropped (Wilcoxon's own rule); the others are ranked by their
    absolute value, ties sharing their mean rank. With at most :data:`EXACT_PAIRS`
    differences and neither ties nor zeros, the p-value comes from the exact null
    distribution; otherwise from the normal approximation with the tie correction and no
    continuity correction. This is ``scipy.stats.wilcoxon(d)`` with its defaults, except
    that where scipy would run a random permutation test (ties or zeros among at most 13
    pairs) this uses the normal approximation.

    :param differences: one difference per pair.
    :return: ``(statistic, p)``: the smaller of the positive and negative rank sums, and
        the two-sided p-value (1.0 when every difference is zero).
    """
    nonzero = [d for d in differences if d != 0]
    n = len(nonzero)
    if n == 0:
        return 0.0, 1.0
    ranks = rank_average([abs(d) for d in nonzero])
    plus = math.fsum(r for r, d in zip(ranks, nonzero, strict=True) if d > 0)
    minus = math.fsum(r for r, d in zip(ranks, nonzero, strict=True) if d < 0)
    ties = _tie_sizes([abs(d) for d in nonzero])
    if n <= EXACT_PAIRS and not ties and n == len(differences):
        counts = _exact_counts(n)
        total = 2 ** n
        low = sum(counts[: math.ceil(plus) + 1]) / total
        high = sum(counts[math.floor(plus):]) / total
        return min(plus, minus), min(1.0, 2 * min(low, high))
    from scipy.stats import norm

    mean = n * (n + 1) / 4
    var = (n * (n + 1) * (2 * n + 1) - sum(t ** 3 - t for t in ties) / 2) / 24
    if var <= 0:
        return min(plus, minus), 1.0
    z = (plus - mean) / math.sqrt(var)
    return min(plus, minus), min(1.0, float(2 * norm.sf(abs(z))))


def friedman(blocks: Sequence[Sequence[float]]) -> tuple[float, float]:
    """The Friedman test that k treatments are alike, over blocks (here: the columns).

    Each block's values are ranked (ties share their mean rank); the statistic is the
    chi-square of the rank sums, divided by the tie correction, with k - 1 degrees of
    freedom: ``scipy.stats.friedmanchisquare`` with the treatments as its arguments.

    :param blocks: per block, one value per treatment (the same treatments in the same
        order in every block; at least 3 treatments and 2 blocks).
    :return: ``(chi-square statistic, p)``.
    :raises ValueError: fewer than 3 treatments or 2 blocks, or blocks of unequal length.
    """
    from scipy.stats import chi2

    n = len(blocks)
    k = len(blocks[0]) if blocks else 0
    if k < 3 or n < 2:
        raise ValueError(f"the Friedman test needs at least 3 treatments and 2 blocks, got {k} "
                         f"treatments and {n} blocks")
    if any(len(b) != k for b in blocks):
        raise ValueError("every block of the Friedman test needs one value per treatment")
    sums = [0.0] * k
    tie_term = 0
    for block in blocks:
        for j, r in enumerate(rank_average(block)):
            sums[j] += r
        tie_term += sum(t ** 3 - t for t in _tie_sizes(block))
    stat = 12 / (n * k * (k + 1)) * math.fsum(s * s for s in sums) - 3 * n * (k + 1)
    correction = 1 - tie_term / (n * k * (k * k - 1))
    if correction <= 0:  # every block all tied: nothing tells the treatments apart
        return 0.0, 1.0
    stat /= correction
    return stat, float(chi2.sf(stat, k - 1))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given.

    The i-th smallest of m p-values is multiplied by m - i + 1, each kept at least as
    large as the one before it and at most 1: a hypothesis is rejected at level alpha
    when its adjusted p-value is at most alpha, with the family-wise error at most alpha.

    :param p_values: the unadjusted p-values of one family of tests.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (m - step) * p_values[i]))
        adjusted[i] = running
    return adjusted


class ComparisonRecord(TypedDict):
    """A :class:`Comparison` as reports record it (and read it back): its fields."""

    a: str
    b: str
    pairs: int
    mean_difference: float
    low: float
    high: float
    wins: int
    losses: int
    statistic: float
    p: float
    p_holm: float


@dataclass(frozen=True)
class Comparison:
    """Policy ``a`` against policy ``b`` over the pairs they share.

    :param a: the first policy.
    :param b: the second policy.
    :param pairs: the number of pairs (column x seed).
    :param mean_difference: the mean of a's accuracy minus b's, in points.
    :param low: the 95 % interval's lower end.
    :param high: its upper end.
    :param wins: pairs where a is higher.
    :param losses: pairs where a is lower.
    :param statistic: the Wilcoxon signed-rank statistic.
    :param p: the test's two-sided p-value.
    :param p_holm: that p-value adjusted by Holm's method over the family it belongs to.
    """

    a: str
    b: str
    pairs: int
    mean_difference: float
    low: float
    high: float
    wins: int
    losses: int
    statistic: float
    p: float
    p_holm: float

    def to_dict(self) -> ComparisonRecord:
        """The comparison as reports record it."""
        return cast(ComparisonRecord, asdict(self))


def _difference(values: Mapping[str, Mapping[Any, float]], a: str, b: str
                ) -> list[float]:
    shared = [key for key in values[a] if key in values[b]]
    return [values[a][key] - values[b][key] for key in shared]


def _compare(values: Mapping[str, Mapping[Any, float]], a: str, b: str,
             p_holm: float = math.nan) -> Comparison:
    diffs = _difference(values, a, b)
    mean, low, high = mean_interval(diffs)
    statistic, p = wilcoxon_signed_rank(diffs)
    return Comparison(a, b, len(diffs), mean, low, high, sum(d > 0 for d in diffs),
                      sum(d < 0 for d in diffs), statistic, p, p_holm)


def compare(values: Mapping[str, Mapping[Any, float]],
            pairs: Sequence[tuple[str, str]] | None = None) -> list[Comparison]:
    """Paired comparisons, with Holm's correction over all of them.

    :param values: per policy, its accuracy by pair key (e.g. ``(stream, M, seed)``);
        two policies are compared on the keys they share.
    :param pairs: the ``(a, b)`` pairs to compare, a family for the correction; every
        unordered pair of ``values``' policies, in their order, by default.
    """
    names = list(values)
    chosen = pairs if pairs is not None else [
        (a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    raw = [_compare(values, a, b) for a, b in chosen]
    adjusted = holm([c.p for c in raw])
    return [replace(c, p_holm=p) for c, p in zip(raw, adjusted, strict=True)]


class FriedmanTest(TypedDict):
    """The Friedman test of a :class:`Recommendation` (counts as floats, as recorded).

    :param statistic: the chi-square statistic (NaN when not computed).
    :param p: its p-value (NaN when not computed).
    :param columns: the number of columns (blocks).
    :param policies: the number of policies (treatments).
    """

    statistic: float
    p: float
    columns: float
    policies: float


class RecommendationRecord(TypedDict):
    """A :class:`Recommendation` as reports record it (and read it back): its fields."""

    group: list[str]
    pick: str
    best: str
    rule: str
    against_best: list[ComparisonRecord]
    friedman: FriedmanTest
    separates: bool
    data: str


@dataclass(frozen=True)
class Recommendation:
    """Which policies the data cannot tell from the best, and which of them to use.

    :param group: the best policy, then those not significantly worse, best first.
    :param pick: the group's cheapest policy.
    :param best: the policy of the highest mean accuracy over all pairs.
    :param rule: the rule, in words.
    :param against_best: each other policy against the best, Holm-corrected over them.
    :param friedman: the Friedman test over the columns: ``{"statistic", "p",
        "columns", "policies"}``.
    :param separates: whether the group holds fewer than half of the policies compared.
    :param data: what data the recommendation is for.
    """

    group: list[str]
    pick: str
    best: str
    rule: str
    against_best: list[Comparison]
    friedman: FriedmanTest
    separates: bool
    data: str

    def to_dict(self) -> RecommendationRecord:
        """The recommendation as reports record it."""
        return RecommendationRecord(group=list(self.group), pick=self.pick, best=self.best,
                                    rule=self.rule,
                                    against_best=[c.to_dict() for c in self.against_best],
                                    friedman=FriedmanTest(**self.friedman),
                                    separates=self.separates, data=self.data)


RULE = ("best: the policy of the highest mean accuracy over every (column, seed) pair; "
        "group: the best and every policy whose paired Wilcoxon signed-rank test against "
        "it, Holm-corrected over the {others} comparisons with the best, is not significant "
        "at {alpha} (the data cannot tell it from the best); pick: the group's policy of the "
        "least relative compute C{cost_note} (within the group the accuracies cannot be told "
        "apart, so the cheapest gives the same accuracy for the least compute; ties by mean "
        "accuracy)")


def recommend(values: Mapping[str, Mapping[Any, float]],
              columns: Mapping[Any, Hashable], cost: Mapping[str, float], data: str,
              cost_name: str = "C") -> Recommendation:
    """Apply the recommendation rule (:data:`RULE`) to paired results.

    :param values: per policy, its accuracy by pair key; every policy on the same keys.
    :param columns: each pair key's column (the Friedman test's block): its stream and
        buffer size.
    :param cost: each policy's cost, lower is cheaper (its mean relative compute C).
    :param data: the data the runs used, as the report names it.
    :param cost_name: what ``cost`` is, for the rule's text when it is not C.
    :raises ValueError: fewer than 2 policies, or policies on different pair keys.
    """
    names = list(values)
    if len(names) < 2:
        raise ValueError(f"a recommendation compares at least 2 policies, got {len(names)}")
    keys = set(values[names[0]])
    for p in names[1:]:
        if set(values[p]) != keys:
            raise ValueError(f"policy {p!r} ran on other (column, seed) pairs than "
                             f"{names[0]!r}; a paired comparison needs the same ones")
    mean = {p: math.fsum(values[p].values()) / len(values[p]) for p in names}
    best = max(names, key=lambda p: (mean[p], -names.index(p)))
    against = compare(values, [(p, best) for p in names if p != best])
    group = [best] + [c.a for c in sorted(against, key=lambda c: -c.mean_difference)
                      if c.p_holm > ALPHA]
    pick = min(group, key=lambda p: (cost[p], -mean[p]))
    blocks: dict[Hashable, list[list[float]]] = {}
    for key in sorted(keys, key=repr):
        blocks.setdefault(columns[key], []).append([values[p][key] for p in names])
    per_column = [[math.fsum(col[i] for col in rows) / len(rows) for i in range(len(names))]
                  for rows in blocks.values()]
    stat, p_value = (friedman(per_column) if len(names) >= 3 and len(per_column) >= 2
                     else (math.nan, math.nan))
    test = FriedmanTest(statistic=stat, p=p_value, columns=float(len(per_column)),
                        policies=float(len(names)))
    note = "" if cost_name == "C" else f" (here {cost_name}: no pass counts were taken)"
    rule = RULE.format(others=len(names) - 1, alpha=ALPHA, cost_note=note)
    return Recommendation(group, pick, best, rule, against, test,
                          len(group) < len(names) / 2, data)
