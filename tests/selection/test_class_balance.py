"""The class-balancing rules as pure functions: CBRS, GDumb's sampler and their shared parts."""

import math

import pytest
import torch

from avalanche_gss.selection.cbrs import cbrs_plan, cbrs_slots, place_by_weight
from avalanche_gss.selection.classes import grow, largest_instance, shrink_largest, weighted_index
from avalanche_gss.selection.gdumb import gdumb_slots

_NONE = torch.zeros(0, dtype=torch.long)
_NO_FULL = torch.zeros(0, dtype=torch.bool)


def _cbrs(stored, new, capacity, g=None):
    return cbrs_slots(torch.tensor(stored, dtype=torch.long), torch.tensor(new, dtype=torch.long),
                      capacity, _NONE, _NO_FULL, generator=g)


def _gdumb(stored, new, capacity, g=None):
    return gdumb_slots(torch.tensor(stored, dtype=torch.long),
                       torch.tensor(new, dtype=torch.long), capacity, _NONE, generator=g)


def test_largest_instance_draws_in_slot_order_over_every_tied_class():
    labels, counts = [0, 1, 2, 1, 0], [2, 2, 1]
    picks = [largest_instance(labels, counts, u) for u in (0.0, 0.3, 0.6, 0.9, 0.999999)]
    assert picks == [0, 1, 3, 4, 4]  # candidates: slots 0, 1, 3, 4 (classes 0 and 1)


