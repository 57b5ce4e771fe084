"""A refused batch, resize or size leaves every buffer of the registry exactly as it was.

Each buffer is fed a few batches (samples stored, generators advanced, GSS-IQP's and the
clusterings' recent buffers holding waiting samples), then offered a batch it must refuse;
its whole ``state_dict`` (tensors compared exactly, generator states included) must be
the one before the call.
"""

import inspect
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import digits_mlp as mlp
from helpers.cli import subprocess_env
from helpers.warm import run as warm_python
from torch import nn

from avalanche_gss.buffers import OnlineBuffer, columns
from avalanche_gss.buffers.scored import GradientScored
from avalanche_gss.methods import NAMES, get
from avalanche_gss.testing import _copy as copy_state
from avalanche_gss.testing import _difference as state_difference

REPO = Path(__file__).resolve().parents[2]
GRADIENT = (*(name for name in NAMES if issubclass(get(name).buffer, GradientScored)), "CSReL")
"""The buffers that score with the labels: by the model's gradients of their loss (CSReL: by
the learner's loss itself)."""


def build(name, size=12, **kw):
    cls = get(name).buffer
    if "recent_size" in inspect.signature(cls).parameters:
        kw.setdefault("recent_size", 20)
    return cls(size, seed=3, **kw)


def _batch(i, n=10):
    g = torch.Generator().manual_seed(100 + i)
    return torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def fed(name, model, batches=5, **kw):
    """A buffer that saw ``batches`` batches: 2 merges and 10 waiting samples for GSS-IQP/Clust."""
    buf = build(name, **kw)
    for i in range(batches):
        buf.add(*_batch(i), model)
    return buf


def snapshot(value):
    """A deep copy of a state: tensors cloned, containers copied."""
    return copy_state(value)


def assert_same(before, after, path="state"):
    """Exact equality of two states (tensors: dtype, shape, every value, NaN where NaN)."""
    difference = state_difference(before, after, path)
    assert difference is None, difference


def full_state(buf):
    """The state_dict plus what it leaves implicit: the provenance columns and the sizes."""
    state = snapshot(buf.state_dict())
    state["_columns"] = snapshot({"src": buf.store.src, "src_idx": buf.store.src_idx,
                                  "plain": buf.store.plain,
                                  "last_slots": buf.last_slots, "last_scores": buf.last_scores})
    return state


def untimed(state):
    """A state without the seconds GSS-IQP's last selection took (a wall-clock time)."""
    if state.get("last_result") is not None:
        state["last_result"] = {k: v for k, v in state["last_result"].items() if k != "seconds"}
    return state


def bad_batches():
    x, y = _batch(50)
    return {
        "inputs of another shape": (x.flatten(1), y, "do not match the buffer's"),
        "a negative label": (x, torch.tensor([0, 1, -1, 2, 3, 4, 5, 6, 7, 8]), ">= 0"),
        "float labels": (x, y.float(), "integer"),
        "fewer labels than inputs": (x, y[:9], "9 labels"),
        "a label of 2**40": (x, torch.full((10,), 2**40), "labels must be <"),
    }


BAD = bad_batches()


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("name", NAMES)
def test_a_refused_batch_leaves_the_whole_state_unchanged(name, bad):
    # Given a buffer of the registry that has seen five batches
    model = mlp()
    buf = fed(name, model)
    before = full_state(buf)
    x, y, message = BAD[bad]
    # When it is offered a batch it must refuse, Then it raises one line naming the fault
    with pytest.raises(ValueError, match=message) as err:
        buf.add(x, y, model)
    assert "\n" not in str(err.value)
    # And its whole state is exactly the one before the call
    assert_same(before, full_state(buf))


@pytest.mark.parametrize("name", GRADIENT)
def test_a_label_the_model_lacks_is_refused_up_front_with_the_state_unchanged(name):
    # Given a gradient-scored buffer (its scores are the model's cross-entropy on the labels)
    model = mlp()
    buf = fed(name, model)
    before = full_state(buf)
    x, y = _batch(60)
    y[4] = 12
    # When a batch holds a label beyond the model's 10 outputs
    with pytest.raises(ValueError, match="label 12 is outside the model's 10 outputs"):
        buf.add(x, y, model)
    # Then nothing moved: no generator drawn, nothing queued, no counter changed
    assert_same(before, full_state(buf))


