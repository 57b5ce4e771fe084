"""``examples/stride_policy.py``: a policy of one's own with two options, copied outside the
repository and run by name with both options by the commands its first lines show, in a
table experiment and in which-buffer; and it keeps the buffers' invariants."""

import importlib.util
import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from helpers.cli import cli, toy_npz

from avalanche_gss import methods
from avalanche_gss.reproduce.experiments import policies
from avalanche_gss.testing import check_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stride_policy.py"
TEXT = "Stride:stride=2,offset=1"


def _commands() -> dict[str, list[str]]:
    """The commands of the example's first lines, by experiment (the program left out)."""
    head = EXAMPLE.read_text().split('"""')[1]
    words = [shlex.split(line) for line in head.splitlines()
             if line.strip().startswith("avalanche-gss ")]
    return {w[3]: w[1:] for w in words}


@pytest.fixture
def stride_module():
    """The example imported in this process; its registration undone afterwards."""
    spec = importlib.util.spec_from_file_location("stride_policy_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
        methods._USER.pop("Stride", None)
        if "Stride" in policies.POLICIES:
            policies.POLICIES.remove("Stride")
        if "Stride" in methods.REGISTRY:
            methods.REGISTRY.remove("Stride")


def test_its_first_lines_run_it_in_a_table_and_in_which_buffer():
    commands = _commands()
    assert set(commands) == {"table1", "which-buffer"}
    assert commands["table1"][:2] == ["--import", "stride_policy.py"]
    assert TEXT in commands["table1"] and TEXT in commands["which-buffer"]


def test_the_example_policy_keeps_the_buffers_invariants(stride_module):
    for stride, offset in ((2, 1), (3, 5), (1, 0)):
        check_policy(lambda m, s=stride, o=offset: stride_module.StrideBuffer(
            m, stride=s, offset=o))
    with pytest.raises(ValueError, match="stride >= 1 and offset >= 0, got stride=0"):
        stride_module.StrideBuffer(5, stride=0)


def _run(tmp_path: Path, experiment: str):
    shutil.copy(EXAMPLE, tmp_path / "stride_policy.py")
    data = toy_npz(tmp_path / "toy.npz")
    res = cli(*_commands()[experiment], "--data", data, "--out", "out", cwd=tmp_path,
              warm=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.mark.slow
def test_a_table_runs_it_by_name_with_both_options(tmp_path):
    _run(tmp_path, "table1")
    rows = json.loads((tmp_path / "out" / "table1.json").read_text())["rows"]
    assert [(r["method"], r.get("options")) for r in rows] == [
        ("Stride", "stride=2,offset=1"), ("Reservoir", None)]
    extras = rows[0]["extras"][0]
    assert (extras["stride"], extras["offset"]) == (2, 1)  # both reached its buffer
    assert "| Stride (stride=2,offset=1) |" in (tmp_path / "out" / "table1.md").read_text()
    csv_lines = (tmp_path / "out" / "table1.csv").read_text().splitlines()
    assert csv_lines[1].startswith('Stride,20,"stride=2,offset=1",10,0,')


@pytest.mark.slow
def test_which_buffer_runs_it_by_name_with_both_options(tmp_path):
    _run(tmp_path, "which-buffer")
    rows = json.loads((tmp_path / "out" / "which_buffer.json").read_text())["rows"]
    assert [r["policy"] for r in rows] == [TEXT, "Reservoir"]
    extras = rows[0]["extras"][0]
    assert (extras["stride"], extras["offset"]) == (2, 1)
    assert sum(extras["buffer_task_counts"]) == 20  # full: M = 20 of the kept samples
    assert f"| {TEXT} |" in (tmp_path / "out" / "which_buffer.md").read_text()
