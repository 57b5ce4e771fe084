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
  cannot tell from the best one, and the cheapest of them; none where the pairs are too
  few for any test to reach the level (:func:`pairs_needed`, :class:`TooFewPairs`).

Every value must be a finite number: NaN or infinity is refused with a ``ValueError``
naming it, never ranked or tested. The statistics are computed here (tested against
``scipy.stats``); scipy supplies the normal, t and chi-square distributions only.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypedDict, cast

__all__ = ["ALPHA", "EXACT_PAIRS", "EXACT_TIED_PAIRS", "MIN_SEEDS", "Comparison",
           "ComparisonRecord", "FriedmanTest", "Recommendation", "RecommendationRecord",
           "TooFewPairs", "compare", "friedman", "holm", "mean_interval", "pairs_needed",
           "rank_average", "recommend", "smallest_p", "wilcoxon_signed_rank"]

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


def friedman(blocks: Sequence[Sequence[float]]) -> tuple[float, float]:
    """The Friedman test that k treatments are alike, over blocks (here: the columns).

    Each block's values are ranked (ties share their mean rank); the statistic is the
    chi-square of the rank sums, divided by the tie correction, with k - 1 degrees of
    freedom: ``scipy.stats.friedmanchisquare`` with the treatments as its arguments.

    :param blocks: per block, one value per treatment (the same treatments in the same
        order in every block; at least 3 treatments and 2 blocks).
    :return: ``(chi-square statistic, p)``.
    :raises ValueError: fewer than 3 treatments or 2 blocks, blocks of unequal length, or
        a value that is NaN or infinite.
    """
    from scipy.stats import chi2

    n = len(blocks)
    k = len(blocks[0]) if blocks else 0
    if k < 3 or n < 2:
        raise ValueError(f"the Friedman test needs at least 3 treatments and 2 blocks, got {k} "
                         f"treatments and {n} blocks")
    if any(len(b) != k for b in blocks):
        raise ValueError("every block of the Friedman test needs one value per treatment")
    for i, block in enumerate(blocks):
        _finite(block, f"block {i} of the Friedman test")
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


def _check_values(values: Mapping[str, Mapping[Any, float]], policies: Sequence[str]) -> None:
    """Refuse a NaN or infinite accuracy, naming its policy and pair key."""
    for p in policies:
        for key, v in values[p].items():
            if not math.isfinite(v):
                raise ValueError(f"policy {p!r} has accuracy {v!r} at {key!r}: the "
                                 "statistics need finite numbers")


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


class TooFewPairs(ValueError):
    """Too few (column, seed) pairs for any comparison with the best to reach the level.

    With n pairs the exact signed-rank test cannot go below p = 2 / 2^n
    (:func:`smallest_p`), and Holm multiplies that by the comparisons: below
    :func:`pairs_needed` pairs every policy would be "in the group" whatever its runs, and
    the pick would be the cheapest policy, even one below the best on every pair.

    :param pairs: the pairs the policies share.
    :param needed: the fewest pairs that can decide.
    :param more_seeds: about how many more seeds give them, at this grid of columns.
    :param message: the reason, in one line.
    """

    def __init__(self, pairs: int, needed: int, more_seeds: int, message: str) -> None:
        super().__init__(message)
        self.pairs = pairs
        self.needed = needed
        self.more_seeds = more_seeds


def _too_few(pairs: int, tests: int, n_columns: int) -> TooFewPairs:
    """The refusal of a recommendation from ``pairs`` pairs over ``n_columns`` columns."""
    needed = pairs_needed(tests)
    more = max(1, math.ceil(needed / n_columns) - pairs // n_columns)
    holm_words = (f", times {tests} for Holm over the {tests} comparisons with the best"
                  if tests > 1 else "")
    return TooFewPairs(pairs, needed, more, (
        f"no pick: {pairs} pairs cannot reach p < {ALPHA} (the exact Wilcoxon signed-rank "
        f"test of {pairs} pairs reaches at best p = {smallest_p(pairs):.3g}{holm_words}); "
        f"at least {needed} pairs are needed, i.e. about {more} more seed"
        f"{'s' if more > 1 else ''} at this grid of {n_columns} column"
        f"{'s' if n_columns > 1 else ''}"))


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
    :raises TooFewPairs: too few pairs for any comparison with the best to reach
        :data:`ALPHA` after Holm's correction (:func:`pairs_needed`): no group and no
        pick, whatever the runs; the error says how many pairs (and seeds) are needed.
    :raises ValueError: fewer than 2 policies, policies on different pair keys, or an
        accuracy that is NaN or infinite (naming its policy and pair key).

    A policy below the best on every pair is never in the group (with enough pairs the
    test says so; the rule checks it as well).
    """
    names = list(values)
    if len(names) < 2:
        raise ValueError(f"a recommendation compares at least 2 policies, got {len(names)}")
    keys = set(values[names[0]])
    for p in names[1:]:
        if set(values[p]) != keys:
            raise ValueError(f"policy {p!r} ran on other (column, seed) pairs than "
                             f"{names[0]!r}; a paired comparison needs the same ones")
    _check_values(values, names)
    if len(keys) < pairs_needed(len(names) - 1):
        raise _too_few(len(keys), len(names) - 1, len({columns[k] for k in keys}))
    mean = {p: math.fsum(values[p].values()) / len(values[p]) for p in names}
    best = max(names, key=lambda p: (mean[p], -names.index(p)))
    against = compare(values, [(p, best) for p in names if p != best])
    group = [best] + [c.a for c in sorted(against, key=lambda c: -c.mean_difference)
                      if c.p_holm > ALPHA and c.losses < c.pairs]
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
