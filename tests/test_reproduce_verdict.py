"""Each table cell the paper has: ours − paper, its 95 % interval, and a Welch's t verdict."""

import math
import statistics

import pytest
from scipy import stats
from test_reporting import run, write

from avalanche_gss.reproduce.reports.paper import PAPER_SEEDS, reproduce_test
from avalanche_gss.reproduce.reports.writing import reproduce_tests, rows_from_runs

CASES = [
    ([82.1, 84.0, 86.2], 82.6, 2.9),   # within the paper's spread
    ([60.2, 61.0, 62.3], 75.8, 1.7),   # far below it
    ([19.4, 19.4, 19.5], 19.0, 0.4),   # tiny spread of ours
    ([70.0, 75.0], 72.54, 0.4),        # two seeds of ours
    ([33.1, 35.0, 31.9, 34.4, 36.0], 33.56, 1.7),
]


@pytest.mark.parametrize(("ours", "mean", "sd"), CASES)
def test_the_verdict_is_welchs_t_test_as_scipy_computes_it(ours, mean, sd):
    test = reproduce_test(ours, mean, sd)
    oracle = stats.ttest_ind_from_stats(statistics.fmean(ours), statistics.stdev(ours),
                                        len(ours), mean, sd, PAPER_SEEDS, equal_var=False)
    assert test.t == pytest.approx(oracle.statistic, rel=1e-12)
    assert test.p == pytest.approx(oracle.pvalue, rel=1e-9)
    assert test.difference == pytest.approx(statistics.fmean(ours) - mean)
    assert test.verdict == ("reproduces" if oracle.pvalue >= 0.05 else "does not reproduce")
    # the interval holds 0 exactly when the test does not reject
    assert (test.low <= 0 <= test.high) == (oracle.pvalue >= 0.05)
    assert (test.low + test.high) / 2 == pytest.approx(test.difference)


def test_a_hand_computed_case():
    # ours 1, 2, 3: mean 2, sample sd 1; paper 0 ± 1 over 3 seeds.
    # se = sqrt(1/3 + 1/3); t = 2 / se = 2.449; df = (2/3)² / (2 (1/3)² / 2) = 4;
    # t(0.975, 4) = 2.7764451, so the interval is 2 ± 2.7764451 * 0.8164966.
    test = reproduce_test([1.0, 2.0, 3.0], 0.0, 1.0)
    assert test.ours_sd == 1.0 and test.ours_n == 3 and test.paper_n == 3
    assert test.df == pytest.approx(4.0)
    assert test.t == pytest.approx(2 / math.sqrt(2 / 3))
    half = 2.7764451051977987 * math.sqrt(2 / 3)
    assert (test.low, test.high) == pytest.approx((2 - half, 2 + half))
    assert test.verdict == "reproduces"


@pytest.mark.parametrize(("ours", "run"), [([29.72, 29.94, 28.45], 29.0),
                                           ([33.1, 35.0, 31.9, 34.4], 25.0),
                                           ([70.0, 75.0], 80.0)])
def test_against_one_run_of_the_papers_it_is_students_t_with_a_sample_of_one(ours, run):
    test = reproduce_test(ours, run, None)
    sd = statistics.stdev(ours)
    oracle = stats.ttest_ind_from_stats(statistics.fmean(ours), sd, len(ours), run, sd, 1,
                                        equal_var=True)
    assert test.test == "one run" and test.paper_n == 1 and test.paper_sd is None
    assert test.df == len(ours) - 1
    assert test.t == pytest.approx(oracle.statistic, rel=1e-12)
    assert test.p == pytest.approx(oracle.pvalue, rel=1e-9)
    assert test.verdict == ("reproduces" if oracle.pvalue >= 0.05 else "does not reproduce")
    assert (test.low <= 0 <= test.high) == (oracle.pvalue >= 0.05)


def test_against_one_run_the_paper_is_rejected_at_the_level_when_it_is_another_run():
    # The paper's run and ours from one normal distribution: the test rejects about 5 % of
    # the time (3 seeds of ours, 4,000 draws: a 99.9 % binomial band around 0.05).
    import numpy as np

    rng = np.random.default_rng(0)
    draws = rng.normal(30.0, 2.0, size=(4000, 4))
    rejected = sum(reproduce_test(list(d[:3]), float(d[3]), None).verdict
                   == "does not reproduce" for d in draws)
    assert 0.05 * 4000 - 45 <= rejected <= 0.05 * 4000 + 45, rejected


