"""Equivalence to the best: the intervals against scipy, the classes' error rates measured
on synthetic runs whose answer is known, the weights and the pick."""

import math

import numpy as np
import pytest
from scipy import stats

from avalanche_gss.reproduce.reports.equivalence import (
    Classed,
    classify,
    contrasts,
    family_weights,
    pick,
    seed_means,
)


def _means(table):
    return {p: dict(enumerate(v)) for p, v in table.items()}


def test_the_interval_is_the_paired_t_interval_at_the_bonferroni_level():
    table = {"A": [80.0, 81.0, 79.5, 80.5], "B": [79.6, 80.1, 79.4, 80.3],
             "C": [77.0, 78.5, 76.0, 78.0]}
    a = 0.05 / 2  # two policies against the best
    classed = {c.policy: c for c in classify(_means(table), delta=1.0)}
    assert classed["A"].verdict == "best"
    for p in ("B", "C"):
        d = np.array(table[p]) - np.array(table["A"])
        ci = stats.ttest_1samp(d, 0.0).confidence_interval(confidence_level=1 - 2 * a)
        assert classed[p].low == pytest.approx(ci.low, abs=1e-9)
        assert classed[p].high == pytest.approx(ci.high, abs=1e-9)
        assert classed[p].mean_difference == pytest.approx(d.mean(), abs=1e-12)
    # by hand: B's differences -0.4 -0.9 -0.1 -0.2, mean -0.4, sd 0.3559, t(0.975, 3) 3.182
    assert classed["B"].mean_difference == pytest.approx(-0.4)
    assert classed["B"].high - classed["B"].low == pytest.approx(
        2 * 3.182446 * 0.355903 / 2, abs=1e-4)
    assert classed["B"].verdict == "equivalent" and classed["C"].verdict == "worse"


@pytest.mark.parametrize("case", range(40))
def test_the_verdicts_are_two_one_sided_t_tests(case):
    rng = np.random.default_rng(case)
    n, k, delta = int(rng.integers(3, 7)), int(rng.integers(2, 5)), 1.0
    base = rng.normal(80, 2, n)
    table = {f"P{i}": base + rng.normal(-abs(rng.normal(0, 1.2)), rng.uniform(0.1, 0.8), n)
             for i in range(k)}
    classed = classify(_means({p: list(v) for p, v in table.items()}), delta=delta)
    best = classed[0].policy
    a = 0.05 / (k - 1)
    for c in classed[1:]:
        d = table[c.policy] - table[best]
        lower = stats.ttest_1samp(d, -delta, alternative="greater").pvalue
        upper = stats.ttest_1samp(d, delta, alternative="less").pvalue
        below = stats.ttest_1samp(d, 0.0, alternative="less").pvalue
        expected = ("equivalent" if max(lower, upper) < a else
                    "worse" if below < a else "undecided")
        assert c.verdict == expected, (c, lower, upper, below)


def _simulate(truth, sd, seeds, reps, rng):
    """Verdict counts per policy over ``reps`` synthetic comparisons of known means."""
    counts = {p: {"equivalent": 0, "worse": 0, "undecided": 0, "best": 0} for p in truth}
    for _ in range(reps):
        shared = rng.normal(0, 2.0, seeds)  # the seed's luck, shared by every policy
        table = {p: list(m + shared + rng.normal(0, sd, seeds)) for p, m in truth.items()}
        for c in classify(_means(table), delta=1.0):
            counts[c.policy][c.verdict] += 1
    return counts


def test_measured_error_rates_stay_at_or_under_the_level():
    # Known answers: "top" and "twin" are equally good (either may come out best); "near"
    # is 0.3 below them, within the margin; "edge" lies exactly at the margin (-1.0: not
    # equivalent); "low" is 3 points worse.
    rng = np.random.default_rng(2026)
    reps = 3000
    truth = {"top": 80.3, "twin": 80.3, "near": 80.0, "edge": 79.3, "low": 77.3}
    counts = _simulate(truth, sd=0.3, seeds=6, reps=reps, rng=rng)
    margin = 3 * math.sqrt(0.05 * 0.95 / reps)  # three Monte Carlo standard errors
    # a policy at the margin is called equivalent at most alpha of the time
    assert counts["edge"]["equivalent"] / reps <= 0.05 + margin
    # of two equally good policies, the one not picked as best is called worse at most
    # alpha of the time (the pick from the same runs biases against it)
    wrongly_worse = counts["top"]["worse"] + counts["twin"]["worse"]
    assert wrongly_worse / reps <= 0.05 + margin
    # and the classes have power where the answer is clear (measured: 100 %, 96 %, 68 %
    # with 6 seeds and a per-seed noise of 0.3 points): the low one is shown worse, the
    # twin not picked as best and the near one are mostly shown equivalent
    assert counts["low"]["worse"] / reps > 0.95
    assert (counts["top"]["equivalent"] + counts["twin"]["equivalent"]) / reps > 0.9
    assert counts["near"]["equivalent"] / reps > 0.5