class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("name", NAMES)
def test_a_decision_that_fails_midway_leaves_the_whole_state_unchanged(name, monkeypatch):
    # Given a buffer whose next batch triggers a decision (a merge for GSS-IQP/Clust)
    model = mlp()
    buf = fed(name, model)
    before = full_state(buf)
    # When the policy's decision raises after it drew its random numbers and updated its
    # counts (a stand-in for any failure inside: a model that raises, memory, ...)
    method = "_select" if hasattr(buf, "_select") else "_assign"
    original = getattr(buf, method)

    def fails(*args):
        original(*args)
        raise Boom("failed after deciding")

    monkeypatch.setattr(buf, method, fails)
    with pytest.raises(Boom):
        buf.add(*_batch(70), model)
    # Then the state is the one before the call, generators included
    assert_same(before, full_state(buf))
    # And once the fault is gone the buffer goes on as one that never saw the failed call
    monkeypatch.undo()
    twin = fed(name, model)
    for i in range(70, 74):
        assert torch.equal(buf.add(*_batch(i), model), twin.add(*_batch(i), model))
    assert_same(untimed(full_state(twin)), untimed(full_state(buf)))


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("size", [2.7, "3", True, 3.0, None])
@pytest.mark.parametrize("name", NAMES)
def test_sizes_must_be_integers(name, size):
    with pytest.raises(ValueError, match="buffer size must be an integer") as err:
        build(name, size)
    assert "\n" not in str(err.value)
    buf = build(name)
    with pytest.raises(ValueError, match="buffer size must be an integer"):
        buf.resize(None, size)
    assert buf.max_size == 12


@pytest.mark.parametrize("name", ["Reservoir", "GSS-IQP"])
def test_integral_numbers_are_sizes(name):
    buf = build(name, np.int64(7))
    assert buf.max_size == 7 and type(buf.max_size) is int
    buf.resize(None, np.int32(9))
    assert buf.max_size == 9 and type(buf.max_size) is int


@pytest.mark.parametrize("name", ["Reservoir", "GSS-IQP", "CBRS"])
def test_an_absurd_size_is_refused_up_front_with_the_bytes_it_needs(name):
    # 10**12 slots need at least 45 bytes each (labels, scores, provenance): 45 TB
    with pytest.raises(MemoryError, match=r"buffer size 1000000000000 needs [\d,]+ bytes") as err:
        build(name, 10**12)
    assert "\n" not in str(err.value)
    model = mlp()
    buf = fed(name, model, batches=2)
    before = full_state(buf)
    with pytest.raises(MemoryError, match=r"buffer size 1000000000000 needs [\d,]+ bytes"):
        buf.resize(None, 10**12)
    assert_same(before, full_state(buf))
    assert buf.max_size == 12 and len(buf.store.src) == 12


def test_the_check_counts_every_column_against_the_memory_available(monkeypatch):
    # Given 1 MB available and samples of 784 float32 values (3,136 bytes + 45 per slot)
    monkeypatch.setattr(columns, "available_bytes", lambda device: 10**6)
    buf = build("Reservoir", 300)  # 300 x 45 bytes before the first sample: fits
    with pytest.raises(MemoryError, match=r"buffer size 22223 needs 1,000,035 bytes"):
        buf.resize(None, 22223)  # 22,223 x 45 bytes do not
    assert buf.max_size == 300
    # When the first batch arrives, its inputs set the bytes per slot: 300 slots fit...
    buf.add(*_batch(0))
    assert len(buf) == 10
    # ... but growing to 400 slots would need 400 x 3,181 bytes
    before = full_state(buf)
    with pytest.raises(MemoryError, match=r"buffer size 400 needs 1,272,400 bytes"):
        buf.resize(None, 400)
    assert_same(before, full_state(buf))
    # And a buffer whose first batch would not fit refuses it, unchanged
    big = build("Reservoir", 320)
    with pytest.raises(MemoryError, match=r"buffer size 320 needs 1,017,920 bytes"):
        big.add(*_batch(0))
    assert big.x is None and len(big) == 0 and big.n_seen == 0


