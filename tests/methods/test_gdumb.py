"""GDumb's greedy class-balanced sampler (Prabhu, Torr and Dokania, ECCV 2020), seeded."""

import copy
import math

import pytest
import torch
from helpers import image_batches, trained_strategy

from avalanche_gss.methods.gdumb import GDumb, GDumbBuffer
from avalanche_gss.selection.gdumb import gdumb_slots


class Sampler:
    """The labels in a memory driven by :func:`gdumb_slots`, one call per batch."""

    def __init__(self, capacity, seed=0):
        self.capacity = capacity
        self.g = torch.Generator().manual_seed(seed)
        self.labels: list[int] = []
        self.seen = torch.zeros(0, dtype=torch.long)

    def offer(self, labels):
        d = gdumb_slots(torch.tensor(self.labels, dtype=torch.long),
                        torch.tensor(labels, dtype=torch.long), self.capacity, self.seen,
                        generator=self.g)
        slots = d.slots.tolist()
        grown = max([len(self.labels) - 1, *slots]) + 1
        self.labels += [-1] * (grown - len(self.labels))
        for label, slot in zip(labels, slots, strict=True):
            if slot >= 0:
                self.labels[slot] = label
        assert -1 not in self.labels  # filled contiguously
        self.seen = d.seen
        return slots

    def counts(self, n_classes):
        return torch.bincount(torch.tensor(self.labels, dtype=torch.long), minlength=n_classes)


def test_the_sampler_step_by_step():
    s = Sampler(10)
    # one class seen: its share is the whole memory
    assert s.offer([0] * 10) == list(range(10))
    # a second class: share 10/2 = 5; 5 samples of class 1 are stored, each in the place
    # of a class-0 instance (memory full); the sixth is not (5 >= 5)
    slots = s.offer([1] * 6)
    assert slots[5] == -1 and all(0 <= slot < 10 for slot in slots[:5])
    assert s.counts(2).tolist() == [5, 5]
    # a third class: share 10/3; stored while it holds 0, 1, 2, 3 (< 3.33), so 4 samples,
    # each taking an instance of the class with the most samples
    s.offer([2] * 6)
    assert s.counts(3).tolist() == [3, 3, 4]
    # a class at its share is refused (4 >= 3.33); one below it (3 < 3.33) takes an
    # instance of the class with the most samples
    assert s.offer([2]) == [-1]
    s.offer([1])
    assert s.counts(3).tolist() == [3, 4, 3]
    s.offer([0])
    assert s.counts(3).tolist() == [4, 3, 3]
    assert s.seen.tolist() == [11, 7, 7]


def test_a_class_at_its_share_is_refused_even_with_free_slots():
    s = Sampler(10)
    s.offer([0] * 4 + [1])  # two classes: share 5
    assert s.offer([0, 0, 0]) == [5, -1, -1]  # class 0 stops at 5; 4 slots stay free
    assert s.counts(2).tolist() == [5, 1] and len(s.labels) == 6


