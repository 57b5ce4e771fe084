"""``which-buffer`` on Table 3's CIFAR-10 streams: the streams, the choices, the refusals, a run.

The run uses ``--quick`` without CIFAR-10 on disk, so the generated stand-in replaces it;
every output must say so.
"""

import csv
import json
import logging

import pytest
from helpers.cli import cli

from avalanche_gss.reproduce.__main__ import main
from avalanche_gss.reproduce.cli import parse_args
from avalanche_gss.reproduce.experiments import policies
from avalanche_gss.reproduce.experiments.policies import KINDS, STREAMS, stream_problem
from avalanche_gss.reproduce.experiments.protocols import BLURRY_KEEP, PROTOCOLS
from avalanche_gss.reproduce.experiments.which_buffer import (
    choices,
    fit_model,
    plan,
    stream_config,
    traced_streams,
)
from avalanche_gss.reproduce.runs.identity import STANDIN, load
from avalanche_gss.reproduce.runs.jobs import build_split

CIFAR = ("cifar10-disjoint", "cifar10-blurry")
QUICK_SPT = policies.CIFAR_QUICK["samples_per_task"]


def _one_error_line(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_the_cifar_streams_follow_table3_and_the_default_stays_on_the_digits():
    for name in CIFAR:
        assert STREAMS[name].protocol.name == "table3" and STREAMS[name].data == "cifar10"
    assert STREAMS["cifar10-blurry"].blurred and not STREAMS["cifar10-disjoint"].blurred
    # Each kind's data is its protocols' own dataset.
    for spec in STREAMS.values():
        assert spec.protocol.dataset == spec.data
    assert not set(CIFAR) & set(choices(parse_args(["which-buffer"])).streams)
    assert not set(CIFAR) & set(choices(parse_args(["which-buffer", "--quick"])).streams)
    chosen = choices(parse_args(["which-buffer", "--streams", *CIFAR]))
    assert chosen.streams == CIFAR
    assert chosen.buffer_sizes == PROTOCOLS["table3"].buffer_sizes == (1000,)
    quick = choices(parse_args(["which-buffer", "--quick", "--streams", *CIFAR]))
    assert quick.buffer_sizes == policies.CIFAR_QUICK["buffer_sizes"]
    assert quick.seeds == (0,) and quick.samples_per_task == QUICK_SPT
    runs, _ = plan(parse_args(["which-buffer", "--streams", *CIFAR, "--policies",
                               "Reservoir", "CB-GSS", "--seeds", "0"]))
    assert len(runs) == 2 * 2
    for r in runs:
        assert (r.settings.model, r.settings.lr, r.settings.n_iter, r.settings.buffer_size) == (
            "resnet18", 0.01, PROTOCOLS["table3"].n_iter, 1000)
    # The CIFAR-10 disjoint stream's runs trace the buffer's composition.
    assert traced_streams(CIFAR) == ("cifar10-disjoint",)
    assert stream_config("cifar10-disjoint", chosen).trace
    assert not stream_config("cifar10-blurry", chosen).trace


def test_split_cifar_has_two_classes_per_task_and_the_blurry_one_swaps_a_tenth():
    data = load(STANDIN, None, False)
    chosen = choices(parse_args(["which-buffer", "--quick", "--streams", *CIFAR]))
    disjoint = build_split(data, stream_config("cifar10-disjoint", chosen), 0)
    assert disjoint.n_tasks == 5 and disjoint.train_sizes == (QUICK_SPT,) * 5
    labels = [sorted(set(y.tolist())) for _, y in disjoint.train]
    assert labels == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert [sorted(set(y.tolist())) for _, y in disjoint.test] == labels
    blurry = build_split(data, stream_config("cifar10-blurry", chosen), 0)
    assert blurry.protocol["blurry"]["keep"] == BLURRY_KEEP
    assert blurry.train_sizes == disjoint.train_sizes
    foreign = [int(sum(int(c not in classes) for c in y.tolist()))
               for (_, y), classes in zip(blurry.train, blurry.task_classes, strict=True)]
    assert foreign == blurry.protocol["blurry"]["foreign_per_task"] and min(foreign) > 0
    assert sum(foreign) == pytest.approx((1 - BLURRY_KEEP) * 5 * QUICK_SPT, abs=5)


def test_streams_of_both_kinds_or_data_of_another_kind_are_refused_in_one_line(capsys):
    line = _one_error_line(capsys, ["which-buffer", "--streams", "disjoint", "blurry",
                                    "cifar10-blurry"])
    assert "--streams" in line and "disjoint, blurry: the digits streams" in line
    assert "cifar10-blurry: the CIFAR-10 streams" in line
    line = _one_error_line(capsys, ["which-buffer", "--streams", *CIFAR, "--data", "mnist"])
    assert line.endswith("error: argument --data: mnist does not fit cifar10-disjoint, "
                         "cifar10-blurry (the CIFAR-10 streams); give cifar10 or a PATH.npz")
    line = _one_error_line(capsys, ["which-buffer", "--data", "cifar10"])
    assert "--data: cifar10 does not fit disjoint, permuted" in line
    assert "give mnist or mnist-5k or a PATH.npz" in line
    assert stream_problem(CIFAR, "/x/data.npz") is None
    assert stream_problem(CIFAR, "cifar10") is None
    assert stream_problem(policies.DEFAULT_STREAMS, "mnist-5k") is None
    assert set(KINDS) == {s.data for s in STREAMS.values()}


def test_without_quick_missing_cifar10_is_refused_and_nothing_is_downloaded(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["which-buffer", "--streams", "cifar10-disjoint", "--policies", "Reservoir",
              "--seeds", "0", "--root", str(root), "--out", str(tmp_path / "out")])
    message = str(exc.value)
    assert "\n" not in message and "--data cifar10" in message and "--download" in message
    assert list(root.iterdir()) == [] and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_chosen_policy_that_cannot_train_the_resnet_is_refused_before_any_run(tmp_path):
    # CB-GSS (step) reads its gradients off the training step, which the ResNet-18's
    # train-mode BatchNorm mixes across samples: the library says so before any run.
    res = cli("which-buffer", "--quick", "--streams", *CIFAR, "--policies", "Reservoir",
              "CB-GSS (step)", "--root", tmp_path / "no-data", "--out", "o", cwd=tmp_path,
              warm=True, timeout=600)
    assert res.returncode == 1
    line = res.stderr.strip().splitlines()[-1]
    assert line == (
        "python -m avalanche_gss.reproduce: error: argument --policies: CB-GSS (step): cannot "
        "train the resnet18 model of cifar10-disjoint, cifar10-blurry: CB-GSS scores by the "
        "training step, but BatchNorm2d is in train mode: its batch statistics mix the "
        "samples of a step, so the step's gradients are not per sample; use "
        "score_from='pass'"), line
    assert not (tmp_path / "o" / "cache").exists()  # no run started
    # On the digits' MLP the same policy runs: it is the model that refuses it
    assert fit_model(parse_args(["which-buffer", "--policies", "CB-GSS (step)"]),
                     *plan(parse_args(["which-buffer", "--policies", "CB-GSS (step)"])),
                     load("mnist-5k", None, False))[1] == {}


@pytest.mark.slow
def test_quick_cifar_streams_run_on_the_stand_in_and_say_so(tmp_path, monkeypatch, caplog):
    out = tmp_path / "out"
    # One policy, the gradient-scored one (a ResNet's per-sample gradients), keeps it short.
    # In this process: what is tested is the streams and what the outputs say (the
    # command's own behaviour as a process is test_cli.py's).
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert main(["which-buffer", "--quick", "--streams", *CIFAR, "--policies", "CB-GSS",
                     "--seeds", "0", "--n-iter", "1", "--out", str(out)]) == 0
    assert "generated stand-in instead (not CIFAR-10)" in caplog.text
    report = json.loads((out / "which_buffer.json").read_text())
    assert report["dataset"] == STANDIN and report["data_verified_as"] is None
    assert report["data_source"].startswith("synthetic stand-in (cifar10-standin)")
    assert "CIFAR-10 stand-in (generated)" in report["title"]
    assert report["protocol"]["model"] == "resnet18"
    assert report["protocol"]["buffer_sizes"] == list(policies.CIFAR_QUICK["buffer_sizes"])
    streams = {s["name"]: s for s in report["protocol"]["streams"]}
    assert set(streams) == set(CIFAR)
    for s in streams.values():
        assert s["protocol"] == "table3" and s["lr"] == 0.01
        assert s["stream"]["train_sizes"] == [QUICK_SPT] * 5
        assert (f"--quick: {QUICK_SPT} samples per task instead of Table 3's 2,000"
                in s["deviations"])
    rows = {(r["policy"], r["stream"]) for r in report["rows"]}
    assert rows == {("CB-GSS", s) for s in CIFAR}
    md = (out / "which_buffer.md").read_text()
    assert f"Data: {report['data_source']}" in md and "CIFAR-10 stand-in (generated)" in md
    assert "instead of Table 3's 2,000" in md
    assert "| CB-GSS | " in md
    with open(out / "which_buffer.csv") as f:
        lines = list(csv.DictReader(f))
    assert len(lines) == 2 and {r["data"] for r in lines} == {STANDIN}
    comp = json.loads((out / "which_buffer_composition.json").read_text())
    assert comp["dataset"] == STANDIN and comp["streams"] == ["cifar10-disjoint"]
    assert len(comp["rows"]) == 1
    assert report["data_source"] in (out / "which_buffer_composition.md").read_text()
