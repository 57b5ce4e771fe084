"""The test tree's layout: every helper is defined once (in tests/helpers or one test file).

A module-level function or class with the same name and the same body (its ``ast`` dump)
in two test files is a copy that should be imported from ``tests/helpers`` instead; the
same name with different bodies (a local ``_batches`` of another shape) is allowed.
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


@pytest.mark.reads_source
def test_no_helper_is_defined_twice():
    assert copies(TESTS) == []
