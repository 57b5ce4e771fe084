"""``python -m reproduce which-buffer``: its plan, its outputs, its refusals."""

import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import cli, subprocess_env, toy_npz

from avalanche_gss.reproduce.__main__ import main
from avalanche_gss.reproduce.cli import parse_args
from avalanche_gss.reproduce.experiments import policies
from avalanche_gss.reproduce.experiments.composition import at_task_ends, task_shares
from avalanche_gss.reproduce.experiments.policies import POLICIES, STREAMS, Policy
from avalanche_gss.reproduce.experiments.protocols import BLURRY_KEEP
from avalanche_gss.reproduce.experiments.which_buffer import (
    choices,
    plan,
    ranking,
    stream_config,
    traced_streams,
)
from avalanche_gss.reproduce.runs.jobs import build_split

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PRESENT = ("Reservoir", "Rand", "GSS-Greedy", "GSS-IQP", "GSS-Clust", "FSS-Clust")


@pytest.fixture
def add_policy():
    """Register a policy for one test: ``add_policy(label, Policy(...))``, forgotten after."""
    added = []

    def add(label, policy):
        POLICIES.add(label, policy)
        added.append(label)

    yield add
    for label in added:
        POLICIES.remove(label)


def test_the_plan_covers_policies_x_streams_x_sizes_x_seeds(mnist):
    args = parse_args(["which-buffer", "--policies", "Reservoir", "GSS-Greedy", "GSS-IQP",
                       "--buffer-sizes", "100", "300", "--seeds", "0", "1"])
    runs, chosen = plan(args)
    assert chosen.streams == policies.DEFAULT_STREAMS  # every digits stream by default
    assert len(policies.DEFAULT_STREAMS) == 8  # disjoint, permuted, imbalanced 1-5, blurry
    assert all(STREAMS[s].data == "mnist" for s in chosen.streams)
    keys = [(r.keys["policy"], r.keys["stream"], r.settings.buffer_size, r.settings.seed)
            for r in runs]
    assert len(keys) == len(set(keys)) == 3 * 8 * 2 * 2
    assert {k[0] for k in keys} == {"Reservoir", "GSS-Greedy", "GSS-IQP"}
    assert {k[2] for k in keys} == {100, 300} and {k[3] for k in keys} == {0, 1}
    for r in runs:
        spec = STREAMS[r.keys["stream"]]
        s = r.settings
        # Each stream's protocol gives the learning rate and iterations per batch.
        assert (s.lr, s.n_iter) == (spec.protocol.lr, spec.protocol.n_iter)
        assert s.method == POLICIES[r.keys["policy"]].method
        assert r.job.counts == spec.protocol.stream
    greedy = next(r.settings for r in runs if r.keys["policy"] == "GSS-Greedy")
    assert greedy.options == {"variant": "authors"}
    configs = {r.keys["stream"]: r.job.config() for r in runs}
    # Each job names the registered stream it builds (part of its cache key); the blurry
    # stream's definition blurs, nothing else does.
    assert {s: c["stream"] for s, c in configs.items()} == {
        "disjoint": "disjoint", "permuted": "permuted", "blurry": "blurry",
        **{f"imbalanced-{k}": "imbalanced" for k in range(1, 6)}}
    assert configs["blurry"]["stream_options"]["keep"] == BLURRY_KEEP
    assert "keep" not in configs["disjoint"]["stream_options"]
    assert not any("blur" in c for c in configs.values())
    assert configs["imbalanced-4"]["variant"] == {"sequence": 4}
    # Runs on the disjoint and imbalanced streams trace the buffer's composition; the
    # report shows the disjoint stream and the first imbalanced sequence.
    assert {s for s, c in configs.items() if c.get("trace")} == {
        "disjoint", *(f"imbalanced-{k}" for k in range(1, 6))}
    assert traced_streams(chosen.streams) == ("disjoint", "imbalanced-1")
    # The blurry stream is Table 1's stream with blurred boundaries, on the digits.
    split = build_split(mnist, configs["blurry"], 0)
    assert split.protocol["blurry"]["keep"] == BLURRY_KEEP
    assert split.protocol["stream"] == "disjoint" and split.n_tasks == 5
    foreign = [int((~sum(y == c for c in classes).bool()).sum())
               for (_, y), classes in zip(split.train, split.task_classes, strict=True)]
    assert foreign == split.protocol["blurry"]["foreign_per_task"] and min(foreign) > 0


