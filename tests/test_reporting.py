"""Reports of python -m reproduce: rows from runs, and the JSON, CSV and Markdown they become."""

import csv
import errno
import json
import math
import os
import time
from pathlib import Path

import pytest

from avalanche_gss.reproduce.reports.writing import (
    DIVERGED_SHARE,
    diverged,
    format_cell,
    provenance_line,
    rows_from_runs,
    write_outputs,
    write_text,
)
from avalanche_gss.reproduce.runs.training import RunResult, RunSettings


def run(method="Rand", m=300, seed=0, accs=(50.0, 60.0), seconds=1.0, **extras):
    settings = RunSettings(method=method, buffer_size=m, seed=seed)
    return RunResult(settings, list(accs), sum(accs) / len(accs), seconds, dict(extras))


def report(rows, **protocol):
    return {"experiment": "tableX", "title": "a test table", "dataset": "mnist",
            "data_source": "the digits", "command": "python -m reproduce tableX",
            "protocol": protocol, "rows": rows}


def write(tmp_path, rows, columns=(("M=300", 300),), paper=None, paper_avg=None, **protocol):
    paths = write_outputs(report(rows, **protocol), str(tmp_path), columns=list(columns),
                          row_key="buffer_size", paper=paper or {}, paper_avg=paper_avg)
    return {ext: Path(p).read_text() for ext, p in paths.items()}


def test_rows_group_seeds_of_one_setting_and_keep_the_others_apart():
    rows = rows_from_runs([
        ({}, run(seed=1, accs=(60.0, 70.0), seconds=2.0)),
        ({}, run(seed=0, accs=(40.0, 50.0), seconds=1.0)),
        ({}, run(method="GSS-Greedy")),
        ({"sequence": 2}, run(seed=0)),
        ({}, run(m=200)),
    ])
    assert [(r["method"], r["buffer_size"], r.get("sequence")) for r in rows] == [
        ("Rand", 300, None), ("GSS-Greedy", 300, None), ("Rand", 300, 2), ("Rand", 200, None)]
    rand = rows[0]
    assert rand["seeds"] == [0, 1]  # ordered by seed, whatever the order of the runs
    assert rand["task_accuracy"] == [[40.0, 50.0], [60.0, 70.0]]
    assert rand["avg"] == [45.0, 65.0] and rand["train_seconds"] == [1.0, 2.0]
    assert rand["avg_mean"] == 55.0 and rand["avg_std"] == pytest.approx(10.0)
    assert rows[1]["avg_std"] is None  # one seed: no spread
    assert "extras" not in rand and "skipped_steps" not in rand


def test_rows_carry_extras_and_skipped_steps_with_a_divergence_verdict():
    rows = rows_from_runs([
        ({}, run(seed=0, skipped_steps=10, train_iterations=100, buffer_class_counts=[3, 4])),
        ({}, run(seed=1, skipped_steps=11, train_iterations=100)),
        ({}, run(seed=2)),
    ])
    (row,) = rows
    assert row["skipped_steps"] == [10, 11, 0]
    assert row["diverged"] == [False, True, False]  # more than 10% of 100 iterations
    assert row["extras"][0]["buffer_class_counts"] == [3, 4] and len(row["extras"]) == 2


def test_diverged_is_strictly_more_than_the_share_of_iterations():
    assert DIVERGED_SHARE == 0.1
    assert not diverged({"skipped_steps": 10, "train_iterations": 100})
    assert diverged({"skipped_steps": 11, "train_iterations": 100})
    assert not diverged({"skipped_steps": 0, "train_iterations": 0})
    assert diverged({"skipped_steps": 1})  # no iteration count: one skip is too many
    assert not diverged({})


def test_format_cell_rounds_to_one_decimal_and_drops_a_missing_spread():
    assert format_cell(82.64, 2.91) == "82.6 ± 2.9"
    assert format_cell(82.66, None) == "82.7"
    assert format_cell(82.66, math.nan) == "82.7"
    assert format_cell(5.0, 0.0) == "5.0 ± 0.0"


