"""The usage examples of the README and the user guide run as shown (on a slice of the
offline digits, for time), and the guide's layout names every module."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
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
    assert len(readme) == 3
    # GSS-Greedy as Table 1 runs it: the ready strategy on this library's online benchmark
    assert "GSSGreedy(" in readme[0] and "online_benchmark(" in readme[0]
    # the recommended policy, CBRS+OC+LA, built the same way
    assert "CBRS(" in readme[1] and 'retrieval="other-classes"' in readme[1]
    assert "criterion=LogitAdjustedLoss(" in readme[1]
    # a policy of one's own, checked and registered
    assert "(OnlineBuffer):" in readme[2] and "check_policy(" in readme[2]
    assert "register(Method(" in readme[2] and "register_policy(" in readme[2]
    guide = _guide_examples()
    assert len(guide) == 1
    # a which-buffer policy (CBRS+OC+LA) in stock Avalanche: Naive, its buffer, retrieval
    # and loss
    assert "Naive(" in guide[0] and "split_online_stream(" in guide[0]
    assert 'retrieval="other-classes"' in guide[0] and "criterion=LogitAdjustedLoss(" in \
        guide[0]
    # the paper's online rehearsal: the README's first example, shown by the guide
    assert ".. readme-example:: 1" in LIBRARY.read_text()


@pytest.mark.parametrize("code", [*_readme_examples()[:2], *_guide_examples()])
def test_every_training_example_is_seeded_and_sets_its_threads(code):
    # One run, one number; and the thread count is the script's choice, not torch's
    # default of a thread per core
    assert "torch.manual_seed(0)" in code and "torch.set_num_threads(" in code
    # and none is Avalanche's ReplayPlugin route: not the paper's rehearsal nor its numbers
    assert "ReplayPlugin(" not in code


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
    threads = torch.get_num_threads()
    try:
        exec(compile(code, where, "exec"), {"__name__": "readme"})
    finally:
        torch.set_num_threads(threads)  # the example's own setting, for this process only


@pytest.mark.parametrize("index", [0, 1])
def test_the_readmes_training_examples_run(index, monkeypatch, capsys):
    _run_example(_readme_examples()[index], str(README), monkeypatch)
    out = capsys.readouterr().out
    assert "Top1_Acc_Stream/eval_phase/test_stream" in out
    if index == 1:  # CBRS's class quotas: as many of each digit (a third of the digits)
        assert out.rstrip().endswith("{0: 30, 1: 30, 2: 30, 3: 30, 4: 30, 5: 30, 6: 30, "
                                     "7: 30, 8: 30, 9: 30}")


def test_the_guides_example_runs(monkeypatch, capsys):
    _run_example(_guide_examples()[0], str(LIBRARY), monkeypatch)
    assert "Top1_Acc_Stream/eval_phase/test_stream" in capsys.readouterr().out


def _run_own_policy(code: str, monkeypatch) -> list:
    """Run the README's own-policy file; return the methods and policies it registers
    (kept out of the registries, so that no other test sees them)."""
    from avalanche_gss import methods
    from avalanche_gss.reproduce.experiments import policies

    registered: list = []
    monkeypatch.setattr(methods, "register", registered.append)
    monkeypatch.setattr(policies, "register_policy",
                        lambda label, **keywords: registered.append((label, keywords)))
    exec(compile(code, str(README), "exec"), {"__name__": "overwrite"})
    return registered


def test_the_readmes_own_policy_passes_check_policy_and_registers_itself(monkeypatch, capsys):
    method, policy = _run_own_policy(_readme_examples()[2], monkeypatch)
    assert (method.name, method.buffer.__name__, method.strategy.__name__) == (
        "Overwrite", "OverwriteBuffer", "Overwrite")
    assert policy == ("Overwrite", {"method": "Overwrite"})
    assert capsys.readouterr().out == "Overwrite keeps every invariant of check_policy\n"


def test_check_policy_fails_the_readmes_policy_once_broken(monkeypatch):
    # What the README says check_policy does: the same file with a policy that leaves
    # holes (every other free slot) fails, naming the invariant it breaks
    code = _readme_examples()[2].replace("torch.arange(self.size, self.max_size)",
                                         "torch.arange(self.size, 2 * self.max_size, 2)")
    assert code != _readme_examples()[2]
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
