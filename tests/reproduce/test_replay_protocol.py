"""The replay protocol as a choice (``--replay-batch-size``) and the field's methods as rows.

A replay batch of 64 against incoming batches of 10 is the protocol of most online papers
since 2022; the GSS paper replays as many as it takes in. Results compare only under the
same one, so every output names it. ER-ACE, MKD and CSReL run as which-buffer rows and as
run settings (``criterion``, ``joint``, ``mkd_weight``).
"""

from __future__ import annotations

import csv
import json

import pytest
from helpers.cli import cli

from avalanche_gss._avalanche import criterion_of
from avalanche_gss.reproduce.runs.training import RunSettings, build_strategy
from avalanche_gss.training import AsymmetricCrossEntropy, MKDPlugin


def _strategy(**keywords):
    import torch
    from torch import nn

    model = nn.Linear(4, 3)
    return build_strategy(RunSettings(method="Reservoir", **keywords), model,
                          torch.optim.SGD(model.parameters(), lr=0.1))


def test_the_settings_build_er_ace_and_mkd_into_the_strategy():
    ace = _strategy(criterion="ace", joint=True)
    assert isinstance(criterion_of(ace), AsymmetricCrossEntropy)
    assert ace.rehearsal.joint is True
    assert not any(isinstance(p, MKDPlugin) for p in ace.plugins)
    mkd = _strategy(mkd_weight=8.0, mkd_momentum=0.9, mkd_temperature=2.0)
    [plugin] = [p for p in mkd.plugins if isinstance(p, MKDPlugin)]
    assert (plugin.weight, plugin.momentum, plugin.temperature) == (8.0, 0.9, 2.0)
    assert mkd.rehearsal.joint is False and not isinstance(criterion_of(mkd),
                                                           AsymmetricCrossEntropy)
    plain = _strategy(replay_batch_size=64)
    assert plain.rehearsal.replay_batch_size == 64


@pytest.mark.slow
def test_which_buffer_runs_the_new_rows_at_a_replay_batch_of_64_and_says_so(tmp_path):
    res = cli("which-buffer", "--quick", "--replay-batch-size", "64", "--policies", "ER-ACE",
              "ER+MKD", "CSReL", "ER-MIR", "--streams", "disjoint", "--seeds", "0",
              "--buffer-sizes", "100", "--out", "o", "--root", tmp_path / "no-data",
              cwd=tmp_path, warm=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((tmp_path / "o" / "which_buffer.json").read_text())
    protocol = report["protocol"]
    assert (protocol["batch_size"], protocol["replay_batch_size"]) == (10, 64)
    assert protocol["mir_candidates"] == 320  # the MIR authors' ratio, 5 x the replay batch
    assert protocol["policy_settings"]["ER-ACE"] == {"method": "Reservoir", "criterion": "ace",
                                                     "joint": True}
    assert protocol["policy_settings"]["ER+MKD"] == {"method": "Reservoir", "mkd_weight": 5.5}
    assert [r["policy"] for r in report["rows"]] == ["ER-ACE", "ER+MKD", "CSReL", "ER-MIR"]
    md = (tmp_path / "o" / "which_buffer.md").read_text()
    assert ("batches of 10, replay batches of 64 (the GSS paper replays as many as it takes "
            "in; most online papers since 2022 replay 64 against 10)") in md
    assert "MIR scores 320 buffer samples per replay step" in md
    rows = list(csv.DictReader((tmp_path / "o" / "which_buffer.csv").read_text().splitlines()))
    assert [(r["policy"], r["batch_size"], r["replay_batch_size"]) for r in rows] == [
        (p, "10", "64") for p in ("ER-ACE", "ER+MKD", "CSReL", "ER-MIR")]
    # each run's record holds its settings: the cache, keyed on them, has all four
    records = [json.loads(p.read_text()) for p in (tmp_path / "o").rglob("*.json")
               if p.parent.name != "o"]
    runs = {(r["result"]["settings"]["method"], r["result"]["settings"]["criterion"],
             r["result"]["settings"]["joint"], r["result"]["settings"]["mkd_weight"],
             r["result"]["settings"]["mir_candidates"]) for r in records if "result" in r}
    assert runs >= {("Reservoir", "ace", True, 0.0, 320), ("Reservoir", "cross-entropy", False,
                                                           5.5, 320)}


@pytest.mark.slow
def test_a_table_replays_64_for_its_buffer_methods_and_names_it(tmp_path):
    res = cli("table1", "--quick", "--replay-batch-size", "64", "--methods", "Reservoir",
              "Single", "--seeds", "0", "--buffer-sizes", "100", "--out", "o", "--root",
              tmp_path / "no-data", cwd=tmp_path, warm=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((tmp_path / "o" / "table1.json").read_text())
    assert report["protocol"]["replay_batch_size"] == 64  # the buffer methods'
    md = (tmp_path / "o" / "table1.md").read_text()
    assert "replay batches of 64 (the GSS paper replays as many as it takes in" in md
    lines = (tmp_path / "o" / "table1.csv").read_text().splitlines()
    assert lines[0].startswith("method,buffer_size,replay_batch_size,seed,avg")


@pytest.mark.parametrize("args, message", [
    (["figure5", "--replay-batch-size", "64"],
     "argument --replay-batch-size: applies to the table experiments"),
    (["table1", "--replay-batch-size", "0"], "argument --replay-batch-size: '0' is not allowed"),
    (["table1", "--replay-batch-size", "64", "--retrieval", "mir", "--mir-candidates", "50"],
     "argument --mir-candidates: 50 is fewer than the 64 samples of a replay batch"),
])
def test_a_replay_batch_the_command_cannot_take_is_refused_in_one_line(tmp_path, args, message):
    res = cli(*args, "--out", "o", cwd=tmp_path, timeout=600)
    assert res.returncode == 2
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_protocol_line_names_the_replay_protocol_or_says_the_rows_differ():
    from avalanche_gss.reproduce.reports.writing import replay_words

    assert replay_words(10, 10) == ("batches of 10, replay batches of 10 (as many as it takes "
                                    "in: the GSS paper's replay protocol)")
    assert replay_words(10, 64).startswith("batches of 10, replay batches of 64 (the GSS paper "
                                           "replays as many as it takes in; most online")
    assert replay_words(10, None) == "batch and replay batch sizes as each row's settings say"
