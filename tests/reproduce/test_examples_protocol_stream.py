"""A stream of one's own with its own protocol is one file: ``examples/own_protocol_stream.py``,
copied outside the repository and run with the command its first lines give, trains on its
three tasks at its own learning rate, and the report says so."""

import json
import re
from pathlib import Path

import pytest
from helpers.cli import cli
from helpers.cli import first_lines_command as _command

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "own_protocol_stream.py"



@pytest.mark.slow
def test_a_stream_with_its_own_protocol_runs_with_its_counts_and_lr(tmp_path):
    (tmp_path / EXAMPLE.name).write_text(EXAMPLE.read_text())
    args = _command(EXAMPLE.read_text())
    assert args[:3] == ["avalanche-gss", "--import", EXAMPLE.name]
    out = tmp_path / args[args.index("--out") + 1]
    res = cli(*args[1:], cwd=tmp_path, warm=True)
    assert res.returncode == 0, res.stderr
    report = json.loads((out / "which_buffer.json").read_text())
    (stream,) = report["protocol"]["streams"]
    assert stream["name"] == "three-tasks" and stream["protocol"] == "three-tasks"
    assert stream["lr"] == 0.1 and stream["stream"]["n_tasks"] == 3
    assert {r["policy"] for r in report["rows"]} == {"Reservoir", "CBRS"}
    for row in report["rows"]:
        assert len(row["task_accuracy"][0]) == 3 and 0 < row["avg_mean"] <= 100
    md = (out / "which_buffer.md").read_text()
    assert re.search(r"^- three-tasks \(three class-disjoint tasks of 2 classes; its own "
                     r"protocol's settings\)", md, re.M)
    configs = [json.loads(p.read_text())["config"]
               for p in (out / "cache" / "which-buffer").glob("*.json")]
    assert len(configs) == 2
    for config in configs:
        assert config["counts"] == {"name": "three-tasks", "samples_per_task": 500,
                                    "pool": "classes"}
        assert config["settings"]["lr"] == 0.1