def test_one_seed_is_no_verdict():
    one = reproduce_test([80.0], 82.6, 2.9)
    assert one.verdict == "n/a" and one.ours_sd is None and one.low is None
    assert one.difference == pytest.approx(-2.6)
    single = reproduce_test([80.0], 29.0, None)
    assert single.verdict == "n/a" and single.test == "one run" and single.paper_n == 1
    with pytest.raises(ValueError, match="paper_sd"):
        reproduce_test([80.0, 81.0], 29.0, -1.0)
    with pytest.raises(ValueError, match="none"):
        reproduce_test([], 29.0, 1.0)


def _rows():
    return rows_from_runs([({}, run(method=method, seed=seed, accs=(acc, acc)))
                           for method, accs in (("Rand", (36.0, 38.0, 40.0)),
                                                ("GSS-Greedy", (60.0, 61.0, 62.0)),
                                                ("Reservoir", (80.0, 81.0, 82.0)))
                           for seed, acc in enumerate(accs)])


PAPER = {("Rand", 300): (37.5, 1.3), ("GSS-Greedy", 300): (82.6, 2.9)}


def test_the_markdown_sets_the_difference_interval_and_verdict_beside_the_papers_cell(
        tmp_path):
    out = write(tmp_path, _rows(), paper=PAPER)
    md = out["md"]
    assert "Welch's two-sample t-test at 0.05" in md
    assert "the paper's ± as the standard deviation over its 3 seeds" in md
    rand = reproduce_test([36.0, 38.0, 40.0], 37.5, 1.3)
    low, high = f"{abs(rand.low):.1f}", f"{rand.high:.1f}"
    assert (f"| Rand | M=300 | 38.0 ± 2.0 (n=3) | 37.5 ± 1.3 (n=3) | +0.5 [−{low}, +{high}]"
            f" | {rand.p:.3f} | reproduces |") in md
    greedy = next(line for line in md.splitlines() if line.startswith("| GSS-Greedy | M=300"))
    assert "| 61.0 ± 1.0 (n=3) | 82.6 ± 2.9 (n=3) | −21.6 [" in greedy
    assert greedy.endswith("| does not reproduce |")
    assert not any(line.startswith("| Reservoir | M=300") for line in md.splitlines())
    # the main table and its command line are as before
    assert "| Rand | 38.0 ± 1.6 (37.5 ± 1.3) |" in md
    assert md.rstrip().endswith("Command: `python -m reproduce tableX`")


def test_no_paper_number_no_reproduce_test(tmp_path):
    md = write(tmp_path, _rows(), paper={})["md"]
    assert "Welch" not in md and "reproduce" not in md.replace("python -m reproduce", "")


def test_the_tests_as_the_json_records_them_with_the_avg_over_the_columns():
    rows = rows_from_runs([({"sequence": k}, run(method="Reservoir", seed=s,
                                                 accs=(50.0 + k + s, 50.0 + k + s)))
                           for k in (1, 2) for s in (0, 1, 2)])
    report = {"rows": rows}
    tests = reproduce_tests(report, [("Seq1", 1), ("Seq2", 2)], "sequence",
                            {("Reservoir", 1): (63.7, 0.8), ("Reservoir", 2): (69.4, 0.7),
                             ("Reservoir", 3): (66.8, 4.8)},
                            {"Reservoir": (69.12, 4.3)})
    assert [(t["row"], t["column"]) for t in tests] == [
        ("Reservoir", "Seq1"), ("Reservoir", "Seq2"), ("Reservoir", "Avg")]
    seq1 = tests[0]
    assert seq1["ours_mean"] == pytest.approx(52.0) and seq1["ours_sd"] == pytest.approx(1.0)
    assert seq1["ours_n"] == 3 and seq1["paper_n"] == 3 and seq1["verdict"] == \
        "does not reproduce"
    assert seq1["ci95"][0] < seq1["difference"] < seq1["ci95"][1] < 0
    # Avg: our column means (52, 53) against the paper's mean over its 3 columns here
    avg = tests[2]
    assert avg["ours_n"] == 2 and avg["paper_n"] == 3
    assert avg["ours_mean"] == pytest.approx(52.5)
    assert set(seq1) == {"row", "column", "ours_mean", "ours_sd", "ours_n", "paper_mean",
                         "paper_sd", "paper_n", "difference", "ci95", "t", "df", "p",
                         "verdict", "test"}
    assert seq1["test"] == "welch"
