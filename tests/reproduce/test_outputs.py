"""What the outputs say: spreads only with seeds to spread over, run names, provenance, words
a reader can follow."""

import logging
import re
import subprocess
from pathlib import Path

import pytest
from helpers.cli import cli
from helpers.fifo import fifo

from avalanche_gss.reproduce.__main__ import main
from avalanche_gss.reproduce.reports.writing import (
    format_cell,
    provenance,
    rows_from_runs,
    write_outputs,
)
from avalanche_gss.reproduce.runs.training import (
    RunResult,
    RunSettings,
    resolve_device,
    run,
    run_label,
)

REPO = Path(__file__).resolve().parents[2]


def result(method="Rand", seed=0, avg=50.0, **kw):
    settings = RunSettings(method=method, seed=seed, **kw)
    return RunResult(settings, [avg, avg], avg, 1.0)


def report_of(rows):
    return {"experiment": "t", "title": "t", "data_source": "d", "command": "c",
            "protocol": {}, "rows": rows}


def test_one_seed_has_no_spread_two_seeds_do(tmp_path):
    one = rows_from_runs([({}, result(seed=0, avg=50.0))])
    assert one[0]["avg_std"] is None
    assert format_cell(one[0]["avg_mean"], one[0]["avg_std"]) == "50.0"
    two = rows_from_runs([({}, result(seed=0, avg=50.0)), ({}, result(seed=1, avg=60.0))])
    assert two[0]["avg_std"] == pytest.approx(5.0)
    paths = write_outputs(report_of(one), str(tmp_path / "one"), columns=[("M=300", 300)],
                          row_key="buffer_size", paper={})
    md = Path(paths["md"]).read_text()
    assert "| Rand | 50.0 |" in md and "±" not in md and "one seed" in md
    paths = write_outputs(report_of(two), str(tmp_path / "two"), columns=[("M=300", 300)],
                          row_key="buffer_size", paper={})
    assert "| Rand | 55.0 ± 5.0 |" in Path(paths["md"]).read_text()


def test_a_seed_counted_twice_is_refused():
    with pytest.raises(ValueError, match=r"seed\(s\) \[0\] given more than once"):
        rows_from_runs([({}, result(seed=0)), ({}, result(seed=0)), ({}, result(seed=1))])


def test_reports_are_written_atomically_and_readable_by_others(tmp_path):
    paths = write_outputs(report_of(rows_from_runs([({}, result())])), str(tmp_path),
                          columns=[("M=300", 300)], row_key="buffer_size", paper={})
    for path in paths.values():
        assert Path(path).stat().st_mode & 0o044 == 0o044  # group/other may read (umask 022)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("settings, label", [
    ({"method": "GSS-Clust", "options": {"variant": "paper"}}, "GSS-Clust-paper-M300-seed0"),
    ({"method": "GSS-Clust"}, "GSS-Clust-authors-M300-seed0"),
    ({"method": "Reservoir"}, "Reservoir-M300-seed0"),
    ({"method": "GSS-IQP", "update": "constrained"}, "GSS-IQP-constrained-M300-seed0"),
    ({"method": "Single", "seed": 2}, "Single-seed2"),
    ({"method": "GEM", "buffer_size": 100}, "GEM-M100-seed0"),
    ({"method": "Reservoir", "retrieval": "mir"}, "Reservoir-mir-M300-seed0"),
    ({"method": "GSS-Greedy", "retrieval": "mir"}, "GSS-Greedy-authors-mir-M300-seed0"),
    ({"method": "GSS-IQP", "retrieval": "mir"}, "GSS-IQP-rehearsal-mir-M300-seed0"),
])
def test_run_names_carry_the_variant_only_where_there_is_one(settings, label):
    assert run_label(RunSettings(**settings)) == label


def test_the_log_line_of_a_run_names_its_variant(tiny_split, caplog):
    with caplog.at_level(logging.INFO, logger="avalanche_gss.reproduce.runs.training"):
        run(RunSettings(method="GSS-Greedy", options={"variant": "authors"}, buffer_size=20,
                        n_iter=1), tiny_split)
    assert any(r.getMessage().startswith("GSS-Greedy-authors-M20-seed0: avg")
               for r in caplog.records)


