"""CBRS (Chrysakis and Moens, ICML 2020, Algorithm 1): the paper's claims, seeded."""

import copy

import pytest
import torch
from helpers import image_batches, trained_strategy

from avalanche_gss.methods.cbrs import CBRS, CBRSBuffer
from avalanche_gss.selection.cbrs import cbrs_slots


class Stream:
    """A buffer of stream ids driven by :func:`cbrs_slots` (labels only, as the rule)."""

    def __init__(self, capacity, seed=0):
        self.capacity = capacity
        self.g = torch.Generator().manual_seed(seed)
        self.ids: list[int] = []  # stream position of the sample in each slot
        self.labels: list[int] = []
        self.seen = torch.zeros(0, dtype=torch.long)
        self.full = torch.zeros(0, dtype=torch.bool)
        self.t = 0

    def offer(self, labels):
        d = cbrs_slots(torch.tensor(self.labels, dtype=torch.long),
                       torch.tensor(labels, dtype=torch.long), self.capacity, self.seen,
                       self.full, generator=self.g)
        slots = d.slots.tolist()
        grown = max([len(self.ids) - 1, *slots]) + 1
        self.ids += [-1] * (grown - len(self.ids))
        self.labels += [-1] * (grown - len(self.labels))
        for i, slot in enumerate(slots):
            if slot >= 0:
                self.ids[slot], self.labels[slot] = self.t + i, labels[i]
        assert -1 not in self.ids  # filled contiguously
        self.t += len(labels)
        self.seen, self.full = d.seen, d.full
        return d.slots

    def counts(self, n_classes):
        return torch.bincount(torch.tensor(self.labels, dtype=torch.long), minlength=n_classes)


def _pad(values, n):
    """``values`` (indexed by label, up to the largest label seen) padded to ``n`` classes."""
    return torch.cat([values, torch.zeros(n - len(values), dtype=values.dtype)])


def _imbalanced_labels(n, n_classes, seed):
    """Labels drawn with class weights 1, 2, 4, ... in runs (temporally correlated)."""
    g = torch.Generator().manual_seed(seed)
    weights = 2.0 ** torch.arange(n_classes, dtype=torch.float64)
    labels: list[int] = []
    while len(labels) < n:
        c = int(torch.multinomial(weights, 1, generator=g))
        labels += [c] * int(torch.randint(1, 8, (1,), generator=g))
    return labels[:n]


def test_algorithm_1_step_by_step():
    s = Stream(4, seed=0)
    # memory not filled: every sample is stored; at the fill class 0 is the largest: full
    assert s.offer([0, 0, 0, 1]).tolist() == [0, 1, 2, 3]
    assert s.full.tolist() == [True, False]
    # class 2 is not full: it overwrites an instance of the largest class (0)
    slot = int(s.offer([2])[0])
    assert slot in (0, 1, 2) and s.counts(3).tolist() == [2, 1, 1]
    # class 1 is not full: it takes another instance of class 0 and is now the largest,
    # hence full (class 0 stays full)
    s.offer([1])
    assert s.counts(3).tolist() == [1, 2, 1] and s.full.tolist() == [True, True, False]
    # class 2 (not full) overwrites an instance of the largest class, 1, and becomes full
    s.offer([2])
    assert s.counts(3).tolist() == [1, 1, 2] and s.full.tolist() == [True, True, True]
    # class 0 is full: reservoir within the class, m_0 / n_0 = 1 / 4, never another class
    for _ in range(20):
        s.offer([0])
        assert s.counts(3).tolist() == [1, 1, 2]
    assert s.seen.tolist() == [23, 2, 2]


def test_ties_among_the_largest_classes_draw_over_all_their_instances():
    # Given two classes tied for largest (2 + 2 of 4 slots), When a sample of a new class
    # arrives, Then it overwrites each of the 4 instances as often (a tied class at random,
    # then one of its instances)
    hits = torch.zeros(4)
    g = torch.Generator().manual_seed(0)
    runs = 4000
    for _ in range(runs):
        d = cbrs_slots(torch.tensor([0, 1, 0, 1]), torch.tensor([2]), 4,
                       torch.tensor([2, 2]), torch.tensor([True, True]), generator=g)
        hits[int(d.slots[0])] += 1
    # Binomial(4000, 1/4) per slot: 4.15 standard deviations is a two-sided 1e-3 test over
    # the 4 slots together (Bonferroni)
    sd = (0.25 * 0.75 / runs) ** 0.5
    assert torch.all((hits / runs - 0.25).abs() < 4.15 * sd), hits