def test_a_resize_that_fails_while_allocating_changes_nothing(monkeypatch):
    # Given a buffer of 12 samples, and an allocator that fails once 1,000 slots are asked for
    buf = fed("CBRS", mlp(), batches=2)
    before = full_state(buf)
    real_zeros, real_full = torch.zeros, torch.full

    def limited(real):
        def alloc(size, *args, **kwargs):
            n = size[0] if isinstance(size, (tuple, list, torch.Size)) else size
            if n >= 1000 and alloc.calls >= 2:  # the third column of the new size fails
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
            alloc.calls += n >= 1000
            return real(size, *args, **kwargs)
        alloc.calls = 0
        return alloc

    monkeypatch.setattr(torch, "zeros", limited(real_zeros))
    monkeypatch.setattr(torch, "full", limited(real_full))
    # When a resize to 1,000 slots fails half-way, Then it says so in one line
    with pytest.raises(MemoryError, match="the buffer is unchanged") as err:
        buf.resize(None, 1000)
    assert "\n" not in str(err.value)
    monkeypatch.undo()
    # And every column, the size and the generator are those before the call
    assert_same(before, full_state(buf))
    assert buf.max_size == 12 and all(len(getattr(buf.store, c)) == 12
                                      for c in ("x", "y", "t", "scores", "src", "src_idx", "plain"))


_UNDER_A_LIMIT = textwrap.dedent("""
    import resource, torch
    torch.set_num_threads(1)
    from avalanche_gss.methods.reservoir import ReservoirBuffer
    buf = ReservoirBuffer(10)
    buf.add(torch.rand(10, 4), torch.arange(10))
    before = {k: v.clone() for k, v in buf.state_dict().items() if isinstance(v, torch.Tensor)}
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + 200_000_000, resource.RLIM_INFINITY))
    try:
        buf.resize(None, 10**7)  # about 600 MB of columns
    except MemoryError as err:
        print("refused:", err)
    after = buf.state_dict()
    assert buf.max_size == 10 and all(len(getattr(buf.store, c)) == 10 for c in
        ("x", "y", "t", "scores", "src", "src_idx", "plain")), "half-done resize"
    assert all(torch.equal(v, after[k]) for k, v in before.items()), "state changed"
    print("unchanged")
""")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")
def test_a_resize_under_a_memory_limit_is_refused_and_changes_nothing(tmp_path):
    # A process limited to 200 MB more address space asks for 10,000,000 slots
    out = warm_python(["-c", _UNDER_A_LIMIT], tmp_path, subprocess_env(), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "unchanged" and lines[0].startswith("refused: ReservoirBuffer")
    assert "bytes" in lines[0]


# ---------------------------------------------------------------- labels
@pytest.mark.parametrize("name", NAMES)
def test_labels_beyond_the_stated_bound_are_refused_before_any_allocation(name):
    buf = build(name)
    bound = buf.label_bound
    x, _ = _batch(0, 3)
    with pytest.raises(ValueError, match=f"labels must be < {bound}.*got {2**40}") as err:
        buf.add(x, torch.tensor([0, 2**40, 1]))
    assert "\n" not in str(err.value)
    assert len(buf) == 0 and buf.n_seen == 0 and getattr(buf, "n_recent", 0) == 0
    if name not in GRADIENT:  # (those need a model, whose outputs bound the labels)
        buf.add(x, torch.tensor([0, bound - 1, 1]))  # the largest label allowed is stored
        assert buf.n_seen == 3


def test_the_label_bounds_are_those_the_docs_state():
    assert OnlineBuffer.label_bound == 2**31
    for name in ("CBRS", "GDumb", "CB-GSS"):  # per-class counts indexed by label
        assert get(name).buffer.label_bound == 2**20


# ---------------------------------------------------------------- a model with BatchNorm
class BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(784, 16), nn.BatchNorm1d(16),
                                  nn.ReLU())
        self.classifier = nn.Linear(16, 10)

    def forward(self, x):
        return self.classifier(self.body(x))


@pytest.mark.parametrize("name", GRADIENT)
def test_the_up_front_label_check_leaves_a_batchnorm_model_untouched(name):
    torch.manual_seed(0)
    model = BNNet().train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    buf = build(name)
    buf.add(*_batch(0, 1), model)  # one sample: a train-mode BatchNorm could not take it
    assert model.training
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("option, value", [("gate", "nonsense"), ("candidate_draw", "uniform"),
                                           ("memory_grads", "all")])
def test_gss_greedy_refuses_an_unknown_choice_in_one_line(option, value):
    from avalanche_gss.methods.gss_greedy import GSSGreedyBuffer

    with pytest.raises(ValueError, match=f"{option} must be .* got '{value}'"):
        GSSGreedyBuffer(10, **{option: value})