@pytest.mark.reads_source  # asks git about the checkout, which mutmut's copy is not
def test_provenance_names_versions_device_and_threads():
    info = provenance("cpu", 3)
    assert info["device"] == "cpu" and info["threads"] == 3 and info["accelerator"] == "cpu"
    assert info["torch"] and info["python"] and info["avalanche"] and info["avalanche_gss"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if head.returncode == 0:  # a checkout: the commit is known
        assert info["git_commit"].startswith(head.stdout.strip())


def test_device_auto_and_bad_devices():
    import torch

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="'gpu'.*auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="'cuda:1'.*no CUDA"):
            resolve_device("cuda:1")


def test_the_cli_names_match_the_library():
    from avalanche_gss.reproduce import cli
    from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
    from avalanche_gss.reproduce.runs.training import METHODS, RETRIEVALS, VARIANTS
    from avalanche_gss.streams import DATASET_NAMES

    assert cli.METHOD_NAMES == METHODS
    assert cli.VARIANT_NAMES == VARIANTS
    assert cli.DATASET_NAMES == DATASET_NAMES
    assert cli.RETRIEVAL_NAMES == RETRIEVALS
    assert cli.table_names() == tuple(PROTOCOLS)
    assert cli.REPLAY_BATCH == RunSettings.replay_batch_size
    assert set(cli.EXPERIMENTS) == {*PROTOCOLS, "figure2", "figure4", "figure5", "composition",
                                    "which-buffer"}


# Files another change is rewording (their docstrings still cite a notes file); remove them
# from this set once it lands.
@pytest.mark.reads_source
def test_no_internal_contract_numbers_or_absent_files_are_cited():
    words = re.compile("Contract" + r" \d|" + "PEERS" + r"\.md|" + "DESIGN" + r"\.md")
    files = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert files
    found = []
    for name in files:
        path = REPO / name
        if path.suffix not in (".py", ".md", ".toml", ".txt", ".cfg", "") \
                or not path.is_file():
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if words.search(line):
                found.append(f"{name}:{i}: {line.strip()}")
    assert not found, "\n".join(found)
    # Benchmarks name the library's impl "library", not "project".
    for bench in ("online_throughput.py", "gradient_gram.py", "iqp.py"):
        text = (REPO / "benchmarks" / bench).read_text()
        assert '"impl": "library"' in text or '"library":' in text, bench


def test_titles_name_the_data_and_the_buffer_sizes_run():
    import torch

    from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
    from avalanche_gss.streams import ArrayDataset

    def named(name, verified_as=None):
        x, y = torch.rand(20, 3, 4, 4), torch.arange(20) % 10
        return ArrayDataset(name, "test", x, y, x, y, 10, verified_as=verified_as)

    title, own = PROTOCOLS["table3"].heading(named("cifar10-standin"), (100,))
    assert "M = 100 " in title and "M = 1000" not in title and not own
    assert "stand-in" in title and "not shown" in title
    title, own = PROTOCOLS["table3"].heading(named("cifar10", "cifar10"))
    assert title == "disjoint CIFAR-10, M = 1000 (paper Table 3)" and own
    title, own = PROTOCOLS["table4"].heading(named("mnist", "mnist"), (200,))
    assert title.startswith("imbalanced disjoint MNIST, M = 200,") and own
    # The offline digits are a subset of MNIST, and the title says so.
    title, own = PROTOCOLS["table1"].heading(named("mnist", "mnist-5k"), (300,))
    assert title.startswith("disjoint MNIST (5,000-digit subset),") and own
    # Data in MNIST's layout that were not verified to be MNIST are not the paper's.
    title, own = PROTOCOLS["table1"].heading(named("mnist"), (300,))
    assert "not verified as MNIST" in title and "not shown" in title and not own
    title, own = PROTOCOLS["table3"].heading(named("cifar10"))
    assert "not verified as CIFAR-10" in title and not own
    title, own = PROTOCOLS["table1"].heading(named("blobs"), (20,))
    assert "disjoint blobs" in title and "MNIST" in title and not own  # "numbers are for MNIST"


def test_retrieval_rows_and_their_labels(tmp_path):
    from avalanche_gss.reproduce.cli import parse_args
    from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
    from avalanche_gss.reproduce.experiments.tables import plan

    args = parse_args(["table1", "--quick", "--methods", "Reservoir", "GSS-IQP", "Single",
                       "--retrieval", "random", "mir", "--mir-candidates", "20"])
    runs, _ = plan(args, PROTOCOLS["table1"])
    got = sorted((r.settings.method, r.settings.retrieval, r.settings.mir_candidates,
                  tuple(sorted(r.keys.items()))) for r in runs)
    assert got == [("GSS-IQP", "mir", 20, (("retrieval", "mir"),)),
                   ("GSS-IQP", "random", 50, ()),
                   ("Reservoir", "mir", 20, (("retrieval", "mir"),)),
                   ("Reservoir", "random", 50, ()),
                   ("Single", "random", 50, ())]
    # The constrained update has no replay batch: it keeps its one row.
    args = parse_args(["constrained", "--retrieval", "mir"])
    rows = [(r.settings.update, r.settings.retrieval) for r in
            plan(args, PROTOCOLS["constrained"])[0]]
    assert set(rows) == {("rehearsal", "mir"), ("constrained", "random")}
    rows = rows_from_runs([({"retrieval": "mir"}, result("Reservoir", retrieval="mir")),
                           ({}, result("Reservoir"))])
    report = {**report_of(rows), "protocol": {"mir_candidates": 20}}
    paths = write_outputs(report, str(tmp_path), columns=[("M=300", 300)],
                          row_key="buffer_size", paper={})
    md = Path(paths["md"]).read_text()
    assert "| Reservoir (mir) | 50.0 |" in md and "| Reservoir | 50.0 |" in md
    assert "Maximally Interfered Retrieval" in md and "among 20 random buffer samples" in md
    assert Path(paths["csv"]).read_text().splitlines()[0].startswith(
        "method,buffer_size,retrieval,seed")


@pytest.mark.parametrize("argv, names", [
    (["figure4", "--retrieval", "mir"], ["--retrieval", "table experiments", "figure4"]),
    (["table1", "--mir-candidates", "60"], ["--mir-candidates", "--retrieval mir"]),
    (["table1", "--retrieval", "mir", "--mir-candidates", "5"],
     ["--mir-candidates", "5", "10"]),
    (["table1", "--retrieval", "mir", "mir"], ["--retrieval", "mir", "once"]),
    (["table1", "--retrieval", "gss"], ["--retrieval", "'gss'"]),
])
def test_bad_retrieval_options_get_one_line_naming_them(argv, names, capsys):
    from avalanche_gss.reproduce.cli import parse_args

    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m reproduce: error:"), lines
    for name in names:
        assert name in lines[0], (name, lines[0])


def test_a_method_s_own_retrieval_is_its_unlabelled_row():
    from avalanche_gss.reproduce.cli import parse_args
    from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
    from avalanche_gss.reproduce.experiments.tables import plan

    def rows(argv):
        runs, _ = plan(parse_args(["table1", "--quick", "--methods", "CB-GSS", "Reservoir",
                                   *argv]), PROTOCOLS["table1"])
        return sorted({(r.settings.method, r.settings.retrieval,
                        tuple(sorted(r.keys.items()))) for r in runs})

    assert rows([]) == [("CB-GSS", "other-classes", ()), ("Reservoir", "random", ())]
    assert rows(["--retrieval", "random", "other-classes"]) == [
        ("CB-GSS", "other-classes", ()), ("CB-GSS", "random", (("retrieval", "random"),)),
        ("Reservoir", "other-classes", (("retrieval", "other-classes"),)),
        ("Reservoir", "random", ())]


# ------------------------------------------------------------------ what ran, said exactly


def _wrote(stdout, *paths):
    """The one "Wrote ..." line of a run's stdout, checked to name every path."""
    lines = [line for line in stdout.splitlines() if line.startswith("Wrote ")]
    assert len(lines) == 1, stdout[-2000:]
    for path in paths:
        assert str(path) in lines[0], (path, lines[0])
    return lines[0]


def _idx(path, array):
    import struct

    import numpy as np

    header = struct.pack(">I", 0x0800 + array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


@pytest.mark.slow
def test_other_data_in_mnist_s_layout_get_no_paper_column(tmp_path, monkeypatch, capsys):
    import json

    import numpy as np

    # torchvision's MNIST layout (extracted files), holding other images.
    raw = tmp_path / "root" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    _idx(raw / "train-images-idx3-ubyte", rng.integers(0, 256, (200, 28, 28)))
    _idx(raw / "train-labels-idx1-ubyte", np.arange(200) % 10)
    _idx(raw / "t10k-images-idx3-ubyte", rng.integers(0, 256, (50, 28, 28)))
    _idx(raw / "t10k-labels-idx1-ubyte", np.arange(50) % 10)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # the run in this process: what is tested is what it writes
    assert main(["table1", "--quick", "--data", "mnist", "--root", str(tmp_path / "root"),
                 "--methods", "Rand", "--n-iter", "1", "--out", "o"]) == 0
    md = (work / "o" / "table1.md").read_text()
    assert "(37.5 ± 1.3)" not in md and "paper's number in parentheses" not in md
    report = json.loads((work / "o" / "table1.json").read_text())
    assert not report["protocol"]["paper_numbers_shown"] and report["data_verified_as"] is None
    assert "not verified as MNIST" in report["title"]
    assert "Data check: not verified as MNIST" in md and "absent" in md
    _wrote(capsys.readouterr().out, *(f"o/table1.{ext}" for ext in ("json", "csv", "md")))


@pytest.mark.slow
def test_composition_writes_json_csv_md_with_a_legend_and_says_so(tmp_path):
    import csv
    import json

    res = cli("composition", "--quick", "--methods", "Reservoir", "--n-iter", 1,
              "--root", tmp_path / "empty", "--out", "o", cwd=tmp_path, warm=True)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "o"
    _wrote(res.stdout, *(f"o/composition.{ext}" for ext in ("json", "csv", "md")))
    report = json.loads((out / "composition.json").read_text())
    assert report["data_verified_as"] == "mnist-5k" and len(report["data_sha256"]) == 64
    with open(out / "composition.csv") as f:
        lines = list(csv.DictReader(f))
    assert len(lines) == len(report["rows"][0]["trace"]) == 10  # --quick: 1,000, every 100
    assert lines[-1]["samples"] == "1000" and lines[0]["method"] == "Reservoir"
    assert sum(int(lines[-1][f"stored_T{k}"]) for k in range(1, 6)) == 300
    md = (out / "composition.md").read_text()
    assert "MNIST (5,000-digit subset)" in md.splitlines()[0]
    for words in ("samples: the stream's training samples seen so far",
                  "stored per task:", "score q10/q50/q90: the 10%, 50% and 90% quantiles",
                  "admitted: the share of the samples offered",
                  "Protocol: 5 tasks of 200 training samples, 200 test samples per task; "
                  "learning rate 0.05; 1 iteration per batch; M = 300",
                  "--quick: 200 samples per task, a record every 100"):
        assert words in md, words
    # The offline digits stand in for MNIST: said once, as one warning.
    assert res.stderr.count("torchvision MNIST not found") == 1, res.stderr


def test_every_table_states_its_protocol_and_a_legend_and_only_notes_rows_it_has(tmp_path):
    rows = rows_from_runs([({}, result("CB-GSS")), ({}, result("Reservoir"))])
    protocol = {"lr": 0.05, "n_iter": 3, "buffer_sizes": [300], "seeds": [0],
                "batch_size": 10, "replay_batch_size": 10,
                "stream": {"train_sizes": [800] * 5, "test_sizes": [200] * 5},
                "method_overrides": {"Single": {"n_iter": 1}}}
    report = {**report_of(rows), "protocol": protocol}
    paths = write_outputs(report, str(tmp_path / "a"), columns=[("M=300", 300)],
                          row_key="buffer_size", paper={})
    md = Path(paths["md"]).read_text()
    assert ("Protocol: 5 tasks of 800 training samples, 200 test samples per task; learning "
            "rate 0.05; 3 iterations per batch; M = 300; batches of 10, replay batches of 10 "
            "(as many as it takes in: the GSS paper's replay protocol); seed 0. Methods with "
            "their own settings (the authors' scripts): Single: 1 iteration per batch.") in md
    assert "columns: M=m: a memory (buffer) of m samples" in md
    # CB-GSS with its own retrieval: its note, and no word of a "CB-GSS (random)" row.
    assert "CB-GSS replays the classes" in md and "CB-GSS (random)" not in md
    assert "GSS-Clust" not in md and "(authors)" not in md  # no variant rows, no note
    rows += rows_from_runs([({"retrieval": "random"}, result("CB-GSS", retrieval="random"))])
    paths = write_outputs({**report, "rows": rows}, str(tmp_path / "b"),
                          columns=[("M=300", 300)], row_key="buffer_size", paper={})
    md = Path(paths["md"]).read_text()
    assert "| CB-GSS (random) | 50.0 |" in md and "CB-GSS (random): CB-GSS with the paper's" in md
    # Table 4: imbalanced counts, the sequences and the Avg column named.
    protocol["stream"] = {"train_sizes": [2000, 200, 200, 200, 200], "test_sizes": [1000] * 5,
                          "major": 2000, "minor": 200}
    rows = rows_from_runs([({"sequence": 1}, result("Reservoir"))])
    paths = write_outputs({**report_of(rows), "protocol": protocol}, str(tmp_path / "c"),
                          columns=[("Seq1", 1)], row_key="sequence", paper={}, paper_avg={})
    md = Path(paths["md"]).read_text()
    assert "5 tasks, 2,000 training samples in the sequence's own task and 200 in each" in md
    assert "Seqk: Table 4's imbalanced sequence k" in md and "Avg: the mean over" in md


def test_a_report_replaced_by_a_fifo_or_a_link_is_not_read_back(tmp_path, capsys):
    from avalanche_gss.reproduce.reports.outputs import show_outputs

    (tmp_path / "secret").write_text("someone's file\n")
    (tmp_path / "linked.md").symlink_to(tmp_path / "secret")
    with fifo(tmp_path / "table1.md") as md:  # no writer comes: a plain open would block
        for path, said in ((md, "is a FIFO"), (tmp_path / "linked.md", "is a symbolic link")):
            with pytest.raises(OSError, match=f"^report {path} {said}"):
                show_outputs({"md": str(path)})
    assert "someone's file" not in capsys.readouterr().out