@pytest.mark.parametrize("seed", range(3))
def test_classes_that_are_not_full_keep_every_sample_and_no_class_exceeds_the_rule(seed):
    n_classes, capacity = 6, 24
    labels = _imbalanced_labels(600, n_classes, seed)
    s = Stream(capacity, seed=seed)
    g = torch.Generator().manual_seed(seed)
    seen = torch.zeros(n_classes, dtype=torch.long)
    top_after_fill = None
    start = 0
    while start < len(labels):
        b = int(torch.randint(1, 11, (1,), generator=g))
        batch = labels[start : start + b]
        start += b
        before = s.counts(n_classes)
        full_before = _pad(s.full, n_classes)
        s.offer(batch)
        seen += torch.bincount(torch.tensor(batch), minlength=n_classes)
        counts = s.counts(n_classes)
        assert torch.equal(_pad(s.seen, n_classes), seen)  # n_c: every sample of c so far
        full = _pad(s.full, n_classes)
        # a class that is not full keeps every sample it has seen (m_c = n_c)
        assert torch.equal(counts[~full], seen[~full]), (counts, seen, full)
        # full classes stay full, and never grow
        assert bool(full[full_before].all())
        assert bool((counts[full_before] <= before[full_before]).all())
        # once the memory is filled, the largest class never grows
        if len(s.ids) == capacity:
            if top_after_fill is not None:
                assert int(counts.max()) <= top_after_fill
            top_after_fill = int(counts.max())
            assert bool(full[counts == counts.max()].all())  # the largest are full
    assert len(s.ids) == capacity and bool(s.full[:n_classes].any())


def test_within_a_full_class_each_seen_sample_is_stored_with_probability_m_c_over_n_c():
    # Given M = 6 filled by class 0 (full from the fill), then 24 more samples of class 0
    # with 2 samples of class 1 among them (never the largest: kept, each taking a slot
    # of class 0), So that at the end m_0 = 4 and n_0 = 30
    stream = [0] * 6 + [0] * 8 + [1] + [0] * 8 + [1] + [0] * 8
    class0 = [t for t, c in enumerate(stream) if c == 0]
    m_c, n_c, runs = 4, len(class0), 4000
    g = torch.Generator().manual_seed(0)
    stored = torch.zeros(len(stream))
    for _ in range(runs):
        s = Stream(6)
        s.g = g  # one generator for all runs: independent draws
        s.offer(stream[:16])
        s.offer(stream[16:])
        assert s.counts(2).tolist() == [m_c, 2]  # m_c is fixed by the labels alone
        stored[s.ids] += 1
    # Then every class-0 sample is stored with probability m_c / n_c = 4/30, and both
    # class-1 samples always: the count of each is Binomial(4000, 4/30); 4.15 standard
    # deviations is a two-sided test at 1e-3 over the 30 samples together (Bonferroni:
    # 1e-3 / 30 each, z = ndtri(1 - 1e-3 / 60) = 4.149)
    p = m_c / n_c
    z = float(torch.special.ndtri(torch.tensor(1 - 1e-3 / (2 * n_c), dtype=torch.float64)))
    tolerance = z * (p * (1 - p) / runs) ** 0.5
    freq = stored[class0] / runs
    assert torch.all((freq - p).abs() < tolerance), (freq, p, tolerance)
    assert stored[[t for t, c in enumerate(stream) if c == 1]].tolist() == [runs, runs]


def _batches(n, seed, n_classes=5):
    return image_batches(torch.tensor(_imbalanced_labels(10 * n, n_classes, seed)), seed)


def test_the_buffer_follows_the_rule_and_keeps_n_c_in_its_state():
    buf = CBRSBuffer(30, seed=3)
    s = Stream(30)
    s.g.set_state(buf.generator.get_state())  # the rule, fed the buffer's own draws
    for x, y in _batches(12, seed=1):
        slots = buf.add(x, y)
        assert torch.equal(slots, s.offer(y.tolist()))  # the same decisions, same draws
    assert buf.stored_labels().tolist() == s.labels
    assert int(buf.class_seen.sum()) == buf.n_seen == 120
    assert torch.equal(buf.class_sizes(), s.counts(len(buf.class_seen)))


def test_state_round_trip_gives_identical_next_decisions():
    a = CBRSBuffer(20, seed=3)
    for x, y in _batches(6, seed=0):
        a.add(x, y)
    a.resize(None, 15)  # a shrink, so that the state is not the one of a plain stream
    b = CBRSBuffer(20, seed=99)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # the state shares a's live tensors
    for x, y in _batches(6, seed=1):
        assert torch.equal(a.add(x, y), b.add(x, y))
    assert torch.equal(a.tensors()[0], b.tensors()[0])
    assert torch.equal(a.class_seen, b.class_seen)
    assert torch.equal(a.full_classes, b.full_classes)
    assert torch.equal(a.generator.get_state(), b.generator.get_state())


def test_resize_shrinks_the_largest_classes_and_keeps_the_counts_consistent():
    buf = CBRSBuffer(10, seed=0)
    y = torch.tensor([0] * 6 + [1] * 3 + [2])
    buf.add(torch.randn(10, 4), y)
    before_seen = buf.class_seen.clone()
    buf.resize(None, 5)  # 6, 3, 1 -> 2, 2, 1: the small class keeps its sample
    assert buf.class_sizes().tolist() == [2, 2, 1]
    assert torch.equal(buf.class_seen, before_seen) and buf.full_classes.tolist()[0]
    buf.resize(None, 8)  # growing: the next samples fill the free slots
    assert buf.add(torch.randn(3, 4), torch.tensor([0, 0, 0])).tolist() == [5, 6, 7]
    assert len(buf) == 8 and buf.class_sizes().tolist() == [5, 2, 1]


def test_the_ready_strategy_learns_with_the_buffer(tiny_split):
    buf = trained_strategy(CBRS, tiny_split).storage_policy
    assert type(buf) is CBRSBuffer and len(buf) == 40
    assert int(buf.class_seen.sum()) == 120