def test_defaults_quick_and_stream_groups():
    assert choices(parse_args(["which-buffer"])).policies == tuple(POLICIES)
    quick = choices(parse_args(["which-buffer", "--quick"]))
    assert quick.seeds == (0,) and len(quick.buffer_sizes) == 1
    assert {STREAMS[s].family for s in quick.streams} == {
        "disjoint", "permuted", "imbalanced", "blurry"}
    grouped = choices(parse_args(["which-buffer", "--streams", "blurry", "imbalanced"]))
    assert grouped.streams == ("blurry", *(f"imbalanced-{k}" for k in range(1, 6)))
    assert traced_streams(grouped.streams) == ("imbalanced-1",)
    assert traced_streams(("permuted", "imbalanced-3", "disjoint")) == ("disjoint",
                                                                       "imbalanced-3")


def test_a_tiny_run_writes_every_output_and_resumes(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(policies.QUICK, "samples_per_task", 100)  # 5 x 100 digits
    out = tmp_path / "out"
    argv = ["which-buffer", "--quick", "--seeds", "0", "--policies", "Reservoir", "Rand",
            "--streams", "disjoint", "imbalanced-1", "--buffer-sizes", "30", "--n-iter", "1",
            "--out", str(out)]
    assert main(argv) == 0
    names = ("which_buffer.json", "which_buffer.csv", "which_buffer.md", "which_buffer.png",
             "which_buffer_composition.json", "which_buffer_composition.csv",
             "which_buffer_composition.md")
    for name in names:
        assert (out / name).stat().st_size > 0, name
    stdout = capsys.readouterr().out
    assert "| Reservoir |" in stdout
    wrote = [line for line in stdout.splitlines() if line.startswith("Wrote")]
    assert len(wrote) == 1 and all(str(out / name) in wrote[0] for name in names), wrote
    assert (out / "which_buffer.png").read_bytes()[:8] == PNG_MAGIC
    report = json.loads((out / "which_buffer.json").read_text())
    assert report["experiment"] == "which-buffer"
    assert report["data_source"] and len(report["data_sha256"]) == 64
    assert report["command"].startswith("python -m reproduce which-buffer --quick")
    for key in ("avalanche_gss", "torch", "avalanche", "python", "device", "threads"):
        assert key in report["provenance"]
    assert report["protocol"]["seeds"] == [0] and report["protocol"]["buffer_sizes"] == [30]
    assert report["protocol"]["policy_settings"] == {p: POLICIES[p].keywords()
                                                     for p in ("Reservoir", "Rand")}
    streams = {s["name"]: s for s in report["protocol"]["streams"]}
    assert streams["disjoint"]["stream"]["train_sizes"] == [100] * 5
    assert streams["imbalanced-1"]["stream"]["train_sizes"] == [100, 10, 10, 10, 10]
    rows = {(r["policy"], r["stream"]): r for r in report["rows"]}
    assert set(rows) == {(p, s) for p in ("Reservoir", "Rand")
                         for s in ("disjoint", "imbalanced-1")}
    for row in rows.values():
        assert row["seeds"] == [0] and len(row["train_seconds"]) == 1
        assert row["train_seconds"][0] > 0 and row["train_seconds_mean"] > 0
        assert "trace" not in json.dumps(row.get("extras", []))  # traces: composition file
    assert [t["policy"] for t in report["ranking"]] and set(report["best"]) == {
        "disjoint M=30", "imbalanced-1 M=30"}
    md = (out / "which_buffer.md").read_text()
    assert f"Data: {report['data_source']}" in md
    assert re.search(r"^\| Reservoir \| (\*\*)?\d+\.\d(\*\*)? \(\d+\.\d s\) \|", md, re.M), md
    assert "**" in md and "## Ranking" in md and "one seed" in md
    with open(out / "which_buffer.csv") as f:
        lines = list(csv.DictReader(f))
    assert len(lines) == 4 and all(float(r["train_seconds"]) > 0 for r in lines)
    assert {r["policy"] for r in lines} == {"Reservoir", "Rand"}
    comp = json.loads((out / "which_buffer_composition.json").read_text())
    assert comp["data_source"] == report["data_source"]
    assert comp["streams"] == ["disjoint", "imbalanced-1"] and len(comp["rows"]) == 4
    for row in comp["rows"]:
        assert len(row["task_end_shares"]) == 5
        for k, shares in enumerate(row["task_end_shares"]):
            assert sum(shares) == pytest.approx(1.0)
            assert all(s == 0 for s in shares[k + 1:])  # no sample of a task not yet seen
    assert "after T5" in (out / "which_buffer_composition.md").read_text()
    with open(out / "which_buffer_composition.csv") as f:
        shares = list(csv.DictReader(f))
    assert len(shares) == 4 * 5 and shares[0]["after_task"] == "1"  # 4 runs x 5 task ends
    # Again: every run comes from the cache (the same measured seconds), nothing reruns.
    assert len(list((out / "cache" / "which-buffer").glob("*.json"))) == 4
    assert main(argv) == 0
    again = json.loads((out / "which_buffer.json").read_text())
    assert [r["train_seconds"] for r in again["rows"]] == [r["train_seconds"]
                                                          for r in report["rows"]]


def test_an_unknown_policy_label_gets_one_line_naming_it_and_the_choices(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["which-buffer", "--policies", "Reservoir", "Nope"])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "--policies" in lines[0] and "'Nope'" in lines[0]
    for label in POLICIES:
        assert f"'{label}'" in lines[0]


def test_a_policy_this_version_cannot_run_is_refused_before_any_run(add_policy, tmp_path):
    add_policy("Later", Policy("NoSuchMethod"))
    add_policy("Newer", Policy("Reservoir", {"no_such_option": 1}))
    add_policy("Sized", Policy("Reservoir", {"buffer_size": 10}))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["which-buffer", "--quick", "--policies", "Reservoir", "Later", "Newer", "Sized",
              "--out", str(out)])
    message = str(exc.value)
    assert "\n" not in message and message.startswith("python -m reproduce: error: --policies")
    assert "Later (no buffer method 'NoSuchMethod' in the registry)" in message
    assert "Newer (Reservoir has no option 'no_such_option'" in message
    assert "Sized (it sets buffer_size" in message
    assert "Reservoir (" not in message  # the policies that can run are not blamed
    assert not out.exists()


