"""Every link of the README resolves: its files exist in the repository and its anchors
name headings of their pages (read as GitHub reads them; no network)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docutils.nodes import make_id
from helpers.docs import README

pytestmark = pytest.mark.reads_source

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
"""A Markdown inline link (not an image): ``[text](target "title")``."""


def _prose(text: str) -> str:
    """Markdown ``text`` without its fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`]*`", "", text)


def markdown_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown page's headings (repeats get ``-1``, ``-2``...)."""
    anchors: set[str] = set()
    for line in _prose(text).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def rst_anchors(text: str) -> set[str]:
    """The ids of a reStructuredText page's section titles and explicit targets."""
    lines = text.splitlines()
    anchors = set()
    for title, underline in zip(lines, lines[1:], strict=False):
        if (title.strip() and re.fullmatch(r"([=\-~^\"'`#*+<>])\1{2,}", underline)
                and len(underline) >= len(title.rstrip())):
            anchors.add(make_id(title.strip()))
    anchors |= {make_id(name) for name in re.findall(r"^\.\. _([^:]+):\s*$", text, re.M)}
    return anchors


def broken_links(page: Path, root: Path) -> list[str]:
    """``target: why`` for each link of Markdown ``page`` that does not resolve in ``root``."""
    text = page.read_text()
    broken = []
    for target in LINK.findall(_prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not followed here
            if not target.startswith(("https://", "http://", "mailto:")):
                broken.append(f"{target}: unknown scheme")
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if root.resolve() not in (file, *file.parents):
            broken.append(f"{target}: outside the repository")
            continue
        if not file.exists():
            broken.append(f"{target}: no such file")
            continue
        if not anchor:
            continue
        if file.is_dir():
            broken.append(f"{target}: an anchor in a folder")
            continue
        if file.suffix == ".md":
            anchors = markdown_anchors(file.read_text())
        elif file.suffix == ".rst":
            anchors = rst_anchors(file.read_text())
        else:
            broken.append(f"{target}: an anchor in a file that has no headings")
            continue
        if anchor not in anchors:
            broken.append(f"{target}: no heading with anchor #{anchor}")
    return broken


def test_every_link_of_the_readme_resolves():
    links = LINK.findall(_prose(README.read_text()))
    assert len(links) >= 10 and any("#" in link for link in links)  # the links were read
    assert broken_links(README, README.parent) == []


def test_a_broken_link_or_anchor_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.rst").write_text("Guide\n=====\n\nInstalling it\n-------------\n")
    (tmp_path / "NOTES.md").write_text("# Notes\n\n## Which one? (2026)\n\n## Which one? (2026)\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n## Use it\n\n"
        "[ok](docs/guide.rst#installing-it) [ok](NOTES.md#which-one-2026-1) [ok](#use-it) "
        "[ok](https://example.org) ![image, not a link](missing.png) `[code](missing.md)`\n"
        "[bad](docs/missing.rst) [bad](docs/guide.rst#installing) [bad](NOTES.md#notes-1) "
        "[bad](#title-1) [bad](../outside.md) [bad](ftp://example.org)\n")
    assert broken_links(page, tmp_path) == [
        "docs/missing.rst: no such file",
        "docs/guide.rst#installing: no heading with anchor #installing",
        "NOTES.md#notes-1: no heading with anchor #notes-1",
        "#title-1: no heading with anchor #title-1",
        "../outside.md: outside the repository",
        "ftp://example.org: unknown scheme",
    ]
