"""Every run of a sweep has a label of its own, and it is the name every output gives it."""

import logging
from collections import defaultdict

import pytest
from helpers.cli import toy_npz

from avalanche_gss.reproduce.cli import parse_args
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
from avalanche_gss.reproduce.reports.outputs import failed
from avalanche_gss.reproduce.runs.sweep import SweepError, config_key, run_sweep


def table_configs(argv):
    from avalanche_gss.reproduce.experiments.tables import _job_configs, plan

    args = parse_args(argv)
    runs, chosen = plan(args, PROTOCOLS[args.experiment])
    return _job_configs(args, runs, chosen, "mnist", {})


def which_buffer_configs(argv):
    from avalanche_gss.reproduce.experiments.which_buffer import _jobs, plan

    args = parse_args(["which-buffer", *argv])
    runs, _ = plan(args)
    return [j.config() for j in _jobs(args, runs, "mnist", {})]


def keys_by_label(configs):
    found = defaultdict(set)
    for config in configs:
        found[config["label"]].add(config_key(config))
    return found


@pytest.mark.parametrize("configs", [
    lambda: which_buffer_configs([]),
    lambda: which_buffer_configs(["--quick"]),
    lambda: which_buffer_configs(["--streams", "cifar10-disjoint", "cifar10-blurry"]),
    *[lambda name=name: table_configs([name]) for name in PROTOCOLS],
    lambda: table_configs(["table1", "--retrieval", "random", "mir", "--variants", "authors",
                           "paper"]),
], ids=["which-buffer", "which-buffer-quick", "which-buffer-cifar10", *PROTOCOLS,
        "table1-retrievals-variants"])
def test_no_two_runs_of_a_default_plan_share_a_label(configs):
    configs = configs()
    found = keys_by_label(configs)
    shared = {label: len(keys) for label, keys in found.items() if len(keys) > 1}
    assert not shared, shared
    assert len(found) == len({config_key(c) for c in configs}) > 1


def test_two_policies_of_one_method_are_named_by_their_rows():
    configs = which_buffer_configs(["--policies", "GCR", "GCR (selection)", "CB-GSS",
                                    "CB-GSS (step)", "--streams", "disjoint", "permuted",
                                    "--buffer-sizes", "40", "--seeds", "0"])
    labels = [c["label"] for c in configs]
    assert labels[:4] == ["GCR-disjoint-M40-seed0", "GCR (selection)-disjoint-M40-seed0",
                          "CB-GSS-disjoint-M40-seed0", "CB-GSS (step)-disjoint-M40-seed0"]
    assert len(set(labels)) == len(labels) == 8


def test_a_table_run_is_named_by_its_row_and_stream():
    labels = [c["label"] for c in table_configs(["table4", "--methods", "Reservoir",
                                                 "Single", "--seeds", "1"])]
    assert labels[:2] == ["Reservoir-M300-seed1-sequence1", "Single-seed1-sequence1"]
    assert len(set(labels)) == len(labels) == 10  # five sequences
    labels = [c["label"] for c in table_configs(["constrained", "--seeds", "1",
                                                 "--buffer-sizes", "100"])]
    assert labels == ["GSS-IQP-rehearsal-M100-seed1", "GSS-IQP-constrained-M100-seed1"]
    # What every run of the table shares (--quick's shorter stream) is not in its name.
    labels = [c["label"] for c in table_configs(["table1", "--quick", "--methods", "Rand"])]
    assert labels == ["Rand-M300-seed0"]


def test_a_failed_run_is_reported_by_its_label(capsys, caplog):
    configs = which_buffer_configs(["--policies", "CB-GSS", "CB-GSS (step)", "--streams",
                                    "disjoint", "--buffer-sizes", "40", "--seeds", "0"])
    err = SweepError([(configs[1], ValueError("the step cannot be recorded"))])
    with caplog.at_level(logging.ERROR, logger="reproduce"):
        assert failed(err, "prog") == 1
    line = capsys.readouterr().err.strip()
    assert line == ("prog: error: 1 run(s) failed; first: CB-GSS (step)-disjoint-M40-seed0: "
                    "ValueError: the step cannot be recorded")
    assert "CB-GSS (step)-disjoint-M40-seed0: ValueError" in caplog.text


def test_a_job_logs_its_run_under_its_label(tmp_path, caplog):
    from avalanche_gss.reproduce.runs.jobs import run_job

    data = toy_npz(tmp_path / "blobs.npz")
    config = which_buffer_configs(["--quick", "--policies", "GCR (selection)", "--streams",
                                   "disjoint", "--buffer-sizes", "20", "--seeds", "0",
                                   "--n-iter", "1", "--device", "cpu",
                                   "--data", str(data)])[0]
    config["data"] = str(data)
    with caplog.at_level(logging.INFO, logger="avalanche_gss.reproduce.runs.training"):
        run_job(config)
    assert "GCR (selection)-disjoint-M20-seed0: avg" in caplog.text


def _echo(config):
    return {"i": config["i"]}


def test_a_sweep_refuses_two_jobs_of_one_label(tmp_path):
    jobs = [{"label": "GCR-M300-seed0", "i": 0}, {"label": "GCR-M300-seed0", "i": 1}]
    with pytest.raises(ValueError, match="'GCR-M300-seed0'"):
        run_sweep(jobs, _echo, cache_dir=tmp_path, progress=False)
    assert not list(tmp_path.glob("*.json"))  # refused before any job ran
    # The same job twice is one job, and one label.
    assert run_sweep([jobs[0], dict(jobs[0])], _echo, cache_dir=tmp_path,
                     progress=False) == [{"i": 0}, {"i": 0}]