def test_a_new_policy_is_one_entry_of_the_table(add_policy):
    add_policy("GSS-Greedy (paper)",
                        Policy("GSS-Greedy", {"variant": "paper", "n": 5}))
    runs, _ = plan(parse_args(["which-buffer", "--policies", "GSS-Greedy (paper)",
                               "--streams", "disjoint", "--seeds", "0"]))
    assert runs and all(r.settings.options == {"variant": "paper", "n": 5} for r in runs)


def test_the_policies_that_exist_now_run(monkeypatch):
    from avalanche_gss.reproduce.experiments.which_buffer import policy_problem

    assert {p for p in PRESENT if policy_problem(p) is None} == set(PRESENT)


def test_ranking_best_and_cost():
    def row(policy, stream, acc, secs):
        return {"policy": policy, "stream": stream, "buffer_size": 300, "avg_mean": acc,
                "train_seconds_mean": secs}

    rows = [row("A", "s", 80.0, 1.0), row("B", "s", 80.02, 2.0), row("C", "s", 70.0, 4.0),
            row("A", "t", 60.0, 1.0), row("B", "t", 50.0, 3.0), row("C", "t", 65.0, 2.0)]
    ranked = ranking(rows, ["A", "B", "C"], [("s", 300), ("t", 300)])
    table, best = ranked.records(), ranked.best
    assert best == {"s M=300": ["A", "B"], "t M=300": ["C"]}  # 80.0 and 80.02 tie at 0.1
    by = {t["policy"]: t for t in table}
    assert by["A"]["mean_rank"] == pytest.approx((1.5 + 2) / 2)
    assert by["C"]["mean_rank"] == pytest.approx((3 + 1) / 2)
    assert [t["policy"] for t in table] == ["A", "C", "B"]
    assert by["A"]["wins"] == 1 and by["C"]["wins"] == 1 and by["B"]["wins"] == 1
    assert by["B"]["time_vs_fastest"] == pytest.approx((2.0 + 3.0) / 2)
    assert by["A"]["time_vs_fastest"] == pytest.approx(1.0)


