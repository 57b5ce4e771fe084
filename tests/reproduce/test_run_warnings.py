"""A run that went wrong without failing says so in its result and in the report, not only
in the log: CSReL whose coreset model diverges refuses every sample and freezes its buffer."""

import json

import pytest
from helpers.cli import cli, toy_npz


@pytest.mark.slow
def test_a_frozen_csrel_buffer_is_a_warning_of_the_result_and_the_report(tmp_path):
    data = toy_npz(tmp_path / "toy.npz")
    res = cli("table1", "--quick", "--data", data, "--methods", "CSReL:refit_lr=1e30",
              "--seeds", 0, "--buffer-sizes", 100, "--out", "out", cwd=tmp_path, warm=True)
    assert res.returncode == 0, res.stderr
    (row,) = json.loads((tmp_path / "out" / "table1.json").read_text())["rows"]
    (extras,) = row["extras"]
    assert sum(extras["buffer_class_counts"]) < 100  # the buffer froze
    (warning,) = extras["warnings"]
    assert warning.startswith("CSReL refused ") and "refit_lr=1e+30" in warning
    assert f"holds {sum(extras['buffer_class_counts'])} of 100" in warning
    md = (tmp_path / "out" / "table1.md").read_text()
    assert f"- CSReL (refit_lr=1e30), M=100: {warning}\n" in md
    assert "Warnings of the runs:" in md


def test_warning_lines_name_each_row_and_are_absent_without_warnings():
    from avalanche_gss.reproduce.reports.rows import warning_lines

    rows = [{"policy": "CSReL", "extras": [{"warnings": ["a"]}, {}, {"warnings": ["b", "c"]}]},
            {"policy": "Reservoir", "extras": [{"coreset_refits": 0}]}, {"policy": "Single"}]
    assert warning_lines(rows, lambda r: r["policy"]) == [
        "", "Warnings of the runs:", "", "- CSReL: a", "- CSReL: b", "- CSReL: c"]
    assert warning_lines(rows[1:], lambda r: r["policy"]) == []
