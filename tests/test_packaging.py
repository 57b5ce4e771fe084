"""The distribution: its console script, its provenance when installed, its files, its docs."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from avalanche_gss.reproduce.reports.writing import provenance_line

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = (REPO / "pyproject.toml").read_text()
pytestmark = pytest.mark.reads_source  # the checkout's files, which mutmut's copy lacks


def test_the_console_script_names_itself_in_usage_and_errors(monkeypatch, capsys):
    from avalanche_gss.reproduce.__main__ import script

    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/avalanche-gss", "--help"])
    with pytest.raises(SystemExit) as done:
        script()
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: avalanche-gss [-h]")
    monkeypatch.setattr(sys, "argv", ["avalanche-gss", "table1", "--seeds", "x"])
    with pytest.raises(SystemExit) as done:
        script()
    assert done.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("avalanche-gss: error: argument --seeds"), lines


def test_the_declared_console_script_exists():
    scripts = re.search(r"^\[project\.scripts\]\n(.*?)(?:\n\n|\Z)", PYPROJECT, re.M | re.S)
    assert scripts, "pyproject.toml declares no [project.scripts]"
    entries = dict(re.findall(r'^([\w-]+) = "([\w.:]+)"', scripts.group(1), re.M))
    assert set(entries) == {"avalanche-gss"}
    module, _, name = entries["avalanche-gss"].partition(":")
    assert callable(getattr(importlib.import_module(module), name))


def test_the_provenance_line_of_an_installed_package_names_its_version():
    info = {"avalanche_gss": "0.1.0", "source": "installed package", "git_commit": None,
            "torch": "2.5", "avalanche": "0.6.0", "python": "3.10.13", "device": "cpu",
            "accelerator": "cpu", "threads": 1}
    line = provenance_line(info)
    assert line.startswith("Produced by avalanche-gss 0.1.0 (installed package, no git "
                           "checkout), torch 2.5"), line
    assert "unknown" not in line
    # from a checkout, the commit; a checkout where git cannot tell: unknown
    assert "(commit 0123abc)" in provenance_line({**info, "source": "git checkout",
                                                  "git_commit": "0123abc"})
    assert "(commit unknown)" in provenance_line({**info, "source": "git checkout"})
    # a report's record names the code by its hash where no commit does
    code = "ab12" * 16
    assert ("(installed package, no git checkout; code sha256 ab12ab12ab12), torch 2.5"
            in provenance_line({**info, "code_sha256": code}))
    assert "(commit unknown; code sha256 ab12ab12ab12)" in provenance_line(
        {**info, "source": "git checkout", "code_sha256": code})


def test_outside_a_checkout_the_provenance_says_installed_package(tmp_path, monkeypatch):
    import avalanche_gss.provenance as reporting

    # Given the package in a folder with no .git (as in site-packages),
    monkeypatch.setattr(reporting, "__file__", str(tmp_path / "avalanche_gss" / "provenance.py"))
    info = reporting.provenance("cpu", 1)
    # Then no commit is claimed, the source says so and the version is the distribution's.
    assert info["source"] == "installed package" and info["git_commit"] is None
    assert info["avalanche_gss"] == importlib.metadata.version("avalanche-gss")
    assert "(installed package, no git checkout)" in reporting.provenance_line(info)


def test_in_this_checkout_the_provenance_says_git_checkout():
    from avalanche_gss.reproduce.reports.writing import provenance

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert provenance("cpu", 1)["source"] == "git checkout"


def test_the_declared_python_versions_agree():
    minimum = re.search(r'^requires-python = ">=3\.(\d+)"$', PYPROJECT, re.M)
    assert minimum, "requires-python is not '>=3.N'"
    low = int(minimum.group(1))
    listed = sorted(int(v) for v in re.findall(r'"Programming Language :: Python :: 3\.(\d+)"',
                                               PYPROJECT))
    assert listed and listed[0] == low, (low, listed)
    assert re.search(rf'^target-version = "py3{low}"$', PYPROJECT, re.M)  # ruff
    assert re.search(rf'^python_version = "3\.{low}"$', PYPROJECT, re.M)  # mypy
    assert f"3.{low}" in (REPO / "Makefile").read_text()  # the CI venv of the minimum


def test_the_licence_and_the_changelog_ship():
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "the avalanche-gss authors" in licence
    assert re.search(r'^license = "MIT"$', PYPROJECT, re.M)
    changelog = (REPO / "CHANGELOG.md").read_text()
    version = re.search(r'^version = "(.+)"$', PYPROJECT, re.M).group(1)
    assert "## [Unreleased]" in changelog and f"## [{version}]" in changelog


def test_the_api_reference_documents_every_public_module():
    # Every module of avalanche_gss that is not private has an automodule in docs/api.
    pages = "\n".join(p.read_text() for p in (REPO / "docs" / "api").glob("*.rst"))
    documented = set(re.findall(r"^\.\. automodule:: ([\w.]+)$", pages, re.M))
    package = REPO / "avalanche_gss"
    modules = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(p.startswith("_") for p in parts[1:]) or parts[-1] == "__main__":
            modules.add(".".join(parts))
    assert modules - documented == set()