def test_task_end_records_and_shares():
    records = [
        {"samples": 40, "admitted_share": 1.0, "task_counts": [4, 0]},
        {"samples": 80, "admitted_share": 0.5, "task_counts": [4, 0]},
        {"samples": 100, "admitted_share": 0.5, "task_counts": [2, 2]},
    ]
    first, second = at_task_ends(records, [80, 20])
    assert first["samples"] == 80 and first["admitted_in_task"] == pytest.approx(0.75)
    assert second["samples"] == 100 and second["admitted_in_task"] == pytest.approx(0.5)
    assert task_shares(second) == [0.5, 0.5] and task_shares({"task_counts": [0, 0]}) == [0, 0]
    assert at_task_ends(records[:1], [80, 20]) == [None, None]


def test_quick_streams_are_quick_sized():
    chosen = choices(parse_args(["which-buffer", "--quick"]))
    for name in chosen.streams:
        assert stream_config(name, chosen).variant["samples_per_task"] == \
            policies.QUICK["samples_per_task"]


# ------------------------------------------------------------------ as a user runs it
#
# These run the command in a subprocess, from a folder outside the repository, on this
# checkout (PYTHONPATH names it): they hold before and after it is merged, whichever
# copy of the package is installed.


def test_help_lists_which_buffer_and_its_options(tmp_path):
    res = cli("--help", cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr
    assert re.search(r"^  which-buffer\s+which buffer policy", res.stdout, re.M)
    text = " ".join(res.stdout.split())
    assert "--policies POLICY" in text and "--streams STREAM" in text
    for label in PRESENT:
        assert label in text
    probe = ("import sys; from avalanche_gss.reproduce.cli import parse_args; "
             "parse_args(['which-buffer']); "
             "print(sorted(m for m in ('torch', 'avalanche', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         env=subprocess_env(), text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("args, names", [
    (["which-buffer", "--policies", "Nope"], ["--policies", "'Nope'", "'Reservoir'"]),
    (["which-buffer", "--streams", "rotated"], ["--streams", "'rotated'", "'blurry'"]),
    (["which-buffer", "--streams", "imbalanced", "imbalanced-2"], ["imbalanced-2", "once"]),
    (["which-buffer", "--methods", "Rand"], ["--methods", "--policies"]),
    (["table1", "--policies", "Rand"], ["--policies", "which-buffer only"]),
    (["which-buffer", "--variants", "paper"], ["--variants", "policies"]),
])
def test_bad_which_buffer_options_get_one_line(tmp_path, args, names):
    res = cli(*args, cwd=tmp_path, timeout=600)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("python -m avalanche_gss.reproduce: error:"), res.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])


