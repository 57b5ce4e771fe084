"""The sequential design: its false decisions measured on synthetic runs of known answer,
and the runs it saves against the fixed design."""

import json
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


@pytest.mark.slow
def test_which_buffer_sequential_runs_only_what_it_decides_with(tmp_path):
    from helpers.cli import cli, toy_npz

    data = toy_npz(tmp_path / "toy.npz")
    base = ["which-buffer", "--quick", "--data", data, "--streams", "disjoint",
            "--policies", "Reservoir", "Rand", "GSS-Greedy"]
    refused = cli(*base, "--sequential", "--out", "o", cwd=tmp_path, warm=True)
    assert refused.returncode == 1 and "needs at least 3 seeds" in refused.stderr
    both = cli(*base, "--sequential", "--compute-matched", "--seeds", "0", "1", "2",
               cwd=tmp_path, warm=True)
    assert both.returncode == 2 and "not with --compute-matched" in both.stderr
    done = cli(*base, "--sequential", "--seeds", "0", "1", "2", "3", "--out", "o",
               cwd=tmp_path, warm=True)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "o" / "which_buffer.json").read_text())
    seq = report["sequential"]
    assert report["protocol"]["sequential"] is True
    assert seq["fixed_runs"] == 3 * 1 * 4 and seq["looks"] == 3 and 1 <= seq["rounds"] <= 3
    # every run made is a row's run, and a policy's seeds are a prefix of the cap's
    made = sum(len(r["seeds"]) for r in report["rows"])
    assert made == seq["runs"] <= seq["fixed_runs"]
    assert seq["saved"] == pytest.approx(1 - made / seq["fixed_runs"])
    for policy, seeds in seq["seeds"].items():
        assert seeds == [0, 1, 2, 3][:len(seeds)] and len(seeds) >= 2, policy
    classes = {c["policy"]: c["class"] for c in seq["classes"]}
    assert sorted(classes) == ["GSS-Greedy", "Rand", "Reservoir"]
    assert list(classes.values()).count("best") == 1
    # a policy stopped before the cap was classed (the best stops when every other is)
    rounds_run = max(len(seeds) for seeds in seq["seeds"].values())
    for policy, seeds in seq["seeds"].items():
        if len(seeds) < rounds_run:
            assert classes[policy] in ("equivalent", "worse"), policy
    if rounds_run < 4:  # stopped early: everything but the best is classed
        assert sorted(classes.values()).count("undecided") == 0
    md = (tmp_path / "o" / "which_buffer.md").read_text()
    assert f"### Sequential design: {made} of the fixed design's 12 runs" in md
    # Its recommendation is the design's classes (the fixed design's rule cannot pair
    # policies stopped at different seeds), and the report says what it leaves out
    rec = report["recommendation"]
    if any(c != "undecided" for p, c in classes.items() if classes[p] != "best"):
        assert rec is not None and rec["best"] == next(p for p, c in classes.items()
                                                       if c == "best")
        assert [c["class"] for c in rec["classes"]] == [c["class"] for c in seq["classes"]]
        assert rec["alpha"] == pytest.approx(0.05 / seq["looks"])
        assert "**As measured: pick " in md
    else:
        assert rec is None and "no pick" in report["recommendation_note"]
    assert "not computed for a sequential run" in report["recommendation_note"]
    assert "Not computed" not in md and "comparisons` in the JSON" not in md


def _classes(*rows):
    return [{"policy": p, "class": c, "mean_difference": d, "low": lo, "high": hi, "seeds": n}
            for p, c, d, lo, hi, n in rows]


def _row(policy, stream, family, size, seconds):
    return {"policy": policy, "stream": stream, "family": family, "buffer_size": size,
            "seeds": [0, 1], "avg": [80.0, 81.0], "train_seconds": seconds}


def test_a_sequential_runs_pick_is_the_cheapest_of_its_designs_group():
    from avalanche_gss.reproduce.experiments.which_buffer_statistics import (
        SEQUENTIAL_RULE,
        Undecided,
        decide_sequential,
    )

    rows = [_row(p, s, f, 100, t) for p, t in (("A", [2.0, 2.0]), ("B", [1.0, 1.0]),
                                               ("C", [0.5, 0.5]))
            for s, f in (("disjoint", "disjoint"), ("imbalanced-1", "imbalanced"),
                         ("imbalanced-2", "imbalanced"))]
    record = {"start": 2, "looks": 3, "rounds": 2, "delta": 1.0, "runs": 15, "fixed_runs": 18,
              "saved": 1 / 6, "seeds": {"A": [0, 1, 2], "B": [0, 1, 2], "C": [0, 1]},
              "classes": _classes(("A", "best", 0.0, 0.0, 0.0, 3),
                                  ("B", "equivalent", -0.2, -0.6, 0.2, 3),
                                  ("C", "worse", -3.0, -5.0, -1.0, 2))}
    rec = decide_sequential(rows, record, "digits")
    # B is shown within the margin of the best and costs half: it is the pick; C is
    # cheaper still but shown worse
    assert (rec["best"], rec["pick"], rec["group"], rec["worse"], rec["undecided"]) == (
        "A", "B", ["A", "B"], ["C"], [])
    assert rec["seeds"] == 3 and rec["alpha"] == pytest.approx(0.05 / 3)
    assert rec["weights"] == {"disjoint": 0.5, "imbalanced": 0.5}  # each family alike
    assert rec["mean_cost"] == {"A": 2.0, "B": 1.0, "C": 0.5} and rec["rule"] == SEQUENTIAL_RULE
    record["classes"] = _classes(("A", "best", 0.0, 0.0, 0.0, 3),
                                 ("B", "undecided", -0.2, -1.6, 1.2, 3),
                                 ("C", "undecided", -3.0, -7.0, 1.0, 3))
    with pytest.raises(Undecided, match="none of the 2 policies"):
        decide_sequential(rows, record, "digits")
