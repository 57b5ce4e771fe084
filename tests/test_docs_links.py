"""The built documentation has no dead link of its own making: viewcode's index of source
pages lists only pages it writes (a generic alias such as ``JsonObject = dict[str, Json]``
made it list a ``builtins`` page it never wrote)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from helpers.docs import REPO

CONF = REPO / "docs" / "api" / "conf.py"


@pytest.mark.slow
@pytest.mark.reads_source
def test_viewcode_lists_no_page_it_does_not_write(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mini.py").write_text(textwrap.dedent('''\
        """A module with a class and a generic alias."""

        Alias = dict[str, int]
        """A mapping (its object's ``__module__`` is ``builtins``)."""


        class Thing:
            """A class (its source page is written)."""
        '''))
    doc = tmp_path / "doc"
    doc.mkdir()
    # The project's own Sphinx setup (docs/api/conf.py), on a one-module project
    (doc / "conf.py").write_text(textwrap.dedent(f'''\
        import importlib.util, sys
        sys.path.insert(0, {str(tmp_path / "src")!r})
        spec = importlib.util.spec_from_file_location("project_conf", {str(CONF)!r})
        project_conf = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(project_conf)
        extensions = project_conf.extensions
        setup = project_conf.setup
        '''))
    (doc / "index.rst").write_text("Mini\n====\n\n.. automodule:: mini\n   :members:\n")
    res = subprocess.run([sys.executable, "-m", "sphinx", "-E", "-q", "-b", "html", str(doc),
                          str(tmp_path / "html")], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    modules = tmp_path / "html" / "_modules"
    links = re.findall(r'<li><a href="([^"]+)">', (modules / "index.html").read_text())
    assert "mini.html" in links  # the index was read
    assert [link for link in links if not (modules / link).is_file()] == []