def test_the_markdown_states_the_protocol_and_ties_share_their_place(add_policy):
    from avalanche_gss.reproduce.experiments.which_buffer_report import markdown

    def row(policy, stream, acc):
        return {"policy": policy, "stream": stream, "buffer_size": 300, "avg_mean": acc,
                "avg_std": None, "train_seconds_mean": 1.0, "seeds": [0]}

    # Three policies with the same mean rank (3.00), one ahead of them.
    rows = [row("A", "s", 90.0), row("B", "s", 80.0), row("C", "s", 70.0), row("D", "s", 60.0),
            row("A", "t", 90.0), row("B", "t", 70.0), row("C", "t", 60.0), row("D", "t", 80.0),
            row("A", "u", 90.0), row("B", "u", 60.0), row("C", "u", 80.0), row("D", "u", 70.0)]
    policies = ["A", "B", "C", "D"]
    ranked = ranking(rows, policies, [("s", 300), ("t", 300), ("u", 300)])
    table, best = ranked.records(), ranked.best
    assert [t["mean_rank"] for t in table] == [1.0, 3.0, 3.0, 3.0]
    stream = {"train_sizes": [500] * 5, "test_sizes": [200] * 5}
    streams = [{"name": "disjoint", "family": "disjoint", "protocol": "table1", "blur": None,
                "lr": 0.05, "n_iter": 3, "stream": stream, "deviations": []},
               {"name": "imbalanced-1", "family": "imbalanced", "protocol": "table4",
                "blur": None, "lr": 0.05, "n_iter": 3, "deviations": ["fewer"],
                "stream": {"train_sizes": [500, 50, 50, 50, 50], "test_sizes": [200] * 5,
                           "major": 500, "minor": 50}}]
    report = {"title": "t", "data_source": "digits", "data_verification": "checked",
              "command": "python -m reproduce which-buffer", "rows": rows, "best": best,
              "ranking": table,
              "protocol": {"policies": policies, "seeds": [0], "workers": 1, "streams": streams,
                           "buffer_sizes": [300], "model": "mlp", "batch_size": 10,
                           "replay_batch_size": 10},
              "provenance": {"threads": 1}}
    for p in policies:
        add_policy(p, Policy("Reservoir"))
    md = markdown(report, [("s", 300), ("t", 300), ("u", 300)], "plot.png")
    ranked = [line.split(" | ")[:3] for line in md.splitlines() if line.startswith("| ")
              and line.split(" | ")[1] in policies and "(" not in line]
    assert ranked == [["| 1", "A", "1.00"], ["| =2", "B", "3.00"], ["| =2", "C", "3.00"],
                      ["| =2", "D", "3.00"]], ranked
    assert "share it, e.g. =2, and are listed by mean accuracy" in md
    assert [t["place"] for t in table] == ["1", "=2", "=2", "=2"]
    # The protocol of every stream, in words, and what the data were checked to be.
    assert ("Protocol: M = 300; seed 0; batches of 10, replay batches of 10 (as many as it "
            "takes in: the GSS paper's replay protocol); the mlp model" in md)
    assert ("- disjoint (Table 1's disjoint stream): 5 tasks of 500 training samples, 200 "
            "test samples per task; learning rate 0.05; 3 iterations per batch.") in md
    assert "500 training samples in the sequence's own task and 50 in each other" in md
    assert "Deviations from the paper's protocol: fewer." in md
    assert "Data check: checked." in md
    assert "CB-GSS" not in md  # no text about rows that are not there
    # One seed: the order is one draw, and no recommendation is made (the report's
    # statistics were not added: the section says so rather than recommend)
    assert "One seed: this order is one draw of the streams and weights, not a ranking" in md
    assert "## Recommendation" in md and "No recommendation" in md


def test_gcr_is_compared_with_and_without_its_weighted_replay():
    from avalanche_gss.models import MLP
    from avalanche_gss.reproduce.experiments.which_buffer import policy_problem
    from avalanche_gss.reproduce.runs.training import build_strategy, make_buffer, make_settings

    assert POLICIES["GCR (selection)"] == Policy("GCR", {"replay_loss": "uniform"})
    assert policy_problem("GCR") is None and policy_problem("OCS") is None
    assert policy_problem("GCR (selection)") is None  # a strategy option, not the buffer's
    settings = make_settings("GCR", buffer_size=5, replay_loss="uniform", device="cpu")
    model = MLP(input_size=4, hidden_sizes=(3,), num_classes=2)
    strategy = build_strategy(settings, model, __import__("torch").optim.SGD(
        model.parameters(), lr=0.1))
    assert strategy.rehearsal.replay_loss == "uniform"
    assert type(make_buffer(settings)).__name__ == "GCRBuffer"


def test_family_weights_are_parsed_checked_before_any_run_and_name_the_bad_value(
        mnist, capsys):
    args = parse_args(["which-buffer", "--policies", "Reservoir", "--streams", "disjoint",
                       "imbalanced", "--family-weights", "imbalanced=2", "disjoint=0.5"])
    assert args.family_weights == [("imbalanced", 2.0), ("disjoint", 0.5)]
    plan(args)  # both are families of the chosen streams
    for bad in ("imbalanced", "imbalanced=-1", "=2", "imbalanced=nan"):
        with pytest.raises(SystemExit):
            parse_args(["which-buffer", "--family-weights", bad])
        said = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"{bad!r} is not FAMILY=WEIGHT" in said, said
    with pytest.raises(SystemExit):
        parse_args(["table1", "--family-weights", "disjoint=1"])
    assert "applies to which-buffer only" in capsys.readouterr().err
    for given, why in ((["permuted=1"], "permuted is not a family of the chosen streams"),
                       (["disjoint=1", "disjoint=2"], "disjoint given more than once"),
                       (["disjoint=0"], "every chosen family weighs 0")):
        args = parse_args(["which-buffer", "--policies", "Reservoir", "--streams",
                           "disjoint", "imbalanced", "--family-weights", *given])
        with pytest.raises(SystemExit) as refused:
            plan(args)
        assert str(refused.value).endswith(
            f"argument --family-weights: {why}; the families are disjoint, imbalanced")


