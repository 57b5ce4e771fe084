"""The benchmark scripts take --device (auto: CUDA when present) and name the library's impl.

An unknown device is refused by ``resolve_device`` (tests/test_outputs.py).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.cli import subprocess_env

REPO = Path(__file__).resolve().parents[1]


def _throughput(tmp_path, *args):
    """Run ``benchmarks/online_throughput.py --repeats 1 ARGS`` from ``tmp_path``: its records."""
    out = tmp_path / "r.json"
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "online_throughput.py"), "--repeats", "1",
         *args, "--json", str(out)],
        cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True,
        timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text())["records"]


@pytest.mark.slow
def test_online_throughput_runs_on_the_auto_device_and_reports_phases_on_the_stand_in(tmp_path):
    # One run of the script (each start imports torch and Avalanche): two MLP cases on the
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
