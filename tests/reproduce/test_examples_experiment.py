"""``examples/my_experiment.py``: an experiment of one's own, run by the command its first
line gives, from a copy of the file outside the repository."""

import csv
import json
import shlex
import shutil

from helpers.cli import REPO
from helpers.cli import cli as reproduce

EXAMPLE = REPO / "examples" / "my_experiment.py"


def _command(path):
    """The command the file's first line gives (``# avalanche-gss ...``), its words."""
    first = path.read_text().splitlines()[0]
    assert first.startswith("# avalanche-gss "), first
    return shlex.split(first[2:])


def test_the_example_experiment_runs_by_the_command_its_first_line_gives(tmp_path):
    # Given a copy of the example, outside the repository
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    words = _command(tmp_path / EXAMPLE.name)
    assert words[:4] == ["avalanche-gss", "--import", EXAMPLE.name, "my-experiment"]
    args = ["out" if w == "OUT" else w for w in words[1:]]
    # When the command runs there
    done = reproduce(*args, cwd=tmp_path, warm=True)
    assert done.returncode == 0, done.stderr
    # Then its report holds one row per method and learning rate, each a real accuracy
    report = json.loads((tmp_path / "out" / "my-experiment.json").read_text())
    assert report["experiment"] == "my-experiment"
    rows = {(r["method"], r["lr"]): r for r in report["rows"]}
    assert set(rows) == {(m, lr) for m in ("Reservoir", "GSS-Greedy") for lr in (0.05, 0.01)}
    assert all(0 < r["avg_mean"] < 100 and r["seeds"] == [0] for r in rows.values())
    assert rows[("Reservoir", 0.05)]["avg"] != rows[("Reservoir", 0.01)]["avg"]
    # And its facts are the runs' settings; its CSV one line per run; its Markdown the table
    assert report["protocol"]["batch_size"] == report["protocol"]["replay_batch_size"] == 10
    with open(tmp_path / "out" / "my-experiment.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    md = (tmp_path / "out" / "my-experiment.md").read_text()
    assert "| method | M | lr=0.05 | lr=0.01 |" in md
    assert f"| Reservoir | 50 | {rows[('Reservoir', 0.05)]['avg_mean']:.1f} |" in md
