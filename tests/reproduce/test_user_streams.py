"""A stream of one's own is built and checked once before any run of which-buffer: a stream
that no run could train on, or measure, is refused in one line naming the stream, the task
and what is wrong, with no output written, rather than failing in every run with torch's
words (or exiting 0 with untrained models)."""

import pytest
import torch
from helpers.cli import cli, toy_npz

from avalanche_gss.streams import REGISTRY, TaskSplit

HEAD = '''
import dataclasses

import torch

from avalanche_gss.streams import REGISTRY, StreamDefinition, register_stream

BASE = REGISTRY["disjoint"]


def build(data, *, seed, **options):
    split = BASE.build(data, seed=seed, **options)
    train, test = list(split.train), list(split.test)
'''

TAIL = '''

register_stream("mine", StreamDefinition(build, "a probe stream", dict(BASE.options)))
'''

BODIES = {
    "shape": ("    x, y = train[2]\n    train[2] = (x[:, :6], y)\n"
              "    return dataclasses.replace(split, train=tuple(train))"),
    "float64": ("    return dataclasses.replace(split, train=tuple((x.double(), y) for x, y in "
                "train), test=tuple((x.double(), y) for x, y in test))"),
    "uint8": ("    return dataclasses.replace(split, train=tuple(((x * 10).to(torch.uint8), y) "
              "for x, y in train), test=tuple(((x * 10).to(torch.uint8), y) for x, y in test))"),
    "list": "    return train",
    "no_test": ("    x, y = test[1]\n    test[1] = (x[:0], y[:0])\n"
                "    return dataclasses.replace(split, test=tuple(test))"),
    "no_train": ("    return dataclasses.replace(split, train=tuple((x[:0], y[:0]) for x, y in "
                 "train))"),
}

WORDS = {
    "shape": "train task 2: inputs of shape (6,), train task 0's are (12,)",
    "float64": "train task 0: inputs are torch.float64, not torch.float32; convert them "
               "(x.float())",
    "uint8": "train task 0: inputs are torch.uint8, not torch.float32; convert them "
             "(x.float() / 255 if they are 0-255 pixels)",
    "list": "its build_split returned a list, not an avalanche_gss.streams.TaskSplit",
    "no_test": "test task 1 has no samples: its accuracy would count as 0 % in the average",
    "no_train": "no training samples in any of its 5 task(s)",
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(BODIES))
def test_a_stream_no_run_could_use_is_refused_before_any_run_naming_it(tmp_path, kind):
    (tmp_path / "mine.py").write_text(HEAD + BODIES[kind] + TAIL)
    data = toy_npz(tmp_path / "toy.npz")
    res = cli("--import", "mine.py", "which-buffer", "--quick", "--data", data, "--policies",
              "Reservoir", "--streams", "mine", "--out", "out", cwd=tmp_path, warm=True)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("python -m avalanche_gss.reproduce: error: argument --streams: "
                               "stream 'mine' (seed 0): "), lines[0]
    assert WORDS[kind] in lines[0], lines[0]
    assert not (tmp_path / "out").exists()  # no run, no output


def _split(**changes):
    x = torch.rand(8, 3)
    y = torch.tensor([0, 1] * 4)
    parts = {"train": ((x, y), (x, y)), "test": ((x, y), (x, y)),
             "task_classes": ((0, 1), (0, 1)), "num_classes": 2, **changes}
    return TaskSplit(**parts)


def test_a_split_says_what_keeps_a_learner_from_it_in_one_line():
    x = torch.rand(8, 3)
    y = torch.tensor([0, 1] * 4)
    _split().check_learnable()
    _split(train=((x[:0], y[:0]), (x, y))).check_learnable()  # one task without: it runs
    for changes, words in (
            ({"test": ((x, y), (x.reshape(8, 3, 1), y))},
             "test task 1: inputs of shape (3, 1), train task 0's are (3,)"),
            ({"test": ((x, y), (x, y + 1))}, "test task 1: labels 1..2 outside 0..1"),
            ({"train": ((x[:0], y[:0]),) * 2}, "no training samples in any of its 2 task(s)"),
            ({"test": ((x, y), (x[:0], y[:0]))}, "test task 1 has no samples")):
        with pytest.raises(ValueError, match="^" + words.replace("(", r"\(").replace(")", r"\)")
                           .replace(".", r"\.")):
            _split(**changes).check_learnable()


def test_a_build_that_returns_no_split_is_refused_by_the_definition():
    definition = REGISTRY["disjoint"]
    mine = type(definition)(lambda data, seed, **o: [], "returns a list", {})
    with pytest.raises(TypeError, match="^its build_split returned a list, not an "):
        mine.build(object())  # type: ignore[arg-type]
