"""The usage examples of the README and the user guide run as shown (on a slice of the
offline digits, for time), and the guide's layout names every module."""

from __future__ import annotations

import dataclasses
import re

import pytest
from helpers.docs import (
    GUIDE,
    README,
    guide_page,
    markdown_code_blocks,
    rst_code_blocks,
    rst_section,
)

import avalanche_gss.streams as benchmarks

LIBRARY = GUIDE / "library.rst"


def _readme_examples() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Use it in your own Avalanche code"):text.index("## Methods")]
    return markdown_code_blocks(section, "python")


def _guide_examples() -> list[str]:
    """The Python examples of the guide's "Using the library" page."""
    return rst_code_blocks(LIBRARY.read_text(), "python")


def test_the_readme_and_the_guide_have_their_examples():
    readme = _readme_examples()
    assert len(readme) == 2
    # GSS as a storage policy in a stock Avalanche strategy
    assert "ReplayPlugin(" in readme[0] and "split_online_stream(" in readme[0]
    # a policy of one's own, checked and registered
    assert "(OnlineBuffer):" in readme[1] and "check_policy(" in readme[1]
    assert "register(Method(" in readme[1]
    guide = _guide_examples()
    assert len(guide) == 2
    # a which-buffer policy (CBRS+OC+LA) in stock Avalanche: Naive, its buffer, retrieval
    # and loss
    assert "Naive(" in guide[0] and "split_online_stream(" in guide[0]
    assert 'retrieval="other-classes"' in guide[0] and "criterion=LogitAdjustedLoss(" in \
        guide[0]
    # the paper's online rehearsal: a ready strategy on this library's online benchmark
    assert "GSSGreedy(" in guide[1] and "online_benchmark(" in guide[1]


def _run_example(code: str, where: str, monkeypatch) -> None:
    real = benchmarks.load_dataset

    def small(*args, **kwargs):
        data = real(*args, **kwargs)
        return dataclasses.replace(data, x_train=data.x_train[::3], y_train=data.y_train[::3],
                                   x_test=data.x_test[::4], y_test=data.y_test[::4])

    monkeypatch.setattr(benchmarks, "load_dataset", small)
    if "samples_per_task=800" in code:  # a third of the digits: 260 per task of 2 classes
        code = code.replace("samples_per_task=800", "samples_per_task=250")
        assert "samples_per_task=250" in code
    exec(compile(code, where, "exec"), {"__name__": "readme"})


def test_the_readmes_avalanche_example_runs(monkeypatch, capsys):
    _run_example(_readme_examples()[0], str(README), monkeypatch)
    assert "Top1_Acc_Stream/eval_phase/test_stream" in capsys.readouterr().out


@pytest.mark.parametrize("index", [0, 1])
def test_the_guides_example_runs(index, monkeypatch, capsys):
    _run_example(_guide_examples()[index], str(LIBRARY), monkeypatch)
    assert "Top1_Acc_Stream/eval_phase/test_stream" in capsys.readouterr().out


def _run_own_policy(code: str, monkeypatch) -> list:
    """Run the README's own-policy file; return the methods it registers (kept out of the
    registry, so that no other test sees them)."""
    from avalanche_gss import methods

    registered: list = []
    monkeypatch.setattr(methods, "register", registered.append)
    exec(compile(code, str(README), "exec"), {"__name__": "overwrite"})
    return registered


def test_the_readmes_own_policy_passes_check_policy_and_registers_itself(monkeypatch, capsys):
    (method,) = _run_own_policy(_readme_examples()[1], monkeypatch)
    assert (method.name, method.buffer.__name__, method.strategy.__name__) == (
        "Overwrite", "OverwriteBuffer", "Overwrite")
    assert capsys.readouterr().out == "Overwrite keeps every invariant of check_policy\n"


def test_check_policy_fails_the_readmes_policy_once_broken(monkeypatch):
    # What the README says check_policy does: the same file with a policy that leaves
    # holes (every other free slot) fails, naming the invariant it breaks
    code = _readme_examples()[1].replace("torch.arange(self.size, self.max_size)",
                                         "torch.arange(self.size, 2 * self.max_size, 2)")
    assert code != _readme_examples()[1]
    with pytest.raises(AssertionError, match="^slots: "):
        _run_own_policy(code, monkeypatch)


@pytest.mark.reads_source
def test_the_layout_section_names_every_module():
    # Every top-level module and package of avalanche_gss, and every file of the method
    # packages (buffers/, methods/, training/), appears in the guide's layout section.
    layout = rst_section(guide_page("architecture"), "Where each module lives")
    package = README.parent / "avalanche_gss"
    missing = []
    top = sorted(package.glob("*.py"))
    inner = [p for d in ("buffers", "methods", "training")
             for p in sorted((package / d).glob("*.py"))]
    for path in top + inner:
        name = path.stem
        if name == "__init__":
            continue
        if not re.search(rf"\b{re.escape(name)}(\.py)?\b", layout):
            missing.append(str(path.relative_to(package)))
    for folder in sorted(p for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if f"{folder.name}/" not in layout:
            missing.append(folder.name + "/")
    assert not missing, missing
