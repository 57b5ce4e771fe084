"""Paired comparisons of policies over (column, seed) pairs: intervals and rank tests.

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
- how few pairs the exact test can decide from (:func:`smallest_p`, :func:`pairs_needed`).

No verdict is drawn from these here: which-buffer's recommendation and ablations read their
verdicts from intervals over the seeds (:mod:`~avalanche_gss.reproduce.reports.equivalence`),
and keep these comparisons of every pair as data.

Every value must be a finite number: NaN or infinity is refused with a ``ValueError``
naming it, never ranked or tested. The statistics are computed here (tested against
``scipy.stats``); scipy supplies the normal and t distributions only.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TypedDict, TypeVar, cast

__all__ = ["ALPHA", "EXACT_PAIRS", "EXACT_TIED_PAIRS", "MIN_SEEDS", "Comparison",
           "ComparisonRecord", "compare", "holm", "mean_interval", "pairs_needed",
           "rank_average", "smallest_p", "wilcoxon_signed_rank"]

K = TypeVar("K", bound=Hashable)
"""A column's key (a stream, a buffer size, a seed...)."""

ALPHA = 0.05
"""The significance level of every test and the miss rate of every interval (95 %)."""

MIN_SEEDS = 2
"""The fewest seeds a recommendation is made from: with one, a policy's luck on that
seed's streams and weights cannot be told from the policy."""

EXACT_PAIRS = 50
"""Up to this many nonzero, untied differences the Wilcoxon test uses its exact null
distribution; otherwise the normal approximation (as ``scipy.stats.wilcoxon`` does)."""

EXACT_TIED_PAIRS = 20
"""Up to this many differences, with ties or zeros among them, the Wilcoxon test uses the
exact null distribution of their signed ranks (every one of the 2^n sign assignments);
beyond, the normal approximation with the tie correction."""


def _finite(values: Sequence[float], what: str) -> None:
    """Refuse NaN and infinity: a test of them would answer nonsense, not fail."""
    for i, v in enumerate(values):
        if not math.isfinite(v):
            raise ValueError(f"{what} hold {v!r} (at index {i}): the statistics need "
                             "finite numbers")


