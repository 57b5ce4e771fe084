"""avalanche_gss.testing.check_policy: every built-in passes; a broken policy is named."""

import inspect

import pytest
import torch

from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.methods import NAMES, get
from avalanche_gss.testing import INVARIANTS, check_policy


def make(name):
    cls = get(name).buffer
    kw = {"recent_size": 20} if "recent_size" in inspect.signature(cls).parameters else {}
    if name in ("GSS-Clust", "FSS-Clust"):
        kw["growth"] = 1.01  # a slowly raised threshold: the clustering fills its slots
    return lambda max_size: cls(max_size, seed=3, **kw)


@pytest.mark.parametrize("name", NAMES)
def test_every_builtin_policy_passes(name):
    check_policy(make(name))


def _fitting(slots, max_size):
    return torch.where(slots < max_size, slots, -1)


class Newest(OnlineBuffer):
    """Fills its free slots, then the newest samples overwrite the first slots: correct."""

    def _assign(self, rows, model):
        n, slots = len(rows), torch.full((len(rows),), -1)
        take = min(n, self.max_size - self.size)
        slots[:take] = torch.arange(self.size, self.size + take)
        k = min(n - take, self.size)
        if k:
            slots[n - k:] = torch.arange(k)
        return slots, None


class Holes(OnlineBuffer):
    """Leaves slot 0 empty."""

    def _assign(self, rows, model):
        return _fitting(torch.arange(len(rows)) + 1, self.max_size), None


class CountsRefusedBatches(OnlineBuffer):
    """Counts every batch offered, before the base class refuses the bad ones."""

    def __init__(self, max_size, **kw):
        super().__init__(max_size, **kw)
        self.offered = 0

    def add(self, x, y, model=None, **kw):
        self.offered += 1  # changes the state even when the batch is then refused
        return super().add(x, y, model, **kw)

    def state_dict(self):
        return {**super().state_dict(), "offered": self.offered}

    def load_state_dict(self, state):
        state = dict(state)
        self.offered = state.pop("offered")
        super().load_state_dict(state)

    def _assign(self, rows, model):
        return _fitting(torch.arange(self.size, self.size + len(rows)), self.max_size), None


def test_a_correct_policy_of_ones_own_passes():
    check_policy(lambda max_size: Newest(max_size))


def test_a_policy_that_leaves_a_hole_fails_naming_the_slots():
    with pytest.raises(AssertionError, match="^slots: RuntimeError: .*hole"):
        check_policy(lambda max_size: Holes(max_size))


def test_a_policy_whose_refused_batch_changes_its_state_fails_naming_it():
    with pytest.raises(AssertionError, match="^refused batch: a batch of inputs of another "
                                             "shape was refused but changed "
                                             "state_dict.offered: \\d+ became \\d+$"):
        check_policy(lambda max_size: CountsRefusedBatches(max_size))


def test_the_invariants_are_named_in_order():
    assert INVARIANTS == ("slots", "refused batch", "resize", "checkpoint", "avalanche")
