"""The README's usage examples run as shown (on a slice of the offline digits, for time)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import avalanche_gss.streams as benchmarks

README = Path(__file__).resolve().parents[1] / "README.md"


def _examples() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Use it in your own Avalanche code") : text.index("## Data")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_has_its_three_examples():
    blocks = _examples()
    assert len(blocks) == 3
    assert "ReplayPlugin(" in blocks[0] and "split_online_stream(" in blocks[0]
    # a which-buffer policy (CBRS+OC+LA) in stock Avalanche: Naive, its buffer, retrieval
    # and loss
    assert "Naive(" in blocks[1] and "split_online_stream(" in blocks[1]
    assert 'retrieval="other-classes"' in blocks[1] and "criterion=LogitAdjustedLoss(" in \
        blocks[1]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_readme_example_runs(index, monkeypatch, capsys):
    real = benchmarks.load_dataset

    def small(*args, **kwargs):
        data = real(*args, **kwargs)
        return dataclasses.replace(data, x_train=data.x_train[::3], y_train=data.y_train[::3],
                                   x_test=data.x_test[::4], y_test=data.y_test[::4])

    monkeypatch.setattr(benchmarks, "load_dataset", small)
    code = _examples()[index]
    if "samples_per_task=800" in code:  # a third of the digits: 260 per task of 2 classes
        code = code.replace("samples_per_task=800", "samples_per_task=250")
        assert "samples_per_task=250" in code
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "Top1_Acc_Stream/eval_phase/test_stream" in out


@pytest.mark.reads_source
def test_the_layout_section_names_every_module():
    # Every top-level module and package of avalanche_gss, and every file of the method
    # packages (buffers/, methods/, training/), appears in README's Layout section.
    import re

    text = README.read_text()
    layout = text[text.index("## Layout"):text.index("## Reliability")]
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
