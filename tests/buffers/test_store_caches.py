"""What a slot store caches per change (its labels as host ints, whether every sample is
plain) always matches its columns: after writes, moves, resizes, loads, rollbacks and copies."""

import copy
import pickle

import pytest
import torch

from avalanche_gss.buffers.rows import Rows
from avalanche_gss.methods.reservoir import ReservoirBuffer


def _agrees(buf):
    n = len(buf)
    labels = [] if buf.y is None else buf.y[:n].tolist()
    assert buf.store.label_list() == labels
    assert buf.store.all_plain() == bool(buf.store.plain[:n].all())
    assert buf.replays_tensors == buf.store.all_plain()


@pytest.mark.parametrize("seed", [0, 1])
def test_the_cached_labels_and_plainness_follow_every_change(seed):
    g = torch.Generator().manual_seed(seed)
    buf = ReservoirBuffer(12, seed=seed)
    _agrees(buf)
    for step in range(30):
        x, y = torch.randn(5, 3, generator=g), torch.randint(0, 4, (5,), generator=g)
        buf.add(x, y)
        _agrees(buf)
        if step == 10:
            buf.resize(None, 7)  # shrinks: the kept slots move into new columns
            _agrees(buf)
        if step == 15:
            buf.resize(None, 14)
            _agrees(buf)
        if step == 20:
            twin = ReservoirBuffer(14, seed=seed)
            twin.load_state_dict(buf.state_dict())
            _agrees(twin)
            twin.add(x, y)
            _agrees(twin)
        if step == 25:
            for clone in (copy.deepcopy(buf), pickle.loads(pickle.dumps(buf))):
                _agrees(clone)
                clone.add(x, 3 - y)
                _agrees(clone)
            _agrees(buf)


def test_a_sample_that_is_not_plain_is_seen_and_a_rollback_is_not_cached():
    buf = ReservoirBuffer(6, seed=0)
    buf.add(torch.randn(4, 3), torch.tensor([0, 1, 2, 3]))
    assert buf.replays_tensors and buf.store.label_list() == [0, 1, 2, 3]
    rows = Rows(torch.randn(1, 3), torch.tensor([5]), torch.zeros(1, dtype=torch.long),
                torch.full((1,), -1), torch.zeros(1, dtype=torch.long), torch.tensor([False]))
    buf.store.write(rows, torch.tensor([4]), None)  # a sample read through a transform
    buf.store.size = 5
    assert not buf.replays_tensors and buf.store.label_list() == [0, 1, 2, 3, 5]
    before = buf.store.snapshot()
    buf.store.size = 4
    assert buf.store.label_list() == [0, 1, 2, 3] and buf.replays_tensors
    buf.store.restore(before)
    assert buf.store.label_list() == [0, 1, 2, 3, 5] and not buf.replays_tensors
