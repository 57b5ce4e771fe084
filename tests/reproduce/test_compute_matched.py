"""``which-buffer --compute-matched``: relative cost, the matched runs, the report."""

import csv
import json
import math
from fractions import Fraction
from types import SimpleNamespace

import pytest

from avalanche_gss.reproduce.__main__ import main
from avalanche_gss.reproduce.cli import parse_args
from avalanche_gss.reproduce.experiments import policies
from avalanche_gss.reproduce.experiments.which_buffer import _jobs, plan
from avalanche_gss.reproduce.experiments.which_buffer_matched import (
    keeps_every_batch,
    matched_jobs,
    matched_results,
)
from avalanche_gss.reproduce.runs.jobs import Matched, RunJob, run_job

TINY = ["which-buffer", "--quick", "--seeds", "0", "--policies", "Reservoir", "GSS-Greedy",
        "--streams", "disjoint", "--buffer-sizes", "30", "--n-iter", "1"]


def test_the_plan_and_its_jobs_without_the_option_are_unchanged():
    off, on = parse_args(TINY), parse_args([*TINY, "--compute-matched"])
    assert not off.compute_matched and on.compute_matched
    assert plan(off) == plan(on)  # the option adds runs after the measured ones, not to them
    runs, _ = plan(off)
    identity = {"data_sha256": "x"}
    plain = [j.config() for j in _jobs(off, runs, "mnist", identity)]
    counted = [j.config() for j in _jobs(on, runs, "mnist", identity)]
    assert all("count_passes" not in c and "matched" not in c for c in plain)
    assert [{k: v for k, v in c.items() if k != "count_passes"} for c in counted] == plain
    assert all(c["count_passes"] for c in counted)


def test_reservoir_keeps_pace_and_gss_greedy_trains_on_fewer_batches(tmp_path, monkeypatch):
    monkeypatch.setitem(policies.QUICK, "samples_per_task", 100)  # 5 x 100 digits
    out = tmp_path / "out"
    assert main([*TINY, "--compute-matched", "--out", str(out)]) == 0
    report = json.loads((out / "which_buffer.json").read_text())
    rows = {r["policy"]: r for r in report["rows"]}
    reservoir, greedy = rows["Reservoir"], rows["GSS-Greedy"]
    assert reservoir["relative_cost"] == ["1"]  # counted passes == its closed form
    assert reservoir["batches"] == [50] and reservoir["kept_batches"] == [50]
    assert reservoir["matched_avg"] == reservoir["avg"]  # its as-measured run's result
    c = Fraction(greedy["relative_cost"][0])
    assert c > 1 and greedy["kept_batches"][0] < greedy["batches"][0] == 50
    assert greedy["kept_batches"][0] == math.ceil(50 / c)  # batches floor(j * C) < 50
    assert "extras" not in greedy or "passes" not in json.dumps(greedy["extras"])
    assert {t["policy"] for t in report["ranking_compute_matched"]} == set(rows)
    assert set(report["best_compute_matched"]) == {"disjoint M=30"}
    md = (out / "which_buffer.md").read_text()
    assert "## Compute-matched" in md and "floor(j·C)" in md
    with open(out / "which_buffer.csv") as f:
        lines = {r["policy"]: r for r in csv.DictReader(f)}
    assert lines["Reservoir"]["relative_cost"] == "1"
    assert lines["GSS-Greedy"]["relative_cost"] == str(c)
    # The cache holds the counts: a measured run's result keeps its passes. Reservoir's
    # compute-matched run keeps every batch, so it is not trained again: 2 + 1 runs.
    cached = [json.loads(p.read_text()) for p in (out / "cache" / "which-buffer").glob("*.json")]
    assert len(cached) == 3
    assert sorted("passes" in r["result"]["extras"] for r in cached) == [False, True, True]
    # What the reuse rests on: that run, trained, gives its as-measured result exactly
    measured = next(r for r in cached if r["config"].get("count_passes")
                    and r["config"]["settings"]["method"] == "Reservoir")
    (again,) = matched_jobs([RunJob.from_config(measured["config"])], [measured["result"]])
    assert keeps_every_batch(again)
    assert "count_passes" not in again.config() and "trace" not in again.config()
    trained = run_job(again)
    assert trained["avg"] == measured["result"]["avg"]
    assert trained["task_accuracy"] == measured["result"]["task_accuracy"]


def test_only_the_runs_that_skip_batches_are_trained_again():
    keep = SimpleNamespace(matched=Matched(Fraction(1), 50, 50), label="keep")
    skip = SimpleNamespace(matched=Matched(Fraction(3, 2), 34, 50), label="skip")
    measured = [{"avg": 1.0}, {"avg": 2.0}, {"avg": 3.0}]
    assert [keeps_every_batch(c) for c in (keep, skip)] == [True, False]
    assert matched_results([keep, skip, keep], measured, [{"avg": 9.0}]) == [
        {"avg": 1.0}, {"avg": 9.0}, {"avg": 3.0}]
    with pytest.raises(ValueError, match="2 compute-matched results for 1 runs that skip"):
        matched_results([keep, skip, keep], measured, [{"avg": 9.0}, {"avg": 8.0}])
