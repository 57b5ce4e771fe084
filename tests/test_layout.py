"""The test tree's layout: every helper is defined once (in tests/helpers or one test file).

A module-level function or class with the same name and the same body (its ``ast`` dump)
in two test files is a copy that should be imported from ``tests/helpers`` instead; the
same name with different bodies (a local ``_batches`` of another shape) is allowed.
A helper (a module-level ``_function`` or a fixture) whose arguments and body are those of a
helper in another file, under another name, is a copy too; Avalanche's own tests, run
against our classes (``avalanche_suite``), stay as Avalanche wrote them and are not read.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def copies(root: Path) -> list[str]:
    """``name: file, file, ...`` for each definition repeated, body and all, across files."""
    places: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                key = (node.name, ast.dump(node, include_attributes=False))
                places[key].append(str(path.relative_to(root)))
    return [f"{name}: {', '.join(files)}" for (name, _), files in sorted(places.items())
            if len(set(files)) > 1]


def test_copies_are_found(tmp_path):
    # Given two files with the same helper, and a third with the name but another body
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "test_a.py").write_text("def _model(seed=0):\n    return seed\n")
    (tmp_path / "test_b.py").write_text("def _model(seed=0):\n    return seed  # same\n")
    (tmp_path / "test_c.py").write_text("def _model(seed=0):\n    return -seed\n")
    # Then exactly the two identical ones are reported
    assert copies(tmp_path) == ["_model: a/test_a.py, test_b.py"]


def _is_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
                isinstance(target, ast.Name) and target.id == "fixture"):
            return True
    return False


def renamed_copies(root: Path, skip: tuple[str, ...] = ("avalanche_suite",)) -> list[str]:
    """``name, name: file, file`` for each helper (a module-level ``_function`` or a fixture)
    whose arguments and body, docstring aside, stand again under another name in another
    file; the folders in ``skip`` are not read."""
    places: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in skip:
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not (
                    node.name.startswith("_") or _is_fixture(node)):
                continue
            body = node.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring
            key = ast.dump(node.args) + ast.dump(ast.Module(body, []))
            places[key].append((node.name, str(rel)))
    found = [(sorted({n for n, _ in where}), sorted({f for _, f in where}))
             for where in places.values()]
    return sorted(f"{', '.join(names)}: {', '.join(files)}" for names, files in found
                  if len(names) > 1 and len(files) > 1)


def test_renamed_copies_are_found(tmp_path):
    # Given a fixture with one body under two names in two files (one with a docstring),
    # a helper of another body, one body twice in one file, and a copy in a skipped folder
    (tmp_path / "skipped").mkdir()
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef model():\n    return [1, 2]\n\n"
        "def _seeded(n):\n    return n + 1\n\ndef _same_file(n):\n    return n * 2\n\n"
        "def _also_same_file(n):\n    return n * 2\n")
    (tmp_path / "test_b.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef net():\n    'Doc.'\n    return [1, 2]\n\n"
        "def _other(n):\n    return n - 1\n")
    (tmp_path / "skipped" / "test_c.py").write_text("def _plus(n):\n    return n + 1\n")
    # Then only the fixture pair is reported
    assert renamed_copies(tmp_path, skip=("skipped",)) == ["model, net: test_a.py, test_b.py"]
    # And the skipped copy would be, were its folder read
    assert renamed_copies(tmp_path, skip=()) == [
        "_plus, _seeded: skipped/test_c.py, test_a.py", "model, net: test_a.py, test_b.py"]


@pytest.mark.reads_source
def test_no_helper_is_written_twice_under_two_names():
    assert renamed_copies(TESTS) == []


@pytest.mark.reads_source
def test_no_helper_is_defined_twice():
    assert copies(TESTS) == []
