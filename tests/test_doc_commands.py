"""Every command and every Python block of the README and the user guide runs here, or is
listed with why it does not (and where it runs instead).

A command is a line of a ``bash``, ``sh`` or ``console`` block (``$`` prompts and comments
stripped, ``\\`` continuations joined); :data:`COMMANDS` holds each one as written, with
what this test does with it:

- :class:`Run`: runs it, as ``python -m avalanche_gss.reproduce`` (the ``avalanche-gss``
  command's module), forked warm in a temporary folder that holds the repository's
  ``examples/``, the README's ``overwrite.py`` and a small blob data set, with the
  arguments ``extra`` appended: the per-command reduction to seconds (the data, fewer
  policies, methods, seeds or samples; argparse takes the last value of an option);
- :class:`Slurm`: the same, on a SLURM cluster, by the test marked ``slurm`` (skipped, with
  the reason, where none answers: ``make slurm-up`` starts one);
- :class:`NotHere`: why not here, and what checks it instead.

Python blocks are listed in :data:`PYTHON`, by page and position, with the test that runs
them. ``text`` and ``toml`` blocks are neither commands nor code to run. A new command or
block fails :func:`test_every_command_and_block_is_run_or_listed` until it is listed.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.cli import cli, toy_npz
from helpers.docs import GUIDE, README, REPO, markdown_code_blocks, rst_code_blocks

SHELLS = ("bash", "sh", "console")


@dataclass(frozen=True)
class Run:
    """Run here, with ``extra`` appended (the reduction)."""

    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class Slurm:
    """Run on a SLURM cluster (the ``slurm`` test), with ``extra`` appended."""

    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class NotHere:
    """Not run here: why, and what checks it instead."""

    why: str


TOY = ("--data", "toy.npz")  # 10 classes of 40 training blobs: seconds a run
ONE_POLICY = ("--quick", "--policies", "Reservoir", "--streams", "disjoint", *TOY)

COMMANDS: dict[str, Run | Slurm | NotHere] = {
    "pip install .": NotHere(
        "installs into the environment that runs the tests; make wheel-check (.ci/run) "
        "installs the wheel into a fresh venv and runs it from outside the checkout"),
    "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu": NotHere(
        "downloads torch (network, minutes); tests/test_install_hints.py checks the Makefile's "
        "route to the same index and the torchvision rule"),
    "pip install avalanche-gss[cluster]": NotHere(
        "installs from PyPI (network); the cluster extra is installed in .venv by make"),
    "make reproduce": NotHere(
        "creates .venv and installs (network, minutes); the command it runs is "
        "table1 --quick, run below"),
    "make test": NotHere("the whole suite, this test included (the lead's make test)"),
    "make reproduce TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu": NotHere(
        "downloads torch (network); tests/test_install_hints.py checks what make would run"),
    "avalanche-gss data fetch mnist cifar10": NotHere(
        "downloads MNIST and CIFAR-10 (network); the data command's own tests run it offline"),
    "avalanche-gss table1 --data mnist": NotHere(
        "reads the full MNIST that the line before fetches (network); table1 runs below"),
    "avalanche-gss which-buffer --streams cifar10-disjoint cifar10-blurry --data cifar10 "
    "--root DIR [--download]": NotHere(
        "needs CIFAR-10 (network, or a copy as DIR); tests/reproduce/test_which_buffer_cifar.py "
        "runs these streams on the stand-in"),
    # the experiments, each reduced to a few runs on the blobs
    "avalanche-gss table1 --quick": Run(("--methods", "Reservoir", *TOY)),
    "python -m avalanche_gss.reproduce table1 --quick": Run(("--methods", "Reservoir", *TOY)),
    "avalanche-gss table1": Run(("--methods", "Reservoir", "--seeds", "0", "--buffer-sizes",
                                 "20", *TOY)),
    "avalanche-gss table2 --quick": Run(("--methods", "Reservoir", *TOY)),
    "avalanche-gss table4": Run(("--quick", "--methods", "Reservoir", *TOY)),
    "avalanche-gss which-buffer --quick": Run(ONE_POLICY),
    "avalanche-gss which-buffer --compute-matched --workers 2": Run((*ONE_POLICY,
                                                                    "--workers", "1")),
    "avalanche-gss which-buffer --compute-matched --replay-batch-size 64 --workers 2": Run(
        (*ONE_POLICY, "--workers", "1")),
    # one's own policy, stream and experiment
    "avalanche-gss table1 --quick --import overwrite.py --methods Overwrite Reservoir": Run(
        (*TOY, "--buffer-sizes", "20")),
    "avalanche-gss table1 --import overwrite.py --methods Overwrite Reservoir": Run(
        ("--quick", *TOY, "--buffer-sizes", "20")),
    "avalanche-gss which-buffer --import overwrite.py --policies Overwrite CBRS": Run(
        ("--quick", "--streams", "disjoint", *TOY)),
    "avalanche-gss which-buffer --import examples/stride_policy.py --policies Stride "
    "Reservoir": Run(("--quick", "--streams", "disjoint", *TOY)),
    "avalanche-gss which-buffer --import examples/stride_policy.py --policies "
    "Stride:stride=3,offset=5 Reservoir --streams disjoint": Run(("--quick", *TOY)),
    "avalanche-gss which-buffer --import examples/gradual_stream.py --streams gradual": Run(
        ("--quick", "--policies", "Reservoir", *TOY)),
    "avalanche-gss which-buffer --import examples/own_protocol_stream.py --streams three-tasks":
        NotHere("the same command, with the file's --quick --policies Reservoir CBRS, runs "
                "from another folder in tests/reproduce/test_examples_protocol_stream.py"),
    "avalanche-gss --import examples/my_experiment.py my-experiment --quick": Run(TOY),
    # on a cluster
    "avalanche-gss which-buffer --quick --launcher submitit --cluster slurm --runs-per-job 4":
        Slurm(ONE_POLICY),
    "avalanche-gss which-buffer --launcher submitit --cluster slurm --runs-per-job 20 "
    "--partition cpu --time 120 --mem 4 --out results": Slurm(
        (*ONE_POLICY, "--partition", "debug")),  # the partition make slurm-up's cluster has
}
"""Each command of the README and the guide, as written: run here (reduced), on a cluster,
or not here and why."""

PYTHON: dict[tuple[str, int], str] = {
    ("README.md", 0): "tests/test_readme.py::test_the_readmes_training_examples_run",
    ("README.md", 1): "tests/test_readme.py::test_the_readmes_training_examples_run",
    ("README.md", 2): "tests/test_readme.py::"
                      "test_the_readmes_own_policy_passes_check_policy_and_registers_itself",
    ("library.rst", 0): "tests/test_readme.py::test_the_guides_example_runs",
    ("extending.rst", 0): "tests/reproduce/test_toy_policy.py::"
                          "test_the_guides_stride_py_is_the_shipped_example",
    ("reliability.rst", 0): "tests/test_doc_commands.py::test_the_checkpoint_fragment_runs",
}
"""Each Python block, by page and position: the test that runs it."""


def _commands(block: str, console: bool) -> list[str]:
    """The commands of a shell block, each as its words joined by single spaces."""
    lines = block.splitlines()
    prompted = console and any(line.startswith("$ ") for line in lines)
    found, current, continued = [], "", False
    for line in lines:
        if prompted and not continued:
            if not line.startswith("$ "):
                continue  # a command's output
            line = line[2:]
        continued = line.rstrip().endswith("\\")
        current += " " + line.rstrip().removesuffix("\\")
        if not continued:
            words = shlex.split(current, comments=True)
            current = ""
            if words:
                found.append(" ".join(words))
    return found


def _pages() -> list[tuple[str, str]]:
    """``(page name, text)`` of the README and of every page of the guide."""
    return [("README.md", README.read_text()),
            *((p.name, p.read_text()) for p in sorted(GUIDE.glob("*.rst")))]


def _blocks(name: str, text: str, language: str) -> list[str]:
    if name.endswith(".md"):
        return markdown_code_blocks(text, language)
    return rst_code_blocks(text, language)


def documented_commands() -> list[str]:
    """Every command of the README and the guide, in page order, each once."""
    found = [command for name, text in _pages() for language in SHELLS
             for block in _blocks(name, text, language)
             for command in _commands(block, language == "console")]
    return list(dict.fromkeys(found))


@pytest.mark.reads_source
def test_every_command_and_block_is_run_or_listed():
    commands = documented_commands()
    assert len(commands) >= 20 and "avalanche-gss which-buffer --quick" in commands  # read
    assert [c for c in commands if c not in COMMANDS] == []
    blocks = {(name, i) for name, text in _pages()
              for i, _ in enumerate(_blocks(name, text, "python"))}
    assert sorted(blocks - set(PYTHON)) == []
    assert sorted(set(PYTHON) - blocks) == []  # no stale entry either
    for test in set(PYTHON.values()):  # each names a test that exists
        path, _, function = test.partition("::")
        assert f"def {function}(" in (REPO / path).read_text(), test
    for entry in COMMANDS.values():
        if isinstance(entry, NotHere):
            assert entry.why.strip(), entry


def test_a_continued_console_command_is_one_command_and_its_output_none():
    block = ("$ avalanche-gss which-buffer --quick \\\n      --out results   # a comment\n"
             "sweep: 4 run(s) in 1 job(s)\n$ make test\n")
    assert _commands(block, console=True) == ["avalanche-gss which-buffer --quick --out "
                                              "results", "make test"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A folder outside the repository, as a user's: examples/, overwrite.py, toy.npz."""
    where = tmp_path_factory.mktemp("user")
    shutil.copytree(REPO / "examples", where / "examples")
    (where / "overwrite.py").write_text(markdown_code_blocks(README.read_text(), "python")[2])
    toy_npz(where / "toy.npz")
    return where


