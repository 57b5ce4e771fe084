"""The harness's layers: no module of ``avalanche_gss/reproduce`` imports one above its own.

From the bottom: the standard-library helpers; the engine (``runs/``: jobs, the sweep, the
cache, the run's identity), which knows no experiment, no command line and no paper; the
reports; the runner; the experiments with what they share (``common.py``); the command
line; the entry points. Every import counts, at the top of a module or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import avalanche_gss.reproduce as reproduce

ROOT = Path(reproduce.__file__).parent
PACKAGE = "avalanche_gss.reproduce"

LAYERS = (
    {"json_types", "paths", "program", "options"},
    {"runs"},
    {"reports"},
    {"runner"},
    {"experiments", "common", "extend"},
    {"cli"},
    {"dispatch", "__main__", "__init__"},
)


def _layer(part: str) -> int:
    found = [i for i, layer in enumerate(LAYERS) if part in layer]
    assert found, f"{part!r} has no layer: add it to LAYERS"
    return found[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    """Each ``avalanche_gss.reproduce`` module ``path`` imports, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: a relative import")
            if node.module == PACKAGE:
                found += [(node.lineno, f"{PACKAGE}.{a.name}") for a in node.names]
            elif node.module.startswith(PACKAGE + "."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.startswith(PACKAGE + ".")]
    return found


def _part(module: str) -> str:
    return module[len(PACKAGE) + 1:].split(".")[0]


def _upward() -> list[str]:
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        part = path.relative_to(ROOT).parts[0].removesuffix(".py")
        for line, module in _imports(path):
            if _layer(_part(module)) > _layer(part):
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return problems


def test_no_import_points_upward():
    assert _upward() == []


def test_the_engine_imports_no_experiment_command_line_or_paper():
    engine = sorted((ROOT / "runs").rglob("*.py"))
    assert len(engine) > 10
    imported = {module for path in engine for _, module in _imports(path)}
    assert imported  # the engine's modules import one another
    assert {_part(m) for m in imported} <= {"runs", "json_types", "paths", "program", "options"}


def test_the_check_finds_an_upward_import(tmp_path, monkeypatch):
    # The same walk over a copy of runs/ with one upward import added: it is found.
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "jobs.py").write_text(
        "def f():\n    from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS\n")
    (tmp_path / "cli.py").write_text("from avalanche_gss.reproduce import runs\n")
    assert _upward() == ["runs/jobs.py:2 imports avalanche_gss.reproduce.experiments.protocols"]