def test_a_contrast_is_the_paired_t_interval_at_the_bonferroni_level_over_the_pairs():
    table = {"A": [80.0, 81.0, 79.5, 80.5], "B": [79.6, 80.1, 79.4, 80.3],
             "C": [77.0, 78.5, 76.0, 78.0]}
    pairs = [("A", "B"), ("A", "C"), ("B", "C")]
    found = contrasts(_means(table), pairs, delta=1.0)
    a = 0.05 / 3  # three contrasts asked
    for c, (x, y) in zip(found, pairs, strict=True):
        d = np.array(table[x]) - np.array(table[y])
        ci = stats.ttest_1samp(d, 0.0).confidence_interval(confidence_level=1 - 2 * a)
        assert (c.a, c.b, c.seeds) == (x, y, 4)
        assert (c.low, c.high) == (pytest.approx(ci.low, abs=1e-9), pytest.approx(ci.high,
                                                                                 abs=1e-9))
        above = stats.ttest_1samp(d, 0.0, alternative="greater").pvalue < a
        below = stats.ttest_1samp(d, 0.0, alternative="less").pvalue < a
        inside = max(stats.ttest_1samp(d, -1.0, alternative="greater").pvalue,
                     stats.ttest_1samp(d, 1.0, alternative="less").pvalue) < a
        expected = ("higher" if above else "lower" if below else
                    "within ±1" if inside else "undecided")
        if (above or below) and inside:
            expected += " by less than 1"
        assert c.verdict == expected, (c, above, below, inside)
    # by hand: A - B is +0.4 [0.4 ± t(1 - 0.05/3, 3) 0.3559 / 2]; t = 3.7405
    assert found[0].high - found[0].low == pytest.approx(2 * 3.7405 * 0.355903 / 2, abs=1e-3)
    assert [c.verdict for c in found] == ["undecided", "higher", "higher"]  # [-0.27, +1.07]


def test_contrasts_call_a_direction_wrongly_at_most_alpha_of_the_time():
    # Known answers: X and Y equally good (no direction is true), Z 0.3 above Y (inside the
    # margin), W exactly 1 above X (at the margin: not within it). Three contrasts asked.
    rng = np.random.default_rng(7)
    reps, seeds = 3000, 5
    truth = {"X": 80.0, "Y": 80.0, "Z": 80.3, "W": 81.0}
    pairs = [("X", "Y"), ("Z", "Y"), ("W", "X")]
    wrong_direction = within_at_margin = within_near = 0
    for _ in range(reps):
        shared = rng.normal(0, 2.0, seeds)
        table = {p: list(m + shared + rng.normal(0, 0.3, seeds)) for p, m in truth.items()}
        xy, zy, wx = contrasts(_means(table), pairs, delta=1.0)
        wrong_direction += xy.verdict.startswith(("higher", "lower")) or zy.verdict.startswith(
            "lower") or wx.verdict.startswith("lower")
        within_at_margin += wx.verdict.startswith("within") or wx.verdict.endswith("than 1")
        within_near += zy.verdict.startswith("within") or zy.verdict.endswith("than 1")
    margin = 3 * math.sqrt(0.05 * 0.95 / reps)  # three Monte Carlo standard errors
    # every wrong direction over the family of three: at most 2 alpha (two sides of X - Y,
    # one of each other); measured 3.7 %
    assert wrong_direction / reps <= 0.10 + margin
    # a difference exactly at the margin is called within it at most alpha of the time
    # (measured 1.8 %)
    assert within_at_margin / reps <= 0.05 + margin
    # and there is power where the answer is clear: 0.3 inside a margin of 1, 5 seeds
    # (measured 70 %)
    assert within_near / reps > 0.5


def test_family_weights_share_each_familys_weight_over_its_columns():
    columns = [("d/100", "disjoint"), ("i1/100", "imbalanced"), ("i2/100", "imbalanced"),
               ("p/100", "permuted")]
    w = family_weights(columns)
    assert w == pytest.approx({"d/100": 1 / 3, "i1/100": 1 / 6, "i2/100": 1 / 6,
                               "p/100": 1 / 3})
    only = family_weights(columns, {"imbalanced": 2.0})
    assert only == pytest.approx({"d/100": 0, "i1/100": 0.5, "i2/100": 0.5, "p/100": 0})
    with pytest.raises(ValueError, match="family weights must be >= 0 and some > 0"):
        family_weights(columns, {"disjoint": -1.0})
    values = {"A": {("d/100", 0): 90.0, ("i1/100", 0): 60.0, ("i2/100", 0): 70.0,
                    ("p/100", 0): 80.0}}
    assert seed_means(values, w) == {"A": {0: pytest.approx(90 / 3 + 65 / 3 + 80 / 3)}}
    with pytest.raises(ValueError, match="policy 'B' has no run on"):
        seed_means({**values, "B": {("d/100", 0): 1.0}}, w)


def test_the_pick_is_the_cheapest_equivalent_within_the_tolerance():
    classed = [Classed("A", "best", 0, 0, 0, 4), Classed("B", "equivalent", -0.3, -0.8, 0.2, 4),
               Classed("C", "equivalent", -0.6, -0.9, -0.3, 4),
               Classed("D", "undecided", -0.2, -1.5, 1.1, 4),
               Classed("E", "worse", -3, -4, -2, 4)]
    assert pick(classed, {"A": 2.0, "B": 1.05, "C": 1.0, "D": 0.5, "E": 0.1}) == "B"
    assert pick(classed, {"A": 2.0, "B": 1.2, "C": 1.0, "D": 0.5, "E": 0.1}) == "C"
    assert pick(classed, {"A": 1.0, "B": 1.0, "C": 1.0, "D": 0.5, "E": 0.1}) == "A"


def test_bad_inputs_are_refused_in_one_line():
    with pytest.raises(ValueError, match="delta must be a positive number"):
        classify(_means({"A": [1, 2], "B": [1, 2]}), delta=0)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        classify(_means({"A": [1], "B": [1]}))
    with pytest.raises(ValueError, match="B has seeds"):
        classify({"A": {0: 1.0, 1: 2.0}, "B": {0: 1.0}})
