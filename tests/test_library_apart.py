"""The library never imports the experiment harness (avalanche_gss.reproduce), read with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "avalanche_gss"
HARNESS = "avalanche_gss.reproduce"


def harness_imports(root: Path) -> list[str]:
    """``file:line module`` for each import of the harness by a module outside it."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "reproduce":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n == HARNESS or n.startswith(HARNESS + ".") for n in names):
                found.append(f"{rel}:{node.lineno} {names[0]}")
    return found


def test_a_harness_import_is_found(tmp_path):
    (tmp_path / "reproduce").mkdir()
    (tmp_path / "reproduce" / "ok.py").write_text("from avalanche_gss.reproduce import cli\n")
    (tmp_path / "lib.py").write_text("import os\nfrom avalanche_gss import reproduce\n")
    (tmp_path / "deep.py").write_text("def f():\n    import avalanche_gss.reproduce.runs\n")
    assert harness_imports(tmp_path) == ["deep.py:2 avalanche_gss.reproduce.runs",
                                         "lib.py:2 avalanche_gss"]


def test_no_library_module_imports_the_harness():
    assert harness_imports(PACKAGE) == []
