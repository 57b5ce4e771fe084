"""Sphinx configuration of the API reference (``make docs``: HTML in docs/api/_build).

The pages document the installed or checked-out ``avalanche_gss`` with autodoc, importing
it for real (torch, Avalanche and the rest are dependencies of the package). The
docstrings use reST field lists (``:param x:``, ``:return:``), which autodoc renders as
they are: no napoleon extension is needed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT))  # the checkout's package, even where another one is installed

import avalanche_gss  # noqa: E402

project = "avalanche-gss"
author = "the avalanche-gss authors"
copyright = "2026, the avalanche-gss authors"
release = avalanche_gss.__version__
version = release

extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]
exclude_patterns = ["_build"]
html_theme = "alabaster"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
# Cross-references to torch, Avalanche or private names need not resolve.
nitpicky = False


def readme_examples() -> list[str]:
    """The README's two usage examples (the Python blocks of its usage section)."""
    text = README.read_text()
    section = text[text.index("## Use it in your own Avalanche code"):text.index("## Data")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


class ReadmeExample(SphinxDirective):
    """``.. readme-example:: N``: the README's N-th usage example (from 1), as shown there."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        """The example as a Python literal block; the page is rebuilt when README changes."""
        self.env.note_dependency(str(README))
        examples = readme_examples()
        index = int(self.arguments[0])
        if not 1 <= index <= len(examples):
            raise self.error(f"readme-example {index}: README.md has examples 1 to "
                             f"{len(examples)}")
        code = examples[index - 1]
        return [nodes.literal_block(code, code, language="python")]


def setup(app: Any) -> dict[str, Any]:
    """Register ``readme-example``."""
    app.add_directive("readme-example", ReadmeExample)
    return {"parallel_read_safe": True}
