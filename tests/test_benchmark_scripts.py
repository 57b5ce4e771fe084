"""The benchmark scripts take --device (auto: CUDA when present) and name the library's impl.

An unknown device is refused by ``resolve_device`` (tests/test_outputs.py).
"""

import json
from pathlib import Path

import pytest
import torch
from helpers import benchmark_script
from helpers.cli import subprocess_env
from helpers.warm import run as warm_python

from avalanche_gss.models import MLP
from avalanche_gss.training import LogitAdjustedLoss

REPO = Path(__file__).resolve().parents[1]


def _throughput(tmp_path, *args):
    """Run ``benchmarks/online_throughput.py --repeats 1 ARGS`` from ``tmp_path``: its records."""
    out = tmp_path / "r.json"
    res = warm_python([REPO / "benchmarks" / "online_throughput.py", "--repeats", "1", *args,
                       "--json", out], tmp_path, subprocess_env(), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text())["records"]


@pytest.mark.parametrize(("case", "retrieval"), [("cbrs-oc-la-mlp-disjoint", "other-classes"),
                                               ("cb-gss-step-la-mlp-disjoint", "other-classes")])
def test_online_throughput_times_the_logit_adjusted_policies_each_with_its_own_loss(
        case, retrieval, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # its sibling module phases.py
    script = benchmark_script("online_throughput")
    build = script.CASES[case]["library"].keywords["cls"]
    model = MLP()
    a, b = (build(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                  mem_size=12, n_iter=1, seed=0) for _ in range(2))
    assert isinstance(a._criterion, LogitAdjustedLoss) and a._criterion is not b._criterion
    assert (a._criterion.tau, a._criterion.window) == (1.0, 1000)
    assert a.rehearsal.retrieval.name == retrieval


@pytest.mark.slow
def test_online_throughput_runs_on_the_auto_device_and_reports_phases_on_the_stand_in(tmp_path):
    # One run of the script (forked warm: a fresh start imports Avalanche): two MLP cases on the
    # device it picks, and the ResNet case on the CIFAR stand-in with its phases.
    records = _throughput(tmp_path, "--cases", "reservoir-mlp-disjoint", "cb-gss-mlp-disjoint",
                          "gss-greedy-resnet-cifar", "--impls", "library", "floor", "--phases",
                          "--samples-per-task", "10", "--buffer-size", "12",
                          "--test-per-class", "2", "--n-iter", "1")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert [(r["case"], r["impl"]) for r in records] == [
        ("reservoir-mlp-disjoint", "library"), ("reservoir-mlp-disjoint", "floor"),
        ("cb-gss-mlp-disjoint", "library"), ("cb-gss-mlp-disjoint", "floor"),
        ("gss-greedy-resnet-cifar", "library"), ("gss-greedy-resnet-cifar", "floor")]
    assert {r["device"] for r in records} == {expected}
    resnet = records[4:]
    phases = {"train_steps", "scoring", "selection", "replay_draw", "evaluation", "other"}
    for r in resnet:
        assert set(r["phases_ms"]) == phases
        assert "stand-in" in r["data_source"] and "NOT real data" in r["data_source"]
        assert r["buffer_size"] == 12 and r["samples"] == 50
    assert resnet[0]["phases_ms"]["scoring"] > 0  # GSS-Greedy scored against the buffer
    assert resnet[1]["phases_ms"]["scoring"] == 0


def test_replay_route_memory_judges_the_median_and_counts_each_turn(monkeypatch):
    # A one-time step in one run of three moves the largest growth, not the median, and
    # that run is counted as not within the reference's run of the same turn.
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import replay_route_memory as rrm

    def run(impl, repeat, first, last):
        return [{"impl": impl, "repeat": repeat, "samples": s, "rss_mb": v, "rss_anon_mb": v,
                 "rss_file_mb": 0.0} for s, v in ((10_000, first), (100_000, last))]

    records = [*run("Reservoir", 0, 100.0, 100.02), *run(rrm.REFERENCE, 0, 90.0, 90.02),
               *run("Reservoir", 1, 100.0, 100.35), *run(rrm.REFERENCE, 1, 90.0, 90.01),
               *run("Reservoir", 2, 100.0, 100.03), *run(rrm.REFERENCE, 2, 90.0, 90.03)]
    ours = rrm.summarise(records, slack_mb=0.1)["Reservoir"]
    assert ours["rss_growth_median_mb"] == pytest.approx(0.03)
    assert ours["rss_growth_max_mb"] == pytest.approx(0.35)
    assert ours["within_reference"] is True
    assert ours["runs_within_reference"] == 2
    assert [r["heap_in_use_growth_mb"] for r in ours["runs"]] == [None] * 3  # not recorded
    assert "gc_collections_per_interval" not in ours["runs"][0]
    # Automatic collections between two records: the first record's own full one left out
    timed = run("Reservoir", 0, 100.0, 100.0)
    timed[0]["gc_collections"], timed[1]["gc_collections"] = [10, 2, 5], [91, 9, 7]
    assert rrm._growth(timed)["gc_collections_per_interval"] == [81, 7, 1]
    young = [{**r, "collect": "young"} for r in timed]  # the records' own: generation 1
    assert rrm._growth(young)["gc_collections_per_interval"] == [81, 6, 2]
    untouched = [{**r, "collect": "none"} for r in timed]
    assert rrm._growth(untouched)["gc_collections_per_interval"] == [81, 7, 2]
    leak = [r for k in range(3) for r in run("Reservoir", k, 100.0, 100.5)]
    leak += [r for r in records if r["impl"] == rrm.REFERENCE]
    assert rrm.summarise(leak, slack_mb=0.1)["Reservoir"]["within_reference"] is False
    # Python's live blocks, and how far a later interval's peak rose above the first one's
    counted = [{**r, "python_blocks": b, "python_blocks_peak": p} for r, b, p in zip(
        run("Reservoir", 0, 100.0, 100.0) + run("Reservoir", 0, 100.0, 100.0)[1:],
        (1000, 1010, 1005), (1500, 1480, 1530), strict=True)]
    grown = rrm._growth(counted)
    assert grown["python_blocks_growth"] == 5
    assert grown["python_blocks_new_peak"] == 30
    assert "python_blocks_growth" not in rrm._growth(timed)  # not recorded


@pytest.mark.parametrize(("collect", "calls"), [("young", [1]), ("full", [2]), ("none", [])])
def test_replay_route_memory_collects_the_generations_asked_at_each_record(
        monkeypatch, collect, calls):
    # young (the default) must not run a full collection: that one also empties CPython's
    # free lists, which the run left to itself does at most once in 90,000 samples
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import replay_route_memory as rrm

    seen = []
    monkeypatch.setattr(rrm.gc, "collect", lambda generation=2: seen.append(generation))
    probe = rrm.Probe(every=10, impl="Reservoir", collect=collect)
    strategy = type("S", (), {"experience": type("E", (), {"dataset": [0] * 10})()})()
    probe.after_training_exp(strategy)
    assert seen == calls
    assert probe.records[0]["collect"] == collect
    assert rrm.Probe(every=10, impl="Reservoir").collect == "young"


def test_replay_route_memory_names_the_mapping_where_rss_rose(monkeypatch, tmp_path):
    # Two records' memory maps: the anonymous mapping that holds the marks grew by 300 KB,
    # a file's by 8 KB; the interval is reported, largest first, the marks' mapping named.
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import replay_route_memory as rrm

    def smaps(anon_kb, lib_kb):
        return (f"7f0000000000-7f0004000000 rw-p 00000000 00:00 0 \nRss:  {anon_kb} kB\n"
                "Pss:  1 kB\n"
                f"7f1000000000-7f1000100000 r-xp 00000000 08:01 42 /usr/lib/libx.so\n"
                f"Rss:  {lib_kb} kB\n")

    for k, (anon, lib) in enumerate(((1000, 40), (1300, 48), (1300, 48)), start=1):
        (tmp_path / f"{k}.smaps").write_text(smaps(anon, lib))
        (tmp_path / f"{k}.marks").write_text("0x7f0000001000 0x7f0000002000")
    assert rrm.smaps_rss(str(tmp_path / "1.smaps")) == {
        (0x7F0000000000, 0x7F0004000000, ""): 1000,
        (0x7F1000000000, 0x7F1000100000, "/usr/lib/libx.so"): 40}
    (line,) = rrm.smaps_steps(str(tmp_path), 3)
    assert line == ("records 1 -> 2: RSS +308 KB: +300 KB in an anonymous mapping of 64.0 MiB "
                    "(holds Python's small objects); +8 KB in /usr/lib/libx.so of 1.0 MiB")
    assert rrm.smaps_steps(str(tmp_path), 3, min_kb=400) == []


def test_replay_route_memory_refuses_an_unusable_smaps_folder(monkeypatch, tmp_path, capsys):
    # A --smaps folder that cannot be made is refused in one line before any run
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import replay_route_memory as rrm

    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as stop:
        rrm.main(["--smaps", str(tmp_path / "file" / "maps")])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"error: --smaps {tmp_path / 'file' / 'maps'}: Not a directory")