def test_markdown_shows_our_numbers_beside_the_papers_and_dashes_for_missing_cells(tmp_path):
    rows = rows_from_runs([
        ({}, run(m=200, seed=0, accs=(40.0, 40.0))), ({}, run(m=200, seed=1, accs=(50.0, 50.0))),
        ({}, run(m=300, seed=0, accs=(50.0, 50.0))), ({}, run(m=300, seed=1, accs=(60.0, 60.0))),
    ])
    out = write(tmp_path, rows, columns=[("M=200", 200), ("M=300", 300), ("M=500", 500)],
                paper={("Rand", 300): (37.5, 1.3)}, paper_avg={"Rand": (40.0, None)})
    md = out["md"]
    assert md.startswith("# tableX: a test table\n")
    assert "Data: the digits" in md
    assert "our mean ± std over seeds (the paper's number in parentheses)" in md
    assert "| method | M=200 | M=300 | M=500 | Avg |" in md
    # Avg: the mean over the columns (45, 55) and the std across them
    assert "| Rand | 45.0 ± 5.0 | 55.0 ± 5.0 (37.5 ± 1.3) | - | 50.0 ± 5.0 (40.0) |" in md
    assert md.rstrip().endswith("Command: `python -m reproduce tableX`")
    assert "†" not in md and "‡" not in md and "Deviations" not in md


def test_markdown_flags_skipped_steps_and_diverged_runs(tmp_path):
    rows = rows_from_runs([
        ({}, run(method="GSS-Greedy", seed=0, skipped_steps=3, train_iterations=100)),
        ({}, run(method="GSS-Greedy", seed=1, skipped_steps=30, train_iterations=100)),
        ({}, run(method="Reservoir", seed=0, skipped_steps=2, train_iterations=100)),
        ({}, run(method="Rand", seed=0, skipped_steps=0, train_iterations=100)),
    ])
    md = write(tmp_path, rows)["md"]
    assert "| GSS-Greedy | 55.0 ± 0.0 ‡ |" in md  # a diverged run outranks skipped steps
    assert "| Reservoir | 55.0 † |" in md
    assert "| Rand | 55.0 |" in md  # no step skipped: no mark
    assert "- GSS-Greedy, M=300: seed 0: 3 skipped; seed 1: 30 skipped (diverged)" in md
    assert "- Reservoir, M=300: seed 0: 2 skipped" in md
    assert "- Rand, M=300" not in md
    assert "more than 10% of its training iterations" in md


def test_markdown_lists_deviations_task_aware_methods_variants_and_provenance(tmp_path):
    rows = rows_from_runs([({"variant": "authors"}, run(method="GSS-Greedy")),
                           ({"variant": "paper"}, run(method="GSS-Greedy", accs=(10.0, 20.0)))])
    data = report(rows, deviations=["800 samples per task instead of 1000"],
                  task_aware=["GEM", "iCaRL"])
    data["provenance"] = {"avalanche_gss": "0.1.0", "git_commit": "abc123", "torch": "2.x",
                          "avalanche": "0.6.0", "python": "3.11", "device": "cpu",
                          "accelerator": "cpu", "threads": 1}
    paths = write_outputs(data, str(tmp_path), columns=[("M=300", 300)], row_key="buffer_size",
                          paper={("GSS-Greedy", 300): (82.6, 2.9)})
    md = Path(paths["md"]).read_text()
    # Each variant has its row; the paper's number is looked up by the method's name
    assert "| GSS-Greedy (authors) | 55.0 (82.6 ± 2.9) |" in md
    assert "| GSS-Greedy (paper) | 15.0 (82.6 ± 2.9) |" in md
    assert "(authors): as the authors' code does it" in md
    assert "- 800 samples per task instead of 1000" in md
    assert "- Task-aware methods (given task boundaries): GEM, iCaRL." in md
    assert provenance_line(data["provenance"]) in md
    csv_rows = list(csv.reader(Path(paths["csv"]).read_text().splitlines()))
    assert csv_rows[0] == ["method", "buffer_size", "variant", "seed", "avg", "T1", "T2",
                           "train_seconds", "device", "threads"]
    assert csv_rows[2] == ["GSS-Greedy", "300", "paper", "0", "15.00", "10.00", "20.00",
                           "1.00", "cpu", "1"]


