"""The top-level names: every method's classes, derived from the method files, and lazy."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.docs import guide_page

import avalanche_gss
from avalanche_gss import methods

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_registered_class_is_a_top_level_name():
    for _, method in methods.REGISTRY.items():
        if method.name not in methods.NAMES:
            continue  # registered by other code (a test's own policy)
        for cls in (method.buffer, method.strategy, method.constrained):
            if cls is not None:
                assert cls.__name__ in avalanche_gss.__all__, (method.name, cls.__name__)
                assert getattr(avalanche_gss, cls.__name__) is cls


def test_ocs_and_gcr_import_from_the_top_level():
    from avalanche_gss import GCR, OCS, GCRBuffer, OCSBuffer

    assert methods.get("OCS").buffer is OCSBuffer and methods.get("OCS").strategy is OCS
    assert methods.get("GCR").buffer is GCRBuffer and methods.get("GCR").strategy is GCR


def test_dir_lists_the_exports_and_no_implementation_detail():
    listed = dir(avalanche_gss)
    assert set(avalanche_gss.__all__) <= set(listed)
    assert not {"Any", "annotations", "importlib", "_EXPORTS"} & set(listed)


@pytest.mark.reads_source
def test_every_class_the_readme_names_in_its_methods_table_imports_from_the_top_level():
    text = README.read_text()
    table = text[text.index("## Methods"):]
    table = table[:table.index("\n\n", table.index("|---"))]
    named = set()
    for line in table.splitlines()[2:]:
        cell = line.rstrip("|").rsplit("|", 1)[-1]
        named |= {n for n in re.findall(r"`([A-Za-z][\w.]*)`", cell)
                  if not n.startswith("avalanche.")}
    assert {"OCSBuffer", "GCR", "CBGSSBuffer"} <= named  # the table was read
    missing = sorted(n for n in named if not hasattr(avalanche_gss, n))
    assert not missing, f"the README's methods table names {missing}, not importable"


def test_importing_the_package_imports_neither_torch_nor_avalanche():
    code = ("import sys, avalanche_gss; dir(avalanche_gss); "
            "print(sorted(m for m in ('torch', 'avalanche') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(README.parent.parent))
    assert out.stdout.strip() == "[]"


@pytest.mark.reads_source
def test_the_guides_list_of_ready_strategies_names_every_methods_strategy():
    text = " ".join(guide_page("library").split())
    listed = text[text.index("the ready strategies ("):].split(")", 1)[0]
    names = set(re.findall(r"`(\w+)`", listed))
    strategies = {cls.__name__ for _, m in methods.REGISTRY.items() if m.name in methods.NAMES
                  for cls in (m.strategy, m.constrained) if cls is not None}
    assert strategies - names == set()