@pytest.mark.slow
def test_iqp_merge_compares_the_last_merge_with_scip_on_its_gram(tmp_path):
    # --merge-scip: SCIP solves the Gram the last timed merge handed its solver, and the
    # record puts its objective beside the fast solver's (a small merge: M = 20, K = 120)
    out = tmp_path / "m.json"
    res = warm_python([REPO / "benchmarks" / "iqp.py", "--device", "cpu", "--cases",
                       "merge-resnet", "--merge-size", "20", "--repeats", "1", "--merge-scip",
                       "--time-limit", "5", "--json", out], tmp_path, subprocess_env(),
                      timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    (merge,) = json.loads(out.read_text())["records"]
    assert merge["k"] == 120 and merge["m"] == 20
    assert merge["scip_solver"] == "exact" and merge["scip_time_limit_s"] == 5.0
    assert merge["ratio_to_scip"] == merge["fast_objective"] / merge["scip_objective"]
    assert "fast / SCIP" in res.stdout


def test_gradient_gram_profiles_the_engine_and_has_gss_greedy_s_scoring_batch(monkeypatch, capsys):
    # --profile prints torch.profiler's operators of the library impl; resnet18-n110 is the
    # batch GSS-Greedy scores by default (10 new samples, 10 groups of 10 buffer samples)
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import gradient_gram as gg

    model, x, y, _ = gg.make_case("resnet18-n110", torch.device("cpu"))
    assert x.shape == (110, 3, 32, 32) and y.shape == (110,) and not model.training
    gg.main(["--device", "cpu", "--cases", "mlp-n20", "--repeats", "1", "--profile"])
    out = capsys.readouterr().out
    assert "mlp-n20: library, 5 calls under torch.profiler, by self_cpu_time_total" in out
    assert "aten::" in out


def test_greedy_scores_times_both_ways_of_scoring_and_they_agree(monkeypatch, tmp_path):
    # GSS-Greedy's batch, scored from the per-sample Gram and from the Gram of its sums
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import greedy_scores

    (record,) = greedy_scores.main(["--cases", "mlp", "--repeats", "2",
                                    "--json", str(tmp_path / "r.json")])
    assert record["max_score_difference"] < 1e-5
    assert record["gram_median_ms"] > 0 and record["sums_median_ms"] > 0
    assert json.loads((tmp_path / "r.json").read_text()) == [record]


@pytest.mark.parametrize(("case", "criterion", "mkd", "joint"), [
    ("er-ace-mlp-disjoint", "AsymmetricCrossEntropy", False, True),
    ("er-mkd-mlp-disjoint", "CrossEntropyLoss", True, False),
    ("cbrs-oc-ace-mlp-disjoint", "AsymmetricCrossEntropy", False, True),
    ("cbrs-oc-la-mkd-mlp-disjoint", "LogitAdjustedLoss", True, False),
])
def test_online_throughput_gives_each_run_its_own_ace_loss_and_mkd_teacher(
        case, criterion, mkd, joint, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # its sibling module phases.py
    from avalanche_gss.training import MKDPlugin

    script = benchmark_script("online_throughput")
    build = script.CASES[case]["library"].keywords["cls"]
    model = MLP()
    a, b = (build(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                  mem_size=12, n_iter=1, seed=0) for _ in range(2))
    assert type(a._criterion).__name__ == criterion and a._criterion is not b._criterion
    teachers = [[p for p in s.plugins if isinstance(p, MKDPlugin)] for s in (a, b)]
    assert [len(t) for t in teachers] == [int(mkd)] * 2
    assert not mkd or teachers[0][0] is not teachers[1][0]
    assert a.rehearsal.joint is joint
