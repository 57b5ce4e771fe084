"""avalanche_gss.testing.check_policy: every built-in passes; a broken policy is named."""

import collections
import inspect
import random

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


def test_a_correct_policy_of_ones_own_passes(tmp_path):
    generators = (torch.get_rng_state(), random.getstate())
    check_policy(lambda max_size: Newest(max_size), folder=tmp_path)
    # its checkpoint file is removed, and the global generators are as they were
    assert list(tmp_path.iterdir()) == []
    assert torch.equal(generators[0], torch.get_rng_state())
    assert generators[1] == random.getstate()


def test_a_policy_that_leaves_a_hole_fails_naming_the_slots():
    with pytest.raises(AssertionError, match="^slots: RuntimeError: .*hole"):
        check_policy(lambda max_size: Holes(max_size))


def test_a_policy_whose_refused_batch_changes_its_state_fails_naming_it():
    with pytest.raises(AssertionError, match="^refused batch: a batch of inputs of another "
                                             "shape was refused but changed "
                                             "state_dict.offered: \\d+ became \\d+$"):
        check_policy(lambda max_size: CountsRefusedBatches(max_size))


def _newest(buffer, rows):
    return Newest._assign(buffer, rows, None)[0]


class ChangesInputs(OnlineBuffer):
    """Clips the caller's inputs in place (the stored position feature stays right)."""

    def _assign(self, rows, model):
        rows.x[:, 1:] = rows.x[:, 1:].clamp(-1, 1)
        return _newest(self, rows), None


class ChangesLearner(OnlineBuffer):
    """Halves the learner's first weights while it decides."""

    def _assign(self, rows, model):
        with torch.no_grad():
            next(model.parameters()).mul_(0.5)
        return _newest(self, rows), None


class LeavesLearnerInEval(OnlineBuffer):
    """Puts the learner in eval mode to score, and leaves it so."""

    def _assign(self, rows, model):
        model.eval()
        return _newest(self, rows), None


class OneSlotMore(OnlineBuffer):
    """Answers one slot more than samples (a trailing -1)."""

    def _assign(self, rows, model):
        return torch.cat([_newest(self, rows), torch.tensor([-1])]), None


class OneSlotFewer(OnlineBuffer):
    """Answers one slot fewer than samples (the last sample is silently lost)."""

    def _assign(self, rows, model):
        return _newest(self, rows)[:-1], None


class KeepsADeque(OnlineBuffer):
    """Keeps its last batch sizes in a deque, in its state: a file cannot hold it."""

    def __init__(self, max_size, **kw):
        super().__init__(max_size, **kw)
        self.history = collections.deque(maxlen=3)

    def _assign(self, rows, model):
        self.history.append(len(rows))
        return _newest(self, rows), None

    def state_dict(self):
        return {**super().state_dict(), "history": collections.deque(self.history, maxlen=3)}

    def load_state_dict(self, state):
        state = dict(state)
        self.history = collections.deque(state.pop("history"), maxlen=3)
        super().load_state_dict(state)


class SkipsASlotWhilePartlyFull(OnlineBuffer):
    """Right on an empty or a full buffer; fills a partly filled one from one slot too far."""

    def _assign(self, rows, model):
        slots = _newest(self, rows)
        if 0 < self.size < self.max_size:
            slots = torch.where(slots >= self.size, slots + 1, slots)
            slots = torch.where(slots < self.max_size, slots, -1)
        return slots, None


BROKEN = [
    (ChangesInputs, "^untouched: the policy changed the caller's inputs in place$"),
    (ChangesLearner, "^untouched: the policy changed the learner's 0.weight in place$"),
    (LeavesLearnerInEval, "^untouched: the policy left a module of the learner in another "
                          "train/eval mode$"),
    (OneSlotMore, "^slots: RuntimeError: OneSlotMore._assign answered slots of shape \\(2,\\) "
                  "for 1 samples"),
    (OneSlotFewer, "^slots: RuntimeError: OneSlotFewer._assign answered slots of shape "
                   "\\(0,\\) for 1 samples"),
    (KeepsADeque, "^checkpoint file: load_state refused the file save_state wrote "
                  "\\(state_dict.history is a deque, which it cannot read back\\): "),
    (SkipsASlotWhilePartlyFull, "^slots: RuntimeError: .*hole"),
]


@pytest.mark.parametrize("policy, message", BROKEN, ids=[p.__name__ for p, _ in BROKEN])
def test_a_broken_policy_fails_naming_the_invariant_it_breaks(policy, message):
    with pytest.raises(AssertionError, match=message):
        check_policy(lambda max_size: policy(max_size))


def test_a_policy_whose_file_cannot_be_read_leaves_no_file_in_the_folder_given(tmp_path):
    with pytest.raises(AssertionError, match="^checkpoint file: "):
        check_policy(lambda max_size: KeepsADeque(max_size), folder=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("policy", [OneSlotMore, OneSlotFewer])
def test_the_base_class_refuses_another_number_of_slots_than_samples(policy):
    # Given a buffer of a policy that answers one slot more or fewer than samples
    buffer = policy(8)
    # When it is offered a batch, Then it is refused in one line, the buffer as it was
    with pytest.raises(RuntimeError, match=f"^{policy.__name__}._assign answered slots of "
                                           "shape \\([24],\\) for 3 samples \\(one per "
                                           "sample\\)$"):
        buffer.add(torch.arange(3.0).view(3, 1), torch.zeros(3, dtype=torch.long))
    assert len(buffer) == 0 and buffer.n_seen == 0


def test_the_invariants_are_named_in_order():
    assert INVARIANTS == ("slots", "untouched", "refused batch", "resize", "checkpoint",
                          "checkpoint file", "avalanche")
