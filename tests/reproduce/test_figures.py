"""``python -m reproduce figure2/figure4/figure5`` end to end, on tiny settings."""

import csv
import json
import os

import pytest
from helpers import PNG_MAGIC

from avalanche_gss.reproduce.__main__ import main
from avalanche_gss.reproduce.experiments import figures


def _outputs(out, name):
    for ext in ("json", "md", "csv", "png"):
        assert os.path.getsize(os.path.join(out, f"{name}.{ext}")) > 0, ext
    with open(os.path.join(out, f"{name}.png"), "rb") as f:
        assert f.read(8) == PNG_MAGIC
    with open(os.path.join(out, f"{name}.json")) as f:
        report = json.load(f)
    assert report["experiment"] == name
    assert report["data_source"]
    assert report["command"].startswith("python -m reproduce")
    return report


def test_figure2_reports_a_positive_monotonic_relation(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(figures.FIGURE2, "quick", {"ks": (4, 8), "n_sets": 30,
                                                   "n_samples": 20_000})
    assert main(["figure2", "--quick", "--out", str(tmp_path)]) == 0
    report = _outputs(tmp_path, "figure2")
    assert report["protocol"]["dim"] == 200
    assert [r["k"] for r in report["rows"]] == [4, 8]
    for row in report["rows"]:
        # A larger surrogate goes with a larger solid angle: the paper's monotonic relation.
        assert row["spearman"] > 0.9 and row["spearman_sign"] == 1
        assert row["pearson"] > 0.5 and row["pearson_sign"] == 1
        assert len(row["records"]) == 30
    with open(tmp_path / "figure2.csv") as f:
        assert len(list(csv.reader(f))) == 1 + 2 * 30
    assert "Spearman" in capsys.readouterr().out


@pytest.fixture
def tiny_curves(monkeypatch):
    monkeypatch.setitem(figures.FIGURE4, "quick", {"seeds": (0,), "samples_per_task": 40,
                                                   "every_samples": 20})


@pytest.mark.slow
def test_figure4_writes_one_curve_per_method_and_resumes(tmp_path, tiny_curves):
    argv = ["figure4", "--quick", "--data", "mnist-5k", "--buffer-sizes", "20",
            "--methods", "GSS-Greedy", "GEM", "iCaRL", "Single", "iid-online",
            "--variants", "paper", "--out", str(tmp_path)]
    assert main(argv) == 0
    report = _outputs(tmp_path, "figure4")
    rows = {r["method"]: r for r in report["rows"]}
    assert set(rows) == {"GSS-Greedy", "GEM", "iCaRL", "Single", "iid-online"}
    ends = report["protocol"]["task_ends"]
    assert ends == [40, 80, 120, 160, 200]
    assert rows["GSS-Greedy"]["samples"] == list(range(20, 201, 20))
    assert rows["iCaRL"]["samples"] == ends and rows["iCaRL"]["schedule"] == "task_ends"
    assert rows["iid-online"]["samples"] == [200] and rows["iid-online"]["schedule"] == "end"
    for row in rows.values():
        assert len(row["curve_mean"]) == len(row["samples"]) == len(row["curve_avg"][0])
        # The curve's last point is the row's final average accuracy.
        assert row["curve_avg"][0][-1] == pytest.approx(row["avg"][0])
        assert row["seeds"] == [0]
    assert os.path.exists(tmp_path / "figure4_curves.csv")
    cached = os.listdir(tmp_path / "cache" / "figure4")
    assert len([f for f in cached if f.endswith(".json")]) == 5
    # A rerun takes every run from the cache and writes the same rows.
    assert main(argv) == 0
    with open(tmp_path / "figure4.json") as f:
        again = json.load(f)
    assert again["rows"] == report["rows"]


def test_figure5_rows_carry_n_or_batch_size(tmp_path, monkeypatch):
    monkeypatch.setitem(figures.FIGURE5, "quick", {"seeds": (0,), "samples_per_task": 40,
                                                   "n_values": (1, 10), "batch_sizes": (10, 20)})
    argv = ["figure5", "--quick", "--data", "mnist-5k", "--buffer-sizes", "20",
            "--variants", "paper", "--out", str(tmp_path)]
    assert main(argv) == 0
    report = _outputs(tmp_path, "figure5")
    by_n = {r["n"]: r for r in report["rows"] if "n" in r}
    by_b = {r["batch_size"]: r for r in report["rows"] if "batch_size" in r and "n" not in r}
    assert set(by_n) == {1, 10} and set(by_b) == {10, 20}
    assert len(report["rows"]) == 4
    for row in report["rows"]:
        assert row["method"] == "GSS-Greedy" and row["variant"] == "paper"
        assert 0.0 <= row["avg_mean"] <= 100.0
    # n = 10 at batch size 10 is the same run in both panels (one cached job).
    assert by_n[10]["avg"] == by_b[10]["avg"]
    with open(tmp_path / "figure5.md") as f:
        md = f.read()
    assert "n=1" in md and "batch_size=20" in md and "(67.3)" in md