@pytest.mark.parametrize("seed", range(5))
def test_shrink_largest_cuts_the_largest_classes_down_to_each_other(seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([0] * 6 + [1] * 3 + [2])[torch.randperm(10, generator=g)]
    for n_keep, expected in ((10, [6, 3, 1]), (7, [3, 3, 1]), (5, [2, 2, 1]), (3, [1, 1, 1])):
        keep = shrink_largest(labels, n_keep, generator=g)
        assert keep.tolist() == sorted(set(keep.tolist())) and len(keep) == n_keep
        assert torch.bincount(labels[keep], minlength=3).tolist() == expected
    assert shrink_largest(labels, 12).tolist() == list(range(10))
    with pytest.raises(ValueError, match="n_keep"):
        shrink_largest(labels, -1)


@pytest.mark.parametrize("rule", [_cbrs, _gdumb])
def test_bad_capacities_are_refused_and_an_empty_batch_changes_nothing(rule):
    with pytest.raises(ValueError, match="capacity"):
        rule([], [0], 0)
    with pytest.raises(ValueError, match="exceed the capacity"):
        rule([0, 1, 2], [0], 2)
    decision = rule([0, 1], [], 3)
    assert decision.slots.tolist() == [] and decision.seen.tolist() == [0, 0]
    # an empty decision is still an int64 index and int64 counts
    nothing = rule([], [], 3)
    assert decision.slots.dtype == nothing.slots.dtype == nothing.seen.dtype == torch.long
    if rule is _cbrs:  # and CBRS's full classes a bool mask, even with no class yet
        assert nothing.full.dtype == torch.bool and nothing.full.tolist() == []


@pytest.mark.parametrize(("stored", "new", "seen", "want"), [([], [0, 0], [], [2]),
                                                              ([0], [], [1], [1])])
def test_both_rules_count_the_labels_seen_one_entry_per_label(stored, new, seen, want):
    # Given the labels seen so far, Then n_c is indexed by label and no longer than the
    # largest label (or the counts given) needs, in GDumb's sampler as in CBRS
    args = (torch.tensor(stored, dtype=torch.long), torch.tensor(new, dtype=torch.long), 4,
            torch.tensor(seen, dtype=torch.long))
    assert gdumb_slots(*args).seen.tolist() == want
    assert cbrs_slots(*args, _NO_FULL).seen.tolist() == want


@pytest.mark.parametrize(("rule", "per_sample"), [(_cbrs, 2), (_gdumb, 1)])
def test_each_batch_draws_a_fixed_number_of_uniforms(rule, per_sample):
    # Whatever the decisions (stored, refused, filling), the generator advances alike.
    for stored, new in (([], [0, 1, 2]), ([0, 0, 0, 1], [0, 0, 2])):
        g, ref = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
        rule(stored, new, 4, g)
        torch.rand(len(new) * per_sample, generator=ref, dtype=torch.float64)
        assert torch.equal(g.get_state(), ref.get_state())


def test_a_later_sample_of_the_batch_may_take_the_slot_of_an_earlier_one():
    # GDumb, M = 3: classes 0, 0 fill slots 0-1; class 1 fills slot 2 (full); the next
    # class-1 sample is below its share (1 < 3/2): it takes a random instance of
    # class 0, the largest, possibly the one stored in this very batch
    outcomes = set()
    for seed in range(40):
        slots = _gdumb([], [0, 0, 1, 1], 3, torch.Generator().manual_seed(seed)).slots.tolist()
        kept = [s for s in slots if s >= 0]
        assert len(kept) == len(set(kept)) == 3  # distinct and the memory full
        outcomes.add(tuple(slots))
    assert outcomes == {(-1, 1, 2, 0), (0, -1, 2, 1)}


def test_cbrs_when_one_slot_holds_everything():
    # M = 1: the slot's class is full; a new class takes it and becomes full in turn;
    # the first class, full with nothing stored, is then never stored again
    g = torch.Generator().manual_seed(0)
    decision = _cbrs([], [0, 1, 0, 0], 1, g)
    assert decision.slots.tolist() == [-1, 0, -1, -1]
    assert decision.full.tolist() == [True, True] and decision.seen.tolist() == [3, 1]


@pytest.mark.reads_source
@pytest.mark.parametrize("module", ["classes", "cbrs", "gdumb"])
def test_the_rules_are_pure_tensor_code(module):
    # Imports of the module's source: torch, typing, collections and the selection package only
    import ast
    from pathlib import Path

    import avalanche_gss.selection as selection

    tree = ast.parse((Path(selection.__file__).parent / f"{module}.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    allowed = ("torch", "typing", "collections", "__future__", "avalanche_gss.selection.")
    assert all(name.startswith(allowed) for name in imported), imported


# ------------------------------------------------------------------ weighted draws


def test_weighted_index_without_weights_is_floor_u_n():
    for n in (1, 3, 7):
        for u in (0.0, 0.2, 0.5, 0.99, 1 - 2**-53):
            assert weighted_index(u, n) == min(int(u * n), n - 1)
    assert weighted_index(1 - 2**-53, 4) == 3  # never past the last index


def test_weighted_index_is_the_inverse_cdf_of_the_weights():
    # weights [1, 0, 3]: index 0 on [0, 1/4), index 2 on [1/4, 1); index 1 never
    assert [weighted_index(u, 3, [1.0, 0.0, 3.0]) for u in (0.0, 0.24, 0.25, 0.6, 0.99)] == [
        0, 0, 2, 2, 2]
    # equal weights: the middle of three for u in [1/3, 2/3)
    assert weighted_index(0.5, 3, [1.0, 1.0, 1.0]) == 1
    # weights summing to less than one are still a distribution
    assert weighted_index(0.9, 2, [0.5, 0.0]) == 0


def test_all_zero_weights_fall_back_to_a_uniform_draw():
    assert weighted_index(0.6, 3, [0.0, 0.0, 0.0]) == 1
    assert weighted_index(0.6, 3, []) == 1


def test_shrink_largest_edges():
    labels = torch.tensor([0, 0, 0, 1, 2])
    with pytest.raises(ValueError, match="n_keep must be >= 0, got -1"):
        shrink_largest(labels, -1)
    kept = shrink_largest(labels, 0)
    assert kept.dtype == torch.long and labels[kept].tolist() == []
    assert shrink_largest(_NONE, 0).tolist() == []
    # dropping one sample takes it from the largest class (class 0), whatever the draw
    for seed in range(10):
        kept = shrink_largest(labels, 4, generator=torch.Generator().manual_seed(seed))
        assert len(kept) == 4 and sorted(labels[kept].tolist()) == [0, 0, 1, 2]


def test_shrink_largest_draws_from_the_generator_it_is_given():
    labels = torch.arange(40) % 4
    torch.manual_seed(1)
    first = shrink_largest(labels, 20, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(2)
    again = shrink_largest(labels, 20, generator=torch.Generator().manual_seed(3))
    other = shrink_largest(labels, 20, generator=torch.Generator().manual_seed(4))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_grow_pads_with_zeros_and_keeps_the_counts_exact():
    big = 2**24 + 1  # no float32 holds it
    counts = torch.tensor([big, 3])
    grown = grow(counts, 4)
    assert grown.dtype == torch.long and grown.tolist() == [big, 3, 0, 0]
    assert grow(counts, 2).tolist() == [big, 3]


def _cbrs_w(stored, new, capacity, seen, full, seed, weights):
    """CBRS decided per class (cbrs_plan), then the instances chosen by weight."""
    stored, new = torch.tensor(stored), torch.tensor(new)
    plan = cbrs_plan(stored, new, capacity, torch.tensor(seen), torch.tensor(full),
                     generator=torch.Generator().manual_seed(seed))
    return place_by_weight(plan, stored, new, weights).tolist()


WEIGHTS_ERROR = "^weights must have one entry per stored and per new sample$"


def test_cbrs_weights_must_match_the_samples():
    with pytest.raises(ValueError, match=WEIGHTS_ERROR):
        _cbrs_w([0, 1], [1], 2, [1, 1], [True, True], 0,
                weights=(torch.ones(1), torch.ones(1)))
    with pytest.raises(ValueError, match=WEIGHTS_ERROR):
        _cbrs_w([0, 1], [1], 2, [1, 1], [True, True], 0,
                weights=(torch.ones(2), torch.ones(2)))


def test_cbrs_weights_follow_the_samples_into_their_slots():
    # Capacity 4, stored [0, 0, 1] (weights 1), class 0 full. The batch [1 (weight 0),
    # 1 (weight 1)]: the first fills slot 3, then classes 0 and 1 tie for largest (both
    # full); the second is a reservoir draw within class 1 (stored with probability 2/3)
    # and overwrites class 1's instances by weight: slot 2, never the weight-0 slot 3.
    outcomes = set()
    for seed in range(200):
        first, second = _cbrs_w([0, 0, 1], [1, 1], 4, [2, 1], [True, False], seed,
                                weights=(torch.ones(3), torch.tensor([0.0, 1.0])))
        assert first == 3 and second in (-1, 2)
        outcomes.add(second)
    assert outcomes == {-1, 2}
    # and an overwrite: stored [0, 1, 1], class 1 the largest: "2" overwrites slot 1 or 2.
    for seed in range(50):
        (slot,) = _cbrs_w([0, 1, 1], [2], 3, [1, 2, 0], [False, True, False], seed,
                          weights=(torch.ones(3), torch.zeros(1)))
        assert slot in (1, 2)


def test_cbrs_full_class_overwrites_its_own_instances_by_weight():
    # Class 0 is full with two stored instances (weights 1 and 0) and has seen one: the
    # new sample is stored (m_c / n_c = 2 / 2) and always overwrites the weight-1 slot.
    for seed in range(100):
        slots = _cbrs_w([0, 0, 1], [0], 3, [1, 1], [True, False], seed,
                        weights=(torch.tensor([1.0, 0.0, 1.0]), torch.ones(1)))
        assert slots == [0]


def test_cbrs_all_zero_weights_of_the_victim_class_draw_its_instance_uniformly():
    # Given class 0 full with two stored instances, both of weight 0, When a sample of
    # class 0 is stored over one of them, Then it is instance floor(u * 2) of the plan's u
    stored, new = torch.tensor([0, 0, 1]), torch.tensor([0])
    slots = set()
    for seed in range(20):
        plan = cbrs_plan(stored, new, 3, torch.tensor([1, 1]), torch.tensor([True, False]),
                         generator=torch.Generator().manual_seed(seed))
        (slot,) = place_by_weight(plan, stored, new,
                                  (torch.tensor([0.0, 0.0, 1.0]), torch.ones(1))).tolist()
        assert slot == min(int(float(plan.draws[0]) * 2), 1)
        slots.add(slot)
    assert slots == {0, 1}


def test_cbrs_plan_draws_are_the_uniforms_left_over_and_stay_in_zero_one():
    # Given classes 1 and 2 tied for largest, When a sample of class 3 takes a slot, Then
    # its draw is u * 2 less its integer part (u: its second float64 uniform)
    stored, new = torch.tensor([0, 1, 1, 2, 2]), torch.tensor([3])
    for seed in range(20):
        plan = cbrs_plan(stored, new, 5, torch.tensor([1, 2, 2, 0]),
                         torch.tensor([False, True, True, False]),
                         generator=torch.Generator().manual_seed(seed))
        u = float(torch.rand(1, 2, generator=torch.Generator().manual_seed(seed),
                             dtype=torch.float64)[0, 1])
        assert float(plan.draws[0]) == u * 2 - int(u * 2)
    # Given two full classes of one instance each, When four samples of class 0 come, Then
    # the stored ones keep their own uniform, and every draw (refused ones too) is in [0, 1)
    refused = 0
    for seed in range(20):
        plan = cbrs_plan(torch.tensor([0, 1]), torch.tensor([0, 0, 0, 0]), 2,
                         torch.tensor([1, 1]), torch.tensor([True, True]),
                         generator=torch.Generator().manual_seed(seed))
        u = torch.rand(4, 2, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)[:, 1]
        assert torch.equal(plan.draws[plan.admitted], u[plan.admitted])
        assert bool(((plan.draws >= 0) & (plan.draws < 1)).all())
        refused += int((~plan.admitted).sum())
    assert refused > 0


def test_cbrs_plan_draws_one_of_the_tied_largest_classes_uniformly():
    # Stored [0, 1, 1, 2, 2]: classes 1 and 2 tie for largest; a sample of class 3 (not
    # full) takes a slot from one of them, each with probability 1/2, and the instance
    # within it comes from the uniform left over from that draw.
    stored, new = torch.tensor([0, 1, 1, 2, 2]), torch.tensor([3])
    victims, trials = torch.zeros(3), 2000
    for seed in range(trials):
        plan = cbrs_plan(stored, new, 5, torch.tensor([1, 2, 2, 0]),
                         torch.tensor([False, True, True, False]),
                         generator=torch.Generator().manual_seed(seed))
        victims[int(plan.victims[0])] += 1
        assert bool(plan.admitted[0]) and 0.0 <= float(plan.draws[0]) < 1.0
    assert victims[0] == 0
    assert abs(float(victims[1]) / trials - 0.5) < 4 * math.sqrt(0.25 / trials)


def test_cbrs_plan_decides_as_cbrs_slots_where_no_classes_tie():
    # Without a tie for largest the class decisions are the same uniforms' decisions, and
    # with equal weights the instances too: the same slots, n_c and full classes.
    # Stored counts 6, 3, 1, 0 (class 0 full); batches of class 0 and one small class c:
    # c and 0 can tie only once c is the largest too, so that c is full by then.
    g = torch.Generator().manual_seed(0)
    stored = torch.tensor([0] * 6 + [1] * 3 + [2])
    for seed in range(60):
        c = 1 + seed % 3
        new = torch.where(torch.rand(8, generator=g) < 0.5, 0, c)
        args = (stored, new, 10, torch.tensor([9, 3, 1]), torch.tensor([True, False, False]))
        slots = cbrs_slots(*args, generator=torch.Generator().manual_seed(seed))
        plan = cbrs_plan(*args, generator=torch.Generator().manual_seed(seed))
        placed = place_by_weight(plan, stored, new, (torch.ones(10), torch.ones(8)))
        assert torch.equal(placed, slots.slots)
        assert torch.equal(plan.seen, slots.seen) and torch.equal(plan.full, slots.full)


def test_cbrs_a_full_class_with_one_instance_keeps_a_reservoir_of_it():
    # Stored [0, 1], both full, one seen each: a second sample of class 0 replaces the
    # stored one with probability m_c / n_c = 1/2.
    stored = [int(cbrs_slots(torch.tensor([0, 1]), torch.tensor([0]), 2, torch.tensor([1, 1]),
                             torch.tensor([True, True]),
                             generator=torch.Generator().manual_seed(seed)).slots[0] >= 0)
              for seed in range(400)]
    assert 120 < sum(stored) < 280  # binomial(400, 1/2): 200 +- 80 is over 8 sd


def test_cbrs_plan_refuses_bad_capacities_and_draws_two_uniforms_per_sample():
    def plan(stored, new, capacity, g=None):
        return cbrs_plan(torch.tensor(stored, dtype=torch.long),
                         torch.tensor(new, dtype=torch.long), capacity, _NONE, _NO_FULL,
                         generator=g)

    with pytest.raises(ValueError, match="^capacity must be >= 1, got 0$"):
        plan([], [0], 0)
    with pytest.raises(ValueError, match="^3 stored samples exceed the capacity 2$"):
        plan([0, 1, 2], [0], 2)
    empty = plan([0, 1], [], 3)
    assert empty.victims.tolist() == [] and empty.seen.tolist() == [0, 0]
    assert empty.victims.dtype == torch.long and empty.draws.dtype == torch.float64
    g, ref = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    plan([0, 0, 0, 1], [0, 0, 2], 4, g)
    torch.rand(6, generator=ref, dtype=torch.float64)
    assert torch.equal(torch.rand(1, generator=g), torch.rand(1, generator=ref))


@pytest.mark.parametrize(("seen", "full"), [([1, 0, 2], [True]), ([1], [True, False, True])])
def test_cbrs_seen_and_full_come_back_one_entry_per_label_whichever_was_longer(seen, full):
    # Given n_c and the full classes of different lengths, When a sample of class 0 fills a
    # free slot, Then both come back over the same labels: n_c padded with 0, full with False
    n = max(len(seen), len(full))
    want_seen, want_full = seen + [0] * (n - len(seen)), full + [False] * (n - len(full))
    want_seen[0] += 1
    args = (torch.tensor([0]), torch.tensor([0]), 4, torch.tensor(seen), torch.tensor(full))
    for decision in (cbrs_slots(*args), cbrs_plan(*args)):
        assert decision.seen.tolist() == want_seen and decision.full.tolist() == want_full


def _reservoir_draws(monkeypatch, u):
    """Every sample's reservoir test draws ``u`` (and its instance draw 0)."""
    monkeypatch.setattr(torch, "rand", lambda n, two, **_: torch.tensor([[u, 0.0]] * n,
                                                                         dtype=torch.float64))


def test_cbrs_full_class_stores_a_sample_when_u_is_at_most_m_c_over_n_c(monkeypatch):
    # Given a filled memory [0, 1] of full classes, one of each seen, When a second sample
    # of class 0 draws u = m_c / n_c = 1/2 exactly, Then it replaces its own instance: the
    # paper's test "u <= m_c / n_c" includes equality
    args = (torch.tensor([0, 1]), torch.tensor([0]), 2, torch.tensor([1, 1]),
            torch.tensor([True, True]))
    _reservoir_draws(monkeypatch, 0.5)
    assert cbrs_plan(*args).victims.tolist() == [0] and cbrs_slots(*args).slots.tolist() == [0]
    # Given a full class 0 with no instance stored (memory [1, 1]), When its sample draws
    # u = 0, Then it is not stored: it has no instance of its own to replace
    args = (torch.tensor([1, 1]), torch.tensor([0]), 2, torch.tensor([3, 2]),
            torch.tensor([True, True]))
    _reservoir_draws(monkeypatch, 0.0)
    assert cbrs_plan(*args).victims.tolist() == [-2] and cbrs_slots(*args).slots.tolist() == [-1]
