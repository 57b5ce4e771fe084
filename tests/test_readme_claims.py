"""What the README tells a user holds: its commands are the installed ones, its warnings true."""

import re

import pytest
import torch
from helpers.docs import GUIDE, README, rst_code_blocks


def _shell_lines(text):
    """Every line of the README's shell code blocks."""
    lines, fence = [], None  # the open block's language, or None outside blocks
    for line in text.splitlines():
        if line.startswith("```"):
            fence = line.strip("`").strip() if fence is None else None
            continue
        if fence in ("bash", "sh", "console"):
            lines.append(line)
    return lines


@pytest.mark.reads_source
def test_the_readmes_and_the_guides_commands_run_for_a_wheel_user():
    # A wheel user has the avalanche-gss command and python -m avalanche_gss.reproduce; the
    # checkout's python -m reproduce shim is not installed.
    lines = _shell_lines(README.read_text())
    assert any(line.startswith("avalanche-gss which-buffer") for line in lines)
    pages = sorted(GUIDE.glob("*.rst"))
    assert len(pages) >= 5  # the guide was found
    for page in pages:
        lines += [line for language in ("bash", "sh", "console")
                  for block in rst_code_blocks(page.read_text(), language)
                  for line in block.splitlines()]
    assert any(line.startswith("avalanche-gss table1") for line in lines)
    shim = [line for line in lines if re.search(r"python -m reproduce\b", line)]
    assert not shim, shim


@pytest.mark.reads_source
def test_the_readme_says_how_to_avoid_the_cuda_build_of_torch():
    text = " ".join(README.read_text().split())
    assert "install a CPU-only build of PyTorch first" in text


def test_incremental_classifier_fails_on_split_online_stream_as_the_readme_says():
    # An Avalanche 0.6 limitation the README warns of: if Avalanche lifts it, this fails
    # and the README's warning goes.
    from avalanche.benchmarks import class_incremental_benchmark, split_online_stream
    from avalanche.models import IncrementalClassifier
    from avalanche.training import Naive

    from avalanche_gss.streams import tensor_dataset
    from avalanche_gss.training import quiet_evaluator

    x = torch.randn(40, 4)
    y = torch.arange(40) % 4
    bench = class_incremental_benchmark(
        {"train": tensor_dataset(x, y), "test": tensor_dataset(x, y)}, num_experiences=2)
    stream = split_online_stream(bench.train_stream, experience_size=10, seed=0)
    model = IncrementalClassifier(4, 2)
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                     train_mb_size=10, evaluator=quiet_evaluator())
    with pytest.raises(AttributeError, match="classes_in_this_experience"):
        strategy.train(stream)
    text = " ".join((GUIDE / "library.rst").read_text().split())  # the stock-Avalanche route
    assert ("``IncrementalClassifier`` fails on ``split_online_stream``'s experiences "
            "(``AttributeError: 'OnlineCLExperience' object has no attribute "
            "'classes_in_this_experience'``") in text


@pytest.mark.reads_source
@pytest.mark.parametrize("heading", ["## Table 1", "## Which buffer should I use?"])
def test_a_results_table_names_the_machine_kind_it_ran_on(heading):
    # Another CPU kind moves single cells by points: each table says on which it ran
    text = (README.parent / "docs" / "RESULTS.md").read_text()
    section = text[text.index(heading):]
    section = " ".join(section[:section.index("\n## ", 3)].split())
    assert re.search(r"CPU kernels on AVX\w*", section), heading
    assert "2-core VM" in section and "torch 2." in section