def _stream(kind, n, n_classes, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "disjoint":  # class-incremental: 2 classes at a time, shuffled within
        per = n // n_classes
        labels = []
        for k in range(0, n_classes, 2):
            task = torch.tensor([k, k + 1]).repeat_interleave(per)
            labels += task[torch.randperm(len(task), generator=g)].tolist()
        return labels
    if kind == "imbalanced":  # class weights 1, 2, 4, ... in runs
        weights = 2.0 ** torch.arange(n_classes, dtype=torch.float64)
        labels = []
        while len(labels) < n:
            c = int(torch.multinomial(weights, 1, generator=g))
            labels += [c] * int(torch.randint(1, 8, (1,), generator=g))
        return labels[:n]
    return torch.randint(0, n_classes, (n,), generator=g).tolist()  # iid


@pytest.mark.parametrize("kind", ["disjoint", "imbalanced", "iid"])
@pytest.mark.parametrize("capacity", [7, 30])
def test_every_step_follows_the_rule(kind, capacity):
    n_classes = 6
    labels = _stream(kind, 360, n_classes, seed=capacity)
    s = Sampler(capacity, seed=1)
    seen = torch.zeros(n_classes, dtype=torch.long)
    for c in labels:  # one sample at a time: the rule's own steps
        before = s.counts(n_classes)
        seen[c] += 1
        n_seen_classes = int((seen > 0).sum())
        share = capacity / n_seen_classes
        slot = s.offer([c])[0]
        counts = s.counts(n_classes)
        assert s.seen.tolist() == seen[: len(s.seen)].tolist()  # up to the largest label
        # stored exactly when the class holds fewer than k / |Y_t| samples
        assert (slot >= 0) == (int(before[c]) < share)
        if slot >= 0:
            # never beyond ceil(k / |Y_t|); other classes only lose, and only the largest
            assert int(counts[c]) <= math.ceil(share)
            others = torch.arange(n_classes) != c
            assert bool((counts[others] <= before[others]).all())
            if len(s.labels) == capacity and int(before.sum()) == capacity:
                lost = (before - counts).clamp(min=0)
                assert int(lost.sum()) == 1
                assert int(before[lost.argmax()]) == int(before.max())
        else:
            assert torch.equal(counts, before)
        # a class with fewer samples seen than its share keeps them all
        under = seen < share
        assert torch.equal(counts[under], seen[under])


@pytest.mark.parametrize("kind", ["disjoint", "iid"])
@pytest.mark.parametrize("seed", range(3))
def test_counts_settle_within_one_when_every_class_keeps_arriving(kind, seed):
    # Given streams in which every class, once seen, brings at least its share of samples
    # (class-incremental tasks of 60 per class, or i.i.d. labels), When they end,
    # Then the stored counts of the classes differ by at most one
    n_classes, capacity = 10, 48
    s = Sampler(capacity, seed=seed)
    labels = _stream(kind, 600, n_classes, seed)
    for start in range(0, len(labels), 10):
        s.offer(labels[start : start + 10])
    counts = s.counts(n_classes)
    assert int(counts.sum()) == capacity
    assert int(counts.max()) - int(counts.min()) <= 1, counts


def test_a_class_above_its_share_keeps_the_excess_until_a_smaller_class_claims_it():
    # The rule moves space only to classes below their share: with M = 10, class 0 fills
    # the memory, classes 1 and 2 bring one sample each, class 3 stops at ceil(10/4) = 3.
    s = Sampler(10, seed=0)
    s.offer([0] * 10 + [1, 2] + [3] * 20)
    assert s.counts(4).tolist() == [5, 1, 1, 3]
    # Class 0 and 3 are both at or above their share 2.5: neither gains, whatever comes
    s.offer([0] * 20 + [3] * 20)
    assert s.counts(4).tolist() == [5, 1, 1, 3]
    # Class 1 is below it: its samples take the excess of the largest class
    s.offer([1, 1])
    assert s.counts(4).tolist() == [3, 3, 1, 3]


def _batches(n, seed, n_classes=5):
    return image_batches(torch.tensor(_stream("imbalanced", 10 * n, n_classes, seed)), seed)


def test_the_buffer_follows_the_rule_and_keeps_the_seen_counts_in_its_state():
    buf = GDumbBuffer(30, seed=3)
    s = Sampler(30)
    s.g.set_state(buf.generator.get_state())  # the rule, fed the buffer's own draws
    for x, y in _batches(12, seed=1):
        assert buf.add(x, y).tolist() == s.offer(y.tolist())
    assert buf.stored_labels().tolist() == s.labels
    assert int(buf.class_seen.sum()) == buf.n_seen == 120


def test_state_round_trip_gives_identical_next_decisions():
    a = GDumbBuffer(20, seed=3)
    for x, y in _batches(6, seed=0):
        a.add(x, y)
    a.resize(None, 15)
    b = GDumbBuffer(20, seed=99)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # the state shares a's live tensors
    for x, y in _batches(6, seed=1, n_classes=7):  # two new classes too
        assert torch.equal(a.add(x, y), b.add(x, y))
    assert torch.equal(a.tensors()[0], b.tensors()[0])
    assert torch.equal(a.class_seen, b.class_seen)
    assert torch.equal(a.generator.get_state(), b.generator.get_state())


def test_resize_keeps_the_counts_balanced():
    buf = GDumbBuffer(12, seed=0)
    buf.add(torch.randn(12, 4), torch.arange(3).repeat(4))  # 4, 4, 4
    buf.resize(None, 7)  # the largest lose first: 3, 2, 2 in some order
    assert sorted(buf.class_sizes().tolist()) == [2, 2, 3]
    assert buf.class_seen.tolist() == [4, 4, 4]
    buf.resize(None, 9)  # share 3: each class below it may grow back, the others not
    small = int(buf.class_sizes().argmin())
    assert buf.add(torch.randn(2, 4), torch.tensor([small, small])).tolist() == [7, -1]


def test_the_ready_strategy_learns_with_the_buffer(tiny_split):
    buf = trained_strategy(GDumb, tiny_split).storage_policy
    assert type(buf) is GDumbBuffer and len(buf) == 40
    counts = buf.class_sizes()
    seen = buf.class_seen > 0
    assert int(counts[seen].max()) - int(counts[seen].min()) <= 1
