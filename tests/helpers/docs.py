"""Reading the documentation as tests need it: the README and the user guide's pages."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
GUIDE = REPO / "docs" / "api" / "guide"
"""The user guide's reStructuredText pages (built with the API reference by ``make docs``)."""


def guide_page(name: str) -> str:
    """The text of the guide's page ``name`` (``"library"``: ``docs/api/guide/library.rst``)."""
    return (GUIDE / f"{name}.rst").read_text()


def rst_section(text: str, title: str) -> str:
    """The section of reStructuredText ``text`` titled ``title``, up to the next title of
    any level (a line underlined with ``=``, ``-``, ``~`` or ``^``)."""
    match = re.search(rf"^{re.escape(title)}\n[-=~^]{{{len(title)}}}\n", text, re.M)
    assert match, f"no section {title!r}"
    rest = text[match.end():]
    following = re.search(r"^\S.*\n[-=~^]{3,}\n", rest, re.M)
    return rest[:following.start()] if following else rest


def rst_code_blocks(text: str, language: str) -> list[str]:
    """The ``.. code-block:: language`` blocks of reStructuredText ``text``, dedented."""
    blocks, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        match = re.match(rf"^(\s*)\.\. code-block:: {re.escape(language)}\s*$", line)
        if not match:
            continue
        indent, body = len(match.group(1)), []
        following = iter(lines[i + 1:])
        for option in following:  # the directive's options, up to the blank line
            if not option.strip():
                break
        for line_after in following:
            if line_after.strip() and len(line_after) - len(line_after.lstrip()) <= indent:
                break
            body.append(line_after)
        blocks.append(textwrap.dedent("\n".join(body)).strip("\n") + "\n")
    return blocks


def markdown_code_blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of Markdown ``text`` in ``language`` (as written)."""
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", text, re.S | re.M)
