"""which-buffer's recommendation, ablations and pairwise table, computed from a report."""

import numpy as np
import pytest

from avalanche_gss.reproduce.experiments.which_buffer_statistics import (
    NO_RECOMMENDATION,
    add_statistics,
    paired_values,
    recommendation_sentence,
    statistics_lines,
)

POLICIES = {"Reservoir": -3.0, "CBRS": -1.0, "CBRS+OC": 0.0, "CBRS+OC+LA": 0.4, "Rand": -6.0}
COSTS = {"Reservoir": 1.0, "CBRS": 1.0, "CBRS+OC": 1.0, "CBRS+OC+LA": 1.0, "Rand": 1.2}


def _report(seeds, matched=True):
    rng = np.random.default_rng(0)
    rows = []
    for stream in ("disjoint", "permuted", "blurry"):
        for m in (100, 300):
            base = rng.normal(80, 4)
            for policy, effect in POLICIES.items():
                avg = [float(base + effect + rng.normal(0, 0.5)) for _ in seeds]
                row = {"policy": policy, "stream": stream, "buffer_size": m,
                       "seeds": list(seeds), "avg": avg, "train_seconds": [1.0] * len(seeds)}
                if matched:
                    row |= {"matched_avg": [a - (2.0 if policy == "Rand" else 0.0) for a in avg],
                            "relative_cost_mean": COSTS[policy]}
                rows.append(row)
    return {"dataset": "mnist-5k", "data_verified_as": "mnist-5k", "rows": rows,
            "protocol": {"seeds": list(seeds), "policies": list(POLICIES)}}


def test_pairs_are_stream_size_and_seed():
    values = paired_values(_report([0, 1])["rows"])
    assert len(values["CBRS"]) == 3 * 2 * 2
    assert ("blurry", 300, 1) in values["CBRS"]


def test_one_seed_makes_no_recommendation_and_says_why():
    report = add_statistics(_report([0]))
    assert report["recommendation"] is None and report["recommendation_compute_matched"] is None
    assert report["recommendation_note"] == NO_RECOMMENDATION
    assert "one seed is not a ranking" in NO_RECOMMENDATION
    assert "comparisons" not in report
    text = "\n".join(statistics_lines(report))
    assert "No recommendation: one seed is not a ranking" in text


def test_several_seeds_give_both_recommendations_ablations_and_every_pair():
    report = add_statistics(_report([0, 1, 2]))
    for suffix in ("", "_compute_matched"):
        rec = report["recommendation" + suffix]
        assert {"group", "pick", "rule"} <= set(rec)
        assert rec["best"] == rec["group"][0] and rec["pick"] in rec["group"]
        assert "Rand" not in rec["group"] and "Reservoir" not in rec["group"]
        assert rec["data"] == "MNIST (5,000-digit subset)"
        assert len(report["comparisons" + suffix]) == 10  # 5 policies: every pair once
    questions = {a["question"]: a for a in report["ablations"]}
    quotas = questions["the class quotas"]
    assert (quotas["a"], quotas["b"]) == ("CBRS", "Reservoir")
    assert quotas["low"] > 0  # +2 points, noise 0.5: it separates
    assert "the gradient score" not in questions  # CB-GSS was not run
    text = "\n".join(statistics_lines(report))
    assert recommendation_sentence(report["recommendation"], "as measured") in text
    assert "| the class quotas | CBRS − Reservoir |" in text
    assert "### Each policy against the best (as measured)" in text
    for c in report["recommendation"]["classes"][1:]:  # each class beside its own interval
        assert (f"| {c['policy']} | {c['mean_difference']:+.2f} [{c['low']:+.2f}, "
                f"{c['high']:+.2f}] | {c['class']} |") in text


def test_statistics_are_recomputed_not_kept():
    report = add_statistics(_report([0, 1]))
    report["recommendation"]["pick"] = "stale"
    assert add_statistics(report)["recommendation"]["pick"] != "stale"


def test_without_pass_counts_the_pick_is_by_train_seconds_and_the_rule_says_so():
    report = add_statistics(_report([0, 1], matched=False))
    assert "recommendation_compute_matched" not in report
    assert report["recommendation"]["cost"] == "median train seconds per run"


