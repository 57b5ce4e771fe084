"""Messages and recorded commands name the program as the user ran it."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import subprocess_env

REPO = Path(__file__).resolve().parents[2]


def three_classes(path: Path) -> Path:
    """An ``.npz`` of 3 classes: valid data, too few classes for Table 1 (a refusal after
    the command line is parsed)."""
    x = np.random.default_rng(0).random((30, 4), dtype=np.float32)
    y = np.arange(30) % 3
    np.savez(path, x_train=x, y_train=y, x_test=x, y_test=y)
    return path


@pytest.mark.parametrize("module, prog", [("avalanche_gss.reproduce",
                                           "python -m avalanche_gss.reproduce"),
                                          ("reproduce", "python -m reproduce")])
def test_an_error_names_the_program_as_run(tmp_path, module, prog):
    # A refusal of the checked command line (an output folder that is a file), which comes
    # before torch is imported; the refusals after it name the program the same way
    # (test_cli.py's, in a subprocess; the console script's below).
    (tmp_path / "taken").write_text("a file, not a folder")
    res = subprocess.run([sys.executable, "-m", module, "table1", "--quick", "--out",
                          "taken"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=subprocess_env())
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{prog}: error: --out taken"), last


def test_the_console_script_names_itself_in_messages_and_the_recorded_command(tmp_path):
    from avalanche_gss.reproduce.__main__ import SCRIPT, main
    from avalanche_gss.reproduce.common import command

    data = three_classes(tmp_path / "three.npz")
    with pytest.raises(SystemExit) as exc:
        main(["table1", "--quick", "--data", str(data), "--out", str(tmp_path / "o")],
             prog=SCRIPT)
    assert str(exc.value.code).startswith("avalanche-gss: error: --data")
    assert command(["table1", "--quick"], SCRIPT) == "avalanche-gss table1 --quick"