def test_csv_has_one_line_per_seed_and_json_is_the_report(tmp_path):
    rows = rows_from_runs([
        ({}, run(seed=0, accs=(40.0, 50.0, 60.0), seconds=1.234)),
        ({}, run(seed=1, accs=(41.0, 51.0, 61.0), skipped_steps=20, train_iterations=100)),
        ({}, run(method="Single", accs=(1.0, 2.0))),
    ])
    out = write(tmp_path, rows)
    lines = list(csv.reader(out["csv"].splitlines()))
    assert lines[0] == ["method", "buffer_size", "seed", "avg", "T1", "T2", "T3",
                        "train_seconds", "skipped_steps", "diverged"]
    assert lines[1] == ["Rand", "300", "0", "50.00", "40.00", "50.00", "60.00", "1.23", "0",
                        "False"]
    assert lines[2] == ["Rand", "300", "1", "51.00", "41.00", "51.00", "61.00", "1.00", "20",
                        "True"]
    assert lines[3] == ["Single", "300", "0", "1.50", "1.00", "2.00", "1.00", "0", "False"]
    assert json.loads(out["json"]) == report(rows)


def test_provenance_line_says_when_the_commit_is_unknown():
    info = {"avalanche_gss": "0.1.0", "git_commit": None, "torch": "2.5", "avalanche": "0.6.0",
            "python": "3.11.9", "device": "cuda", "accelerator": "NVIDIA H100", "threads": 4}
    line = provenance_line(info)
    assert line == ("Produced by avalanche-gss 0.1.0 (commit unknown), torch 2.5, Avalanche "
                    "0.6.0, Python 3.11.9; device cuda (NVIDIA H100), 4 torch thread(s) per run.")
    assert "(commit 0123abc)" in provenance_line({**info, "git_commit": "0123abc"})
    assert provenance_line({**info, "cpu_capability": "AVX2"}).endswith(
        "device cuda (NVIDIA H100), CPU AVX2, 4 torch thread(s) per run.")



def test_leftover_temporaries_of_the_outputs_are_removed_when_old(tmp_path):
    # What writes killed (SIGKILL) an hour ago left beside table1.json and table1.md, and
    # one a writer in another process may be writing now: only the old ones go.
    hour_ago = time.time() - 3600
    old = [tmp_path / ".table1.json.k1l2m3.tmp", tmp_path / ".table1.md.x9y8z7.tmp"]
    fresh = tmp_path / ".table1.json.n4o5p6.tmp"
    other = tmp_path / ".which_buffer.json.a1b2c3.tmp"  # another output's, written later
    for path in (*old, fresh, other):
        path.write_text("partial")
    for path in (*old, other):
        os.utime(path, (hour_ago, hour_ago))
    data = {**report(rows_from_runs([({}, run())])), "experiment": "table1"}
    write_outputs(data, str(tmp_path), columns=[("M=300", 300)], row_key="buffer_size",
                  paper={})
    assert {p.name for p in tmp_path.iterdir()} == {
        "table1.json", "table1.csv", "table1.md", fresh.name, other.name}


def test_a_linked_output_is_refused_and_what_it_leads_to_untouched(tmp_path):
    # Given an output path that is a link to a file elsewhere, and one that is dangling
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "report.md"
    target.write_text("# someone's file\n")
    (tmp_path / "out.md").symlink_to(target)
    (tmp_path / "new.md").symlink_to(tmp_path / "real" / "created.md")
    for name in ("out.md", "new.md"):
        # When the report is written there, Then the write is refused in one line
        with pytest.raises(OSError, match=rf"^\[Errno {errno.ELOOP}\] refusing to write "
                                          rf"{tmp_path / name}: it is a symbolic link \(to "):
            write_text(str(tmp_path / name), "# new\n")
    # And nothing was written through either link; no temporary file is left anywhere
    assert target.read_text() == "# someone's file\n"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["report.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.md", "out.md", "real"]