def test_four_seeds_check_the_recommendation_on_two_halves():
    report = add_statistics(_report([0, 1, 2, 3]))
    for suffix in ("", "_compute_matched"):
        half = report["stability" + suffix]
        assert half["halves"] == [[0, 1], [2, 3]]
        assert half["holds"] == (half["picks"][0] in half["groups"][1]
                                 and half["picks"][1] in half["groups"][0])
        assert "Rand" not in half["groups"][0]
    assert report["stability"]["holds"]  # effects of 1-6 points against noise of 0.5
    assert "- Stability (as measured): seeds 0 1 pick" in "\n".join(statistics_lines(report))
    assert add_statistics(_report([0, 1, 2]))["stability"] is None


def test_halves_that_disagree_are_reported_unstable():
    report = _report([0, 1, 2, 3], matched=False)
    for r in report["rows"]:  # Rand best on seeds 0-1 by 10 points, worst on 2-3
        if r["policy"] == "Rand":
            r["avg"] = [a + 16.0 for a in r["avg"][:2]] + r["avg"][2:]
        if r["policy"] == "Reservoir":  # shown worse on all four: the whole report decides
            r["avg"] = [a - 30.0 for a in r["avg"]]
    half = add_statistics(report)["stability"]
    assert half["picks"][0] == "Rand" and "Rand" not in half["groups"][1]
    assert not half["holds"]
    assert "not stable" in "\n".join(statistics_lines(report))


def test_policies_on_other_pairs_make_no_recommendation_and_lose_no_output():
    report = _report([0, 1])
    report["rows"][0] |= {"seeds": [0], "avg": report["rows"][0]["avg"][:1],
                          "matched_avg": report["rows"][0]["matched_avg"][:1]}
    add_statistics(report)  # the runs are written whatever the statistics can say
    assert report["recommendation"] is None
    assert report["recommendation_note"].startswith("no paired comparison is possible: policy")
    assert "No recommendation: no paired comparison is possible" in "\n".join(
        statistics_lines(report))


def test_a_stored_report_that_is_huge_a_fifo_or_too_deep_is_one_line_naming_it(tmp_path):
    import os

    import pytest
    from helpers.fifo import fifo

    from avalanche_gss.reproduce.experiments.which_buffer_statistics import restate

    huge = tmp_path / "huge.json"
    huge.touch()
    os.truncate(huge, 40 * 2**30)  # sparse: no disk taken, and never read
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with fifo(tmp_path / "pipe.json") as pipe:  # no writer comes: a plain open would block
        for path, said in ((huge, "holds 40.0 GiB"), (pipe, "is a FIFO"),
                           (deep, "is not readable JSON (nested too deeply)")):
            with pytest.raises((OSError, ValueError)) as info:
                restate(path)
            assert str(info.value).startswith(f"report {path} {said}"), info.value


def test_the_recommendation_is_for_the_mix_the_protocol_states():
    report = _report([0, 1, 2, 3], matched=False)
    for r in report["rows"]:  # Rand the best on the permuted stream alone, by 12 points
        if r["policy"] == "Rand" and r["stream"] == "permuted":
            r["avg"] = [a + 18.0 for a in r["avg"]]
    equal = add_statistics(report)["recommendation"]
    assert equal["weights"] == {"disjoint": pytest.approx(1 / 3),
                                "permuted": pytest.approx(1 / 3),
                                "blurry": pytest.approx(1 / 3)}
    assert equal["best"] == "CBRS+OC+LA"
    report["protocol"]["family_weights"] = {"permuted": 1.0}
    permuted = add_statistics(report)["recommendation"]
    assert permuted["weights"] == {"disjoint": 0.0, "permuted": 1.0, "blurry": 0.0}
    assert permuted["best"] == "Rand"
    scopes = {s["scope"]: s for s in report["equivalence"]["scopes"]}
    assert scopes["mix"]["best"] == "Rand" == scopes["permuted"]["best"]
    assert "(disjoint 0.00" not in "\n".join(statistics_lines(report))
    assert "this mix of the stream families (permuted 1.00)" in "\n".join(
        statistics_lines(report))
