"""No import cycles inside avalanche_gss (its reproduce/ CLI included), read with ``ast``.

What counts as an import of module ``b`` by module ``a``: every ``import`` statement of
``a``'s source that names ``b``, wherever it stands: at module level, under ``if
TYPE_CHECKING:`` (a cycle mypy and every reader still follow) and inside functions. A lazy
in-function import counts too: it hides a cycle from the interpreter at import time, not
from the design, and two modules that import each other, however late, cannot be read,
tested or moved apart. ``from p import x`` imports ``p.x`` where that is a module, else
``p`` itself; importing a submodule is not counted as importing its parent package's
``__init__`` (Python runs it first, but a package that re-exports its modules would
otherwise be in a cycle with each of them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import avalanche_gss

PACKAGE = Path(avalanche_gss.__file__).resolve().parent


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package at ``root``."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (see the module docstring for what counts)."""
    modules = module_files(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # import a.b.c where c is a name
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def _shortest_path(graph: dict[str, set[str]], start: str, goal: str) -> list[str]:
    paths, seen = [[start]], {start}
    while paths:
        nxt = []
        for path in paths:
            for m in sorted(graph[path[-1]]):
                if m == goal:
                    return [*path, m]
                if m not in seen:
                    seen.add(m)
                    nxt.append([*path, m])
        paths = nxt
    return []


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """One shortest cycle through each import edge that lies on a cycle, as ``a -> b -> a``.

    Each cycle is written from its alphabetically first module, once.
    """
    found = set()
    for a in sorted(graph):
        for b in sorted(graph[a]):
            back = _shortest_path(graph, b, a)
            if back:
                ring = [a, *back[:-1]]
                i = ring.index(min(ring))
                ring = ring[i:] + ring[:i]
                found.add(" -> ".join([*ring, ring[0]]))
    return sorted(found, key=lambda c: (len(c.split(" -> ")), c))


def test_the_graph_and_its_cycles_are_read_from_the_source(tmp_path):
    # Given a package whose modules import each other at module level, under TYPE_CHECKING,
    # inside a function and relatively, plus a package that re-exports its module
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n")
    (pkg / "c.py").write_text("def f():\n    from . import a\n")
    (pkg / "d.py").write_text("import pkg.sub.e\nimport os\n")
    (pkg / "sub" / "__init__.py").write_text("from .e import E\n")
    (pkg / "sub" / "e.py").write_text("from pkg.sub import helper\nE = 1\n")
    (pkg / "sub" / "helper.py").write_text("from ..d import x\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.a"} and graph["pkg.sub"] == {"pkg.sub.e"}
    # Then each cycle is named, from its first module; the re-export is none
    assert cycles(graph) == ["pkg.a -> pkg.b -> pkg.c -> pkg.a",
                             "pkg.d -> pkg.sub.e -> pkg.sub.helper -> pkg.d"]


@pytest.mark.reads_source
def test_the_package_has_no_import_cycle():
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles:\n" + "\n".join(found)
