"""Sphinx configuration of the user guide and API reference (``make docs``: docs/api/_build).

The pages document the installed or checked-out ``avalanche_gss`` with autodoc, importing
it for real (torch, Avalanche and the rest are dependencies of the package). The
docstrings use reST field lists (``:param x:``, ``:return:``), which autodoc renders as
they are: no napoleon extension is needed.
"""

from __future__ import annotations

import argparse
import importlib
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
# Option names stay as typed ("--methods", not an en dash) in generated and written text.
smartquotes = False


def readme_examples() -> list[str]:
    """The README's usage examples (the Python blocks of its usage section)."""
    text = README.read_text()
    section = text[text.index("## Use it in your own Avalanche code"):text.index("## Methods")]
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


def _experiment_summaries() -> dict[str, str]:
    """Each experiment's one-line summary, as ``--help`` lists it."""
    from avalanche_gss.reproduce import cli

    table: Any = getattr(cli, "EXPERIMENTS", {})
    summaries = {}
    for name in list(table):
        entry = table[name]
        summaries[name] = entry if isinstance(entry, str) else str(getattr(entry, "summary", ""))
    return summaries


def _option_term(action: argparse.Action) -> str:
    """An option as a user types it: ``--seeds SEED [SEED ...]``, ``--quick``."""
    names = ", ".join(action.option_strings) or str(action.metavar or action.dest)
    if not action.option_strings or action.nargs == 0:
        return names
    metavar = str(action.metavar or action.dest.upper())
    if action.nargs in ("+", "*"):
        return f"{names} {metavar} [{metavar} ...]"
    return f"{names} {metavar}"


class CliReference(SphinxDirective):
    """``.. cli-reference::``: the experiments and every option of ``avalanche-gss``.

    Rendered from ``avalanche_gss.reproduce.cli.make_parser`` at build time, so the page
    is the ``--help`` of the version it documents, defaults included.
    """

    def _parser_nodes(self, parser: argparse.ArgumentParser) -> list[nodes.Node]:
        formatter = parser._get_formatter()
        usage = formatter._format_usage(parser.usage, parser._actions,
                                        parser._mutually_exclusive_groups, "").strip()
        out: list[nodes.Node] = [nodes.literal_block(usage, usage, language="text")]
        experiments = nodes.definition_list()
        options = nodes.definition_list()
        summaries = _experiment_summaries()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help or "" for a in action._choices_actions}
                for name, sub in action.choices.items():
                    section = nodes.section(ids=[nodes.make_id(f"experiment-{name}")])
                    section += nodes.title(name, name)
                    section += nodes.paragraph(text=helps.get(name) or summaries.get(name, ""))
                    section.extend(self._parser_nodes(sub))
                    out.append(section)
                continue
            if not action.option_strings and action.choices:
                for name in action.choices:
                    item = nodes.definition_list_item()
                    item += nodes.term("", "", nodes.literal(name, name))
                    item += nodes.definition("", nodes.paragraph(
                        text=summaries.get(name, "")))
                    experiments += item
                continue
            item = nodes.definition_list_item()
            term = _option_term(action)
            item += nodes.term("", "", nodes.literal(term, term))
            text = formatter._expand_help(action) if action.help else ""
            item += nodes.definition("", nodes.paragraph(text=" ".join(text.split())))
            options += item
        if len(experiments):
            out += [nodes.rubric(text="Experiments"), experiments]
        if len(options):
            out += [nodes.rubric(text="Options"), options]
        if parser.epilog:
            out.append(nodes.paragraph(text=" ".join(parser.epilog.split())))
        return out

    def run(self) -> list[nodes.Node]:
        """The parser's usage, experiments and options as docutils nodes."""
        from avalanche_gss.reproduce import cli

        self.env.note_dependency(cli.__file__)
        return self._parser_nodes(cli.make_parser("avalanche-gss"))


def source_module(app: Any, modname: str, attribute: str) -> str | None:
    """The module that holds a documented name (the ``viewcode-follow-imported`` event).

    viewcode follows a name to its object's ``__module__``; a generic alias
    (``JsonObject = dict[str, Json]``) reports its origin's, ``builtins``, which has no
    source, and viewcode then lists a ``builtins`` page in its index that it never writes
    (a dead link). Such a name stays with the module that documents it; for any other,
    ``None`` leaves viewcode's own answer.
    """
    try:
        value: Any = importlib.import_module(modname)
        for part in attribute.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError):
        return None
    return modname if getattr(value, "__module__", None) in sys.builtin_module_names else None


def setup(app: Any) -> dict[str, Any]:
    """Register ``readme-example``, ``cli-reference`` and :func:`source_module`."""
    app.add_directive("readme-example", ReadmeExample)
    app.add_directive("cli-reference", CliReference)
    app.connect("viewcode-follow-imported", source_module)
    return {"parallel_read_safe": True}