def _arguments(command: str, extra: tuple[str, ...]) -> list[str]:
    words = shlex.split(command)
    if words[0] == "avalanche-gss":
        words = words[1:]
    else:
        assert words[:3] == ["python", "-m", "avalanche_gss.reproduce"], command
        words = words[3:]
    return [*words, *extra]


def _run(folder: Path, command: str, extra: tuple[str, ...]) -> None:
    out = f"out-{abs(hash(command)) % 10**8}"
    res = cli(*_arguments(command, extra), "--out", out, cwd=folder, warm=True, timeout=600)
    assert res.returncode == 0, (command, res.stderr[-3000:])
    written = list((folder / out).glob("*.md"))
    assert written, (command, res.stdout[-2000:])


RUNS = [c for c, entry in COMMANDS.items() if isinstance(entry, Run)]
ON_SLURM = [c for c, entry in COMMANDS.items() if isinstance(entry, Slurm)]


@pytest.mark.slow
@pytest.mark.parametrize("command", RUNS)
def test_the_command_runs(folder, command):
    entry = COMMANDS[command]
    assert isinstance(entry, Run)
    _run(folder, command, entry.extra)


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("command", ON_SLURM)
def test_the_cluster_command_runs_on_slurm(folder, command):
    from avalanche_gss.reproduce.runs import slurm

    problem = slurm._sinfo_problem(timeout=3)
    if problem is not None:
        pytest.skip(f"no SLURM cluster answers ({problem}); make slurm-up starts one")
    entry = COMMANDS[command]
    assert isinstance(entry, Slurm)
    _run(folder, command, entry.extra)


def test_the_checkpoint_fragment_runs(tmp_path, monkeypatch):
    # reliability.rst's fragment continues a script that made a model, an optimizer and a
    # stream: this prelude makes small ones (a fragment, not a whole script)
    (code,) = rst_code_blocks((GUIDE / "reliability.rst").read_text(), "python")
    import torch

    from avalanche_gss import GSSIQP
    from avalanche_gss.models import MLP
    from avalanche_gss.streams import disjoint_tasks, load_dataset, online_benchmark

    monkeypatch.chdir(tmp_path)
    data = load_dataset("mnist-5k")
    model = MLP()
    names = {"GSSIQP": GSSIQP, "model": model,
             "optimizer": torch.optim.SGD(model.parameters(), lr=0.05),
             "bench": online_benchmark(disjoint_tasks(data, samples_per_task=20, seed=0),
                                       batch_size=10)}
    exec(compile(code, "reliability.rst", "exec"), names)
    assert (tmp_path / "runs" / "gss-iqp.ckpt").is_file()
    assert re.search(r"train_resumable\(", code)
