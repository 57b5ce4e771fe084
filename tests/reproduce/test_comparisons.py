"""The paired comparisons of every pair of policies, against scipy and by hand."""

import random

import numpy as np
import pytest
from scipy import stats

from avalanche_gss.reproduce.reports.comparisons import (
    compare,
    holm,
    mean_interval,
    rank_average,
    wilcoxon_signed_rank,
)


def test_ranks_share_their_mean_on_ties():
    assert rank_average([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    np.testing.assert_allclose(rank_average([5, 5, 5, 1, 9, 1]),
                               stats.rankdata([5, 5, 5, 1, 9, 1]))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [5, 12, 30, 50])
def test_wilcoxon_exact_equals_scipy_without_ties(seed, n):
    rng = np.random.default_rng(seed)
    d = rng.normal(0.4, 1.0, n)  # continuous: no ties, no zeros
    stat, p = wilcoxon_signed_rank(list(d))
    ref = stats.wilcoxon(d, method="exact")
    assert stat == pytest.approx(ref.statistic, abs=1e-9)
    assert p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [24, 48, 96, 200])  # over EXACT_TIED_PAIRS
def test_wilcoxon_with_ties_and_zeros_equals_scipys_normal_approximation(seed, n):
    rng = np.random.default_rng(100 + seed)
    d = np.round(rng.normal(0.3, 1.5, n), 1)  # accuracies at 0.1: ties and zeros
    d[:3] = 0.0
    stat, p = wilcoxon_signed_rank(list(d))
    ref = stats.wilcoxon(d, method="asymptotic")
    assert stat == pytest.approx(ref.statistic, abs=1e-9)
    assert p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)


def test_wilcoxon_over_fifty_pairs_matches_scipys_default():
    d = list(np.random.default_rng(7).normal(0.2, 1, 80))
    assert wilcoxon_signed_rank(d)[1] == pytest.approx(stats.wilcoxon(d).pvalue, rel=1e-9)


def test_wilcoxon_of_all_zero_differences_finds_nothing():
    assert wilcoxon_signed_rank([0.0, 0.0, 0.0]) == (0.0, 1.0)


def test_holm_by_hand():
    # m = 4: sorted 0.01, 0.02, 0.03, 0.5 -> x4, x3, x2, x1 = 0.04, 0.06, 0.06 (kept
    # monotone: max(0.06, 0.06)), 0.5; given in another order
    assert holm([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert holm([0.4, 0.3]) == pytest.approx([0.6, 0.6])  # 0.3 x 2 = 0.6, then max(0.6, 0.4)
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_the_interval_equals_the_t_interval():
    d = [0.5, -0.2, 1.3, 0.8, 0.1, 0.9]
    mean, low, high = mean_interval(d)
    ref = stats.t.interval(0.95, len(d) - 1, loc=np.mean(d), scale=stats.sem(d))
    assert mean == pytest.approx(np.mean(d))
    assert (low, high) == pytest.approx(ref)


def test_the_interval_covers_a_known_mean_difference_95_percent_of_the_time():
    # 4,000 synthetic comparisons of 48 pairs (24 columns x 2 seeds), each pair's
    # difference the true mean 0.7 plus a column effect and noise, skewed (exponential)
    rng = random.Random(0)
    hits, trials = 0, 4000
    for _ in range(trials):
        d = [0.7 + rng.gauss(0, 1.2) + (rng.expovariate(1.0) - 1.0) for _ in range(48)]
        _, low, high = mean_interval(d)
        hits += low <= 0.7 <= high
    coverage = hits / trials
    # binomial sd at 95 % over 4,000 trials: 0.34 points; the interval is nominal 95 %
    assert 0.94 <= coverage <= 0.96, coverage


def _values(means, seeds=4, columns=6, noise=0.6, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.normal(80, 5, columns)
    return {p: {(c, s): float(base[c] + mu + rng.normal(0, noise))
                for c in range(columns) for s in range(seeds)}
            for p, mu in means.items()}


def test_a_pair_table_is_one_family_for_holm():
    values = _values({"A": 0.0, "B": -1.0, "C": -2.0})
    table = compare(values)
    assert [(c.a, c.b) for c in table] == [("A", "B"), ("A", "C"), ("B", "C")]
    assert [c.p_holm for c in table] == pytest.approx(holm([c.p for c in table]))
    ab = table[0]
    d = [values["A"][k] - values["B"][k] for k in values["A"]]
    assert ab.pairs == 24 and ab.mean_difference == pytest.approx(np.mean(d))
    assert ab.wins + ab.losses == 24
    assert ab.p == pytest.approx(stats.wilcoxon(d).pvalue, rel=1e-9)