def rank_average(values: Sequence[float]) -> list[float]:
    """Ranks from 1 (smallest value); tied values share the mean of their ranks.

    The ranks depend on the values only, not on their order.

    :param values: the values to rank.
    :raises ValueError: a value is NaN (it has no place in an order).
    """
    for i, v in enumerate(values):
        if math.isnan(v):
            raise ValueError(f"cannot rank NaN (value at index {i})")
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
    :raises ValueError: fewer than two differences, one not finite, or a confidence outside
        (0, 1).
    """
    from scipy.stats import t as student_t

    _finite(differences, "the paired differences")
    n = len(differences)
    if n < 2:
        raise ValueError(f"a confidence interval needs at least 2 paired differences, got {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    mean = math.fsum(differences) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (n - 1))
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _signed_rank_counts(doubled: Sequence[int]) -> list[int]:
    """How many of the 2^n sign assignments give each positive rank sum (ranks doubled).

    ``doubled`` holds twice each rank (integers, since a tied rank is a multiple of 1/2);
    entry w of the result counts the subsets of them that sum to w.
    """
    counts = [1] + [0] * sum(doubled)
    reached = 0
    for rank in doubled:
        reached += rank
        for w in range(reached, rank - 1, -1):
            counts[w] += counts[w - rank]
    return counts


def smallest_p(pairs: int) -> float:
    """The smallest two-sided p-value of the exact signed-rank test over ``pairs`` pairs.

    Reached when every difference is nonzero and of one sign: one sign assignment of the
    2^n at each extreme, p = 2 / 2^n (ties or not); 1 for no pairs.

    :param pairs: the number of pairs.
    """
    return 1.0 if pairs < 1 else min(1.0, 2.0 ** (1 - pairs))


def pairs_needed(tests: int = 1, alpha: float = ALPHA) -> int:
    """The fewest pairs with which one of ``tests`` Holm-corrected tests can reach ``alpha``.

    Holm multiplies the smallest of the family's p-values by the number of tests, so the
    least n with ``tests x smallest_p(n) <= alpha``: 6 for one test at 0.05 (5 pairs give
    at best p = 0.0625).

    :param tests: the number of tests in the Holm family.
    :param alpha: the level.
    :raises ValueError: fewer than one test, or a level outside (0, 1).
    """
    if tests < 1 or not 0 < alpha < 1:
        raise ValueError(f"pairs_needed needs at least 1 test and a level in (0, 1), got "
                         f"{tests} and {alpha!r}")
    n = 1
    while tests * smallest_p(n) > alpha:
        n += 1
    return n


def wilcoxon_signed_rank(differences: Sequence[float]) -> tuple[float, float]:
    """The two-sided Wilcoxon signed-rank test that paired differences centre on zero.

    Zero differences are dropped (Wilcoxon's own rule); the others are ranked by their
    absolute value, ties sharing their mean rank. The p-value is exact (from the null
    distribution of the positive rank sum over every sign assignment of the nonzero
    differences) with at most :data:`EXACT_PAIRS` differences and neither ties nor zeros,
    or with at most :data:`EXACT_TIED_PAIRS` differences whatever their ties and zeros;
    otherwise it comes from the normal approximation with the tie correction and no
    continuity correction. This is ``scipy.stats.wilcoxon(d)`` with its defaults, whose
    permutation test with ties or zeros among at most 13 pairs enumerates the same sign
    assignments; between 14 and :data:`EXACT_TIED_PAIRS` pairs with ties or zeros, scipy
    approximates where this stays exact.

    :param differences: one difference per pair.
    :return: ``(statistic, p)``: the smaller of the positive and negative rank sums, and
        the two-sided p-value (1.0 when every difference is zero).
    :raises ValueError: a difference is NaN or infinite.
    """
    _finite(differences, "the paired differences")
    nonzero = [d for d in differences if d != 0]
    n = len(nonzero)
    if n == 0:
        return 0.0, 1.0
    ranks = rank_average([abs(d) for d in nonzero])
    plus = math.fsum(r for r, d in zip(ranks, nonzero, strict=True) if d > 0)
    minus = math.fsum(r for r, d in zip(ranks, nonzero, strict=True) if d < 0)
    ties = _tie_sizes([abs(d) for d in nonzero])
    untied = not ties and n == len(differences)
    if (untied and n <= EXACT_PAIRS) or len(differences) <= EXACT_TIED_PAIRS:
        counts = _signed_rank_counts([round(2 * r) for r in ranks])
        at = round(2 * plus)  # ranks are multiples of 1/2: doubled, sums are exact
        total = 2 ** n
        low = sum(counts[: at + 1]) / total
        high = sum(counts[at:]) / total
        return min(plus, minus), min(1.0, 2 * min(low, high))
    from scipy.stats import norm

    mean = n * (n + 1) / 4
    var = (n * (n + 1) * (2 * n + 1) - sum(t ** 3 - t for t in ties) / 2) / 24
    if var <= 0:
        return min(plus, minus), 1.0
    z = (plus - mean) / math.sqrt(var)
    return min(plus, minus), min(1.0, float(2 * norm.sf(abs(z))))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given.

    The i-th smallest of m p-values is multiplied by m - i + 1, each kept at least as
    large as the one before it and at most 1: a hypothesis is rejected at level alpha
    when its adjusted p-value is at most alpha, with the family-wise error at most alpha.

    :param p_values: the unadjusted p-values of one family of tests.
    :raises ValueError: a p-value that is NaN or outside [0, 1].
    """
    for i, p in enumerate(p_values):
        if not 0 <= p <= 1:  # NaN fails every comparison
            raise ValueError(f"Holm's method needs p-values in [0, 1], got {p!r} at index {i}")
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


def _check_values(values: Mapping[str, Mapping[K, float]], policies: Sequence[str]) -> None:
    """Refuse a NaN or infinite accuracy, naming its policy and pair key."""
    for p in policies:
        for key, v in values[p].items():
            if not math.isfinite(v):
                raise ValueError(f"policy {p!r} has accuracy {v!r} at {key!r}: the "
                                 "statistics need finite numbers")


def _difference(values: Mapping[str, Mapping[K, float]], a: str, b: str
                ) -> list[float]:
    shared = [key for key in values[a] if key in values[b]]
    return [values[a][key] - values[b][key] for key in shared]


def _compare(values: Mapping[str, Mapping[K, float]], a: str, b: str,
             p_holm: float = math.nan) -> Comparison:
    diffs = _difference(values, a, b)
    mean, low, high = mean_interval(diffs)
    statistic, p = wilcoxon_signed_rank(diffs)
    return Comparison(a, b, len(diffs), mean, low, high, sum(d > 0 for d in diffs),
                      sum(d < 0 for d in diffs), statistic, p, p_holm)


def compare(values: Mapping[str, Mapping[K, float]],
            pairs: Sequence[tuple[str, str]] | None = None) -> list[Comparison]:
    """Paired comparisons, with Holm's correction over all of them.

    :param values: per policy, its accuracy by pair key (e.g. ``(stream, M, seed)``);
        two policies are compared on the keys they share.
    :param pairs: the ``(a, b)`` pairs to compare, a family for the correction; every
        unordered pair of ``values``' policies, in their order, by default.
    :raises ValueError: an accuracy of a compared policy is NaN or infinite (the error
        names the policy and the pair key), or two policies share fewer than 2 pairs.
    """
    names = list(values)
    chosen = pairs if pairs is not None else [
        (a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    _check_values(values, list(dict.fromkeys(p for pair in chosen for p in pair)))
    raw = [_compare(values, a, b) for a, b in chosen]
    adjusted = holm([c.p for c in raw])
    return [replace(c, p_holm=p) for c, p in zip(raw, adjusted, strict=True)]
