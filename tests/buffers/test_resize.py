"""Every buffer of the registry grows and shrinks mid-stream, full or not, and keeps working.

Each buffer is filled, grown while full, fed several batches, shrunk, fed, grown again and
fed again; after every batch it must keep the storage invariants (at most ``max_size``
samples, filled from slot 0 without holes, each stored sample one of the stream's with its
own label, at most once, the dataset view the stored tensors) and, except for the online
clusterings (which may hold fewer samples than slots by design), fill its free slots.
"""

import inspect

import pytest
import torch
from helpers import C, D
from helpers import small_mlp as mlp

from avalanche_gss.methods import NAMES, get
from avalanche_gss.testing import _check_storage as check_storage

CLUSTERING = ("GSS-Clust", "FSS-Clust")  # the centres of an online clustering: may hold fewer


def build(name, size):
    cls = get(name).buffer
    kw = {"recent_size": 20} if "recent_size" in inspect.signature(cls).parameters else {}
    if name in CLUSTERING:
        kw["growth"] = 1.01  # a slowly raised threshold: the clustering fills its slots
    return cls(size, seed=3, **kw)


class Stream:
    """Batches of 10 samples whose first feature is the sample's position in the stream."""

    def __init__(self):
        self.labels: list[int] = []
        self.g = torch.Generator().manual_seed(7)

    def batch(self, n=10):
        start = len(self.labels)
        x = torch.randn(n, D, generator=self.g)
        x[:, 0] = torch.arange(start, start + n, dtype=torch.float32)
        y = torch.randint(0, C, (n,), generator=self.g)
        self.labels += y.tolist()
        return x, y


def check(buf, stream, slots):
    """The storage invariants, after a batch whose slots are ``slots``."""
    check_storage(buf, stream, slots)
    data = buf.buffer
    assert len(data) == len(buf)
    if len(buf):
        x, y = buf.tensors()
        for i in range(len(buf)):  # the dataset Avalanche replays from is the stored tensors
            assert torch.equal(data[i][0], x[i]) and int(data[i][1]) == int(y[i])


def feed(buf, stream, model, batches):
    for _ in range(batches):
        check(buf, stream, buf.add(*stream.batch(), model))


def full(name, stream, model):
    """A buffer of 8 slots that filled, then saw 3 more batches."""
    buf = build(name, 8)
    for _ in range(12):
        feed(buf, stream, model, 1)
        if len(buf) == 8:
            break
    assert len(buf) == 8, "the buffer did not fill"
    feed(buf, stream, model, 3)
    assert len(buf) == 8
    return buf


@pytest.mark.parametrize("name", NAMES)
def test_a_full_buffer_grows_shrinks_and_grows_again_and_keeps_working(name):
    model = mlp()
    stream = Stream()
    # Given a buffer that filled and then replaced samples
    buf = full(name, stream, model)
    # When it grows and more batches arrive, Then it stays consistent and fills the new slots
    for size, batches in ((16, 6), (5, 3), (12, 6)):
        before = len(buf)
        buf.resize(None, size)
        assert buf.max_size == size and len(buf) == min(before, size)
        feed(buf, stream, model, batches)
        if name not in CLUSTERING:
            assert len(buf) == size
    assert buf.n_seen == len(stream.labels)


@pytest.mark.parametrize("name", NAMES)
def test_a_buffer_saved_just_after_it_grew_goes_on_as_the_original(name):
    # Given a full buffer grown to twice its size, saved before its free slots filled
    model = mlp()
    stream = Stream()
    buf = full(name, stream, model)
    buf.resize(None, 16)
    copy = build(name, 8)
    copy.load_state_dict(buf.state_dict())
    # When both see the same batches, Then they take the same slots and hold the same samples
    assert copy.max_size == 16
    for _ in range(4):
        x, y = stream.batch()
        assert torch.equal(buf.add(x, y, model), copy.add(x, y, model))
        check(copy, stream, copy.last_slots)
    assert torch.equal(buf.tensors()[0], copy.tensors()[0])
