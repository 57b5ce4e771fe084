"""A machine without a GPU gets a CPU torch the way the README says: ``make reproduce
TORCH_INDEX_URL=...`` installs .venv's torch and torchvision from that index first, and
the torchvision that matches an installed torch is named by the rule the README gives."""

import re
import shutil
import subprocess

import pytest
from helpers.docs import README, REPO, markdown_code_blocks

pytestmark = pytest.mark.reads_source

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _dry_run(tmp_path, *assignments):
    """The commands ``make reproduce`` would run for a .venv in ``tmp_path`` (none made)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    res = subprocess.run(["make", "-n", "-C", str(REPO), "reproduce",
                          f"VENV={tmp_path / '.venv'}", *assignments],
                         capture_output=True, text=True, timeout=60, check=True)
    return [line for line in res.stdout.splitlines() if " -m pip install" in line]


def test_make_installs_torch_from_the_index_it_is_given_before_the_package(tmp_path):
    installs = _dry_run(tmp_path, f"TORCH_INDEX_URL={CPU_INDEX}")
    first = [i for i, line in enumerate(installs) if "--index-url" in line]
    assert len(first) == 1, installs
    assert installs[first[0]].endswith(f"--index-url {CPU_INDEX} torch torchvision")
    assert '-e ".[dev,cluster]"' in installs[first[0] + 1]  # then the package: pip keeps them
    # By default PyPI, the same as before: no index named
    assert not [line for line in _dry_run(tmp_path) if "--index-url" in line]


def test_the_readme_says_how_to_apply_it_to_the_venv_and_to_pip():
    commands = "".join(markdown_code_blocks(README.read_text(), "bash"))
    assert f"make reproduce TORCH_INDEX_URL={CPU_INDEX}" in commands
    assert f"pip install torch torchvision --index-url {CPU_INDEX}" in commands
    text = " ".join(README.read_text().split())
    assert "torchvision 0.N goes with torch 2.N-15" in text
    assert 'for torch 2.13, `pip install avalanche_gss-*.whl "torchvision==0.28.*"`' in text


def test_the_torchvision_rule_holds_for_the_installed_pair():
    import torch
    import torchvision

    torch_minor = int(re.match(r"2\.(\d+)", torch.__version__).group(1))
    vision_minor = int(re.match(r"0\.(\d+)", torchvision.__version__).group(1))
    assert vision_minor == torch_minor + 15, (torch.__version__, torchvision.__version__)


def test_no_requirement_pins_a_url_or_a_build_variant():
    text = (REPO / "pyproject.toml").read_text()
    dependencies = text[text.index("dependencies = ["):text.index("[project.scripts]")]
    assert "://" not in dependencies and not re.search(r"\+(cpu|cu\d+|rocm)", dependencies)
