"""The sequential design: its false decisions measured on synthetic runs of known answer,
and the runs it saves against the fixed design."""

import math

import numpy as np
import pytest

from avalanche_gss.reproduce.reports.sequential import looks, run_sequential

TRUTH = {"top": 80.3, "twin": 80.3, "near": 80.0, "edge": 79.3, "low": 77.3, "far": 70.0}


def _runner(rng, sd=0.3):
    """Each policy's accuracy at a seed: its true mean, the seed's shared luck, noise."""
    luck = {}

    def run(seed, policies):
        luck.setdefault(seed, rng.normal(0, 2.0))
        return {p: TRUTH[p] + luck[seed] + rng.normal(0, sd) for p in policies}

    return run


def test_looks_counts_the_rounds_the_cap_allows():
    assert looks(range(10), 3) == 8
    with pytest.raises(ValueError, match="the first round needs 2 to 4 seeds, got 1"):
        looks(range(4), 1)


def test_a_clear_answer_stops_after_the_first_round():
    truth = {"a": 90.0, "b": 60.0, "c": 50.0}
    result = run_sequential(list(truth), list(range(8)),
                            lambda s, ps: {p: truth[p] + 0.1 * ((s * 7 + len(p)) % 3)
                                           for p in ps}, start=3)
    assert result.rounds == 1 and result.runs == 9 and result.fixed_runs == 24
    assert {p: c.verdict for p, c in result.classes.items()} == {
        "a": "best", "b": "worse", "c": "worse"}
    assert result.saved == pytest.approx(1 - 9 / 24)


def test_measured_false_decisions_stay_at_or_under_the_level_and_runs_are_saved():
    rng = np.random.default_rng(7)
    reps, seeds = 800, list(range(10))
    wrong_equivalent = wrong_worse = 0
    saved, decided_low = [], 0
    for _ in range(reps):
        result = run_sequential(list(TRUTH), seeds, _runner(rng), start=3)
        verdicts = {p: c.verdict for p, c in result.classes.items()}
        wrong_equivalent += verdicts["edge"] == "equivalent"
        wrong_worse += "worse" in (verdicts["top"], verdicts["twin"])
        decided_low += verdicts["low"] == "worse" and verdicts["far"] == "worse"
        saved.append(result.saved)
    margin = 3 * math.sqrt(0.05 * 0.95 / reps)
    assert wrong_equivalent / reps <= 0.05 + margin  # measured: 0 of 800
    assert wrong_worse / reps <= 0.05 + margin  # measured: 1 of 800
    assert decided_low == reps
    # the clear cases stop early: measured, 47 % of the fixed design's runs saved on
    # average (5.1 rounds of at most 8)
    assert 0.3 < float(np.mean(saved)) < 0.6
