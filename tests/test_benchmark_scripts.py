"""The benchmark scripts take --device (auto: CUDA when present) and name the library's impl."""

import json
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def test_online_throughput_runs_on_the_auto_device(tmp_path):
    out = tmp_path / "r.json"
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "online_throughput.py"), "--repeats", "1",
         "--samples-per-task", "20", "--impls", "library", "floor", "--cases",
         "reservoir-mlp-disjoint", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    records = json.loads(out.read_text())["records"]
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert [r["impl"] for r in records] == ["library", "floor"]
    assert {r["device"] for r in records} == {expected}


def test_a_benchmark_refuses_an_unknown_device_in_one_line(tmp_path):
    # The four scripts share the check (avalanche_gss.experiments.resolve_device).
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "online_throughput.py"),
                          "--device", "gpu"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "'gpu'" in res.stderr.strip().splitlines()[-1]
    for script in ("gradient_gram.py", "iqp.py", "long_stream.py"):
        assert "resolve_device(args.device)" in (REPO / "benchmarks" / script).read_text()