def test_tuned_rates_pick_each_policys_best_mean_first_in_the_grid_on_ties():
    from types import SimpleNamespace

    from avalanche_gss.reproduce.experiments.which_buffer import tuned_rates

    def run(policy, stream, lr, seed):
        return SimpleNamespace(keys={"policy": policy, "stream": stream},
                               settings=SimpleNamespace(buffer_size=100, lr=lr, seed=seed))

    # A: best at 0.1 on the mix (disjoint 80 -> 90 outweighs permuted 70 -> 66);
    # B: the same at both rates, so the first of the grid; C: its 0.1 run diverged (NaN)
    table = {("A", 0.05): (80, 70), ("A", 0.1): (90, 66), ("B", 0.05): (75, 75),
             ("B", 0.1): (75, 75), ("C", 0.05): (60, 60), ("C", 0.1): (math.nan, 99)}
    runs, results = [], []
    for (policy, lr), (disjoint, permuted) in table.items():
        for seed in (100, 101):
            runs += [run(policy, "disjoint", lr, seed), run(policy, "permuted", lr, seed)]
            results += [{"avg": disjoint}, {"avg": permuted}]
    chosen, scores = tuned_rates(runs, results, [0.1, 0.05])
    assert chosen == {"A": 0.1, "B": 0.1, "C": 0.05}  # B's tie: 0.1 is first in this grid
    assert scores["A"] == {"0.05": 75.0, "0.1": 78.0}
    assert scores["C"]["0.1"] == -math.inf
    assert tuned_rates(runs, results, [0.05, 0.1])[0]["B"] == 0.05
    weighted, _ = tuned_rates(runs, results, [0.05, 0.1], {"permuted": 1.0})
    assert weighted["A"] == 0.05  # on the permuted stream alone 0.05 is better


def test_lr_grid_is_refused_with_a_tuning_seed_reported_or_a_single_rate(tmp_path, capsys):
    from avalanche_gss.reproduce.experiments.which_buffer import WHICH_BUFFER

    data = str(toy_npz(tmp_path / "toy.npz"))
    base = ["which-buffer", "--quick", "--data", data, "--streams", "disjoint",
            "--policies", "Reservoir", "Rand", "--seeds", "0", "1"]
    with pytest.raises(SystemExit) as clash:
        WHICH_BUFFER.plan(parse_args([*base, "--lr-grid", "0.01", "0.2", "--tune-seeds",
                                      "1"]))
    assert "argument --tune-seeds: seed 1 is also a reported seed (--seeds 0 1)" in str(
        clash.value)
    for bad, said in ((["--lr-grid", "0.1", "0.1"], "at least two different learning rates"),
                      (["--lr-grid", "0.1", "0.2", "--lr", "0.1"], "not with --lr"),
                      (["--tune-seeds", "5"], "applies with --lr-grid only")):
        with pytest.raises(SystemExit):
            parse_args([*base, *bad])
        assert said in capsys.readouterr().err


@pytest.mark.slow
def test_lr_grid_tunes_on_other_seeds_then_runs_each_policy_at_its_rate(tmp_path):
    data = toy_npz(tmp_path / "toy.npz")
    base = ["which-buffer", "--quick", "--data", data, "--streams", "disjoint",
            "--policies", "Reservoir", "Rand", "--seeds", "0", "1"]
    done = cli(*base, "--lr-grid", "0.01", "0.2", "--tune-seeds", "7", "--out", "o",
               cwd=tmp_path, warm=True)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "o" / "which_buffer.json").read_text())
    protocol = report["protocol"]
    assert (protocol["lr_grid"], protocol["tune_seeds"]) == ([0.01, 0.2], [7])
    assert set(protocol["tuned_lr"]) == {"Reservoir", "Rand"}
    for policy, lr in protocol["tuned_lr"].items():
        scores = protocol["tuning"][policy]
        assert set(scores) == {"0.01", "0.2"} and scores[str(lr)] == max(scores.values())
    with open(tmp_path / "o" / "which_buffer.csv", newline="") as f:
        ran = list(csv.DictReader(f))
    assert {r["seed"] for r in ran} == {"0", "1"}  # the tuning seed is not reported
    md = (tmp_path / "o" / "which_buffer.md").read_text()
    assert "Learning rates tuned per policy over 0.01, 0.2, on seeds 7" in md
