"""A table of one's own is one file: its protocol, the table class, one registration."""

import json

from helpers.cli import cli as reproduce

MINE = '''\
from avalanche_gss.reproduce.experiments.protocols import Protocol
from avalanche_gss.reproduce.experiments.registry import register
from avalanche_gss.reproduce.experiments.tables import Table
from avalanche_gss.reproduce.runs.protocol_streams import ProtocolStream

register("three-tasks", Table(Protocol(
    name="three-tasks", title="three disjoint tasks of {data}, M = {m}", paper_ref="",
    stream=ProtocolStream("disjoint", 60), variants=({"n_tasks": 3},),
    methods=("Reservoir", "Rand"), buffer_sizes=(20,), lr=0.1, n_iter=1, seeds=(0,),
    summary="three disjoint tasks of 60 samples at lr 0.1 (mine)")))
'''


def test_a_table_of_ones_own_is_one_file(tmp_path):
    (tmp_path / "mine.py").write_text(MINE)
    helped = reproduce("--import", "mine.py", "--help", cwd=tmp_path, warm=True)
    assert "three disjoint tasks of 60 samples at lr 0.1 (mine)" in helped.stdout
    done = reproduce("--import", "mine.py", "three-tasks", "--data", "mnist-5k",
                     "--methods", "Reservoir:replay.batch_size=5", "Rand", "--out", "out",
                     cwd=tmp_path, warm=True)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "three-tasks.json").read_text())
    assert report["title"].startswith("three disjoint tasks of MNIST")
    assert "paper" not in report["title"]
    assert report["protocol"]["lr"] == 0.1 and report["protocol"]["n_iter"] == 1
    assert report["protocol"]["stream"]["n_tasks"] == 3
    assert [len(r["task_accuracy"][0]) for r in report["rows"]] == [3, 3]
    assert all(0 < r["avg_mean"] <= 100 for r in report["rows"])
