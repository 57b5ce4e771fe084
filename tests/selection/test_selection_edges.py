"""Edges of the pure selection rules that mutation testing found unpinned.

Each test states the rule it pins (Algorithm 2's lines, Algorithm R, the paper's Rand);
statistical checks are seeded, with their thresholds stated.
"""


import pytest
import torch
from helpers import exactly as _exactly
from helpers import seeded as _gen

from avalanche_gss.selection.greedy import greedy_scores, greedy_slots
from avalanche_gss.selection.rand import rand_slots
from avalanche_gss.selection.reservoir import reservoir_slots

# --------------------------------------------------------------------------- messages


def test_bad_arguments_raise_their_exact_messages():
    with pytest.raises(ValueError, match=_exactly("cosines must be (B, n), got shape (3,)")):
        greedy_scores(torch.zeros(3))
    with pytest.raises(ValueError, match=_exactly("capacity must be >= 1, got 0")):
        greedy_slots(torch.zeros(0), torch.zeros(1), 0)
    with pytest.raises(ValueError, match=_exactly("buffer_scores and new_scores must be 1-D")):
        greedy_slots(torch.zeros(2, 1), torch.zeros(1), 4)
    with pytest.raises(ValueError, match=_exactly("buffer_scores and new_scores must be 1-D")):
        greedy_slots(torch.zeros(2), torch.zeros(1, 1), 4)
    with pytest.raises(ValueError, match=_exactly("more buffer scores than capacity")):
        greedy_slots(torch.zeros(3), torch.zeros(1), 2)
    with pytest.raises(ValueError, match=_exactly('gate="batch" needs batch_score')):
        greedy_slots(torch.zeros(2), torch.zeros(1), 2, gate="batch")
    with pytest.raises(ValueError, match=_exactly("unknown candidate_draw 'bogus'")):
        greedy_slots(torch.ones(2), torch.zeros(1), 2, candidate_draw="bogus")
    with pytest.raises(ValueError, match=_exactly("capacity must be >= 1, got 0")):
        reservoir_slots(0, 1, 0)
    for seen, new in ((-1, 1), (0, -1)):
        with pytest.raises(ValueError, match=_exactly("n_seen and n_new must be non-negative")):
            reservoir_slots(seen, new, 3)
    with pytest.raises(ValueError, match=_exactly("capacity must be >= 1, got 0")):
        rand_slots(0, 1, 0)
    for size in (-1, 4):
        with pytest.raises(ValueError, match=_exactly(f"size must be in [0, 3], got {size}")):
            rand_slots(size, 1, 3)


def test_boundary_arguments_are_valid():
    # capacity 1, an empty stream position and an empty batch, a full or empty buffer.
    assert greedy_slots(torch.zeros(0), torch.tensor([0.5]), 1)[0].tolist() == [0]
    assert greedy_slots(torch.ones(2), torch.zeros(0), 2)[0].tolist() == []
    # A batch score of exactly 1 (cosine 0) is refused, even for a sample of score 0.
    assert greedy_slots(torch.ones(2), torch.zeros(1), 2, gate="batch", batch_score=1.0,
                        generator=_gen(0))[0].tolist() == [-1]
    assert reservoir_slots(0, 1, 1).tolist() == [0]
    assert reservoir_slots(0, 0, 3).tolist() == []
    assert reservoir_slots(3, 0, 3).tolist() == []
    assert rand_slots(0, 2, 1, generator=_gen(0)).tolist() in ([0, -1], [-1, 0])
    assert rand_slots(3, 0, 3).tolist() == []
    assert rand_slots(0, 3, 3).tolist() == [0, 1, 2]


# --------------------------------------------------------------------------- GSS-Greedy


def test_score_with_one_buffer_gradient_and_dtype():
    # c = max_i cos + 1 also with a single buffer gradient; the dtype is the input's.
    assert greedy_scores(torch.tensor([[-0.25], [0.5]])).tolist() == [0.75, 1.5]
    assert greedy_scores(torch.zeros(2, 0, dtype=torch.float64)).dtype == torch.float64
    assert greedy_scores(torch.zeros(2, 0), empty_score=0.5).tolist() == [0.5, 0.5]


def test_fill_phase_stops_at_capacity_then_the_gate_applies():
    # 2 of 4 slots used, 3 arrivals: two fill slots 2 and 3, the third (c = 1) meets a
    # full buffer and the gate c < 1 refuses it.
    slots, scores = greedy_slots(torch.tensor([1.2, 0.4]), torch.tensor([1.5, 1.9, 1.0]), 4,
                                 generator=_gen(0))
    assert slots.tolist() == [2, 3, -1]
    assert scores.tolist() == pytest.approx([1.2, 0.4, 1.5, 1.9])
    assert slots.dtype == torch.long and scores.dtype == torch.float64


def test_a_refused_sample_does_not_stop_the_batch():
    # Full buffer; the first sample is refused (c = 1.5), the second (c = 0) replaces its
    # candidate with probability C_i / (C_i + 0) = 1.
    for seed in range(20):
        slots, scores = greedy_slots(torch.tensor([1.0, 1.0]), torch.tensor([1.5, 0.0]), 2,
                                     generator=_gen(seed))
        assert slots[0] == -1 and slots[1] in (0, 1)
        assert float(scores[int(slots[1])]) == 0.0


@pytest.mark.parametrize(("ci", "c"), [(0.3, 0.2), (0.5, 0.8)])
def test_replacement_probability_for_small_and_larger_new_scores(ci, c):
    # P(replace) = C_i / (C_i + c): 0.6 and 0.385 here, over 3000 seeded trials, within
    # 4.5 binomial standard deviations.
    trials, p = 3000, ci / (ci + c)
    g = _gen(7)
    hits = sum(int(greedy_slots(torch.tensor([ci]), torch.tensor([c]), 1, generator=g)[0][0] == 0)
               for _ in range(trials))
    assert abs(hits - trials * p) < 4.5 * (trials * p * (1 - p)) ** 0.5, hits


def test_all_zero_scores_never_replace_and_never_fail():
    # Every stored score 0: the candidate is drawn uniformly (no proportional weights);
    # with c = 0 the replacement probability 0 / 0 counts as no replacement, with c > 0 it
    # is 0.
    for seed in range(50):
        for c in (0.0, 0.5):
            slots, scores = greedy_slots(torch.zeros(3), torch.tensor([c]), 3, generator=_gen(seed))
            assert slots.tolist() == [-1] and scores.tolist() == [0.0, 0.0, 0.0]


def test_proportional_draw_with_a_score_sum_below_one():
    # Scores 0.3, 0.2, 0.1 (sum 0.6) and c = 0: the replaced slot is the candidate, drawn
    # with P(i) = C_i / sum C = 1/2, 1/3, 1/6. Chi-square (2 degrees of freedom) over 3000
    # trials below its 99.9th percentile, 13.8.
    buffer = torch.tensor([0.3, 0.2, 0.1])
    counts = torch.zeros(3)
    g = _gen(3)
    for _ in range(3000):
        counts[greedy_slots(buffer, torch.tensor([0.0]), 3, generator=g)[0][0]] += 1
    expected = 3000 * buffer / buffer.sum()
    assert float(((counts - expected) ** 2 / expected).sum()) < 13.8, counts


def test_defaults_are_the_paper_rule():
    # Without options: per-sample gate (c >= 1 refused) and proportional draw.
    slots, _ = greedy_slots(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0]), 2,
                            generator=_gen(0))
    assert slots[0] == -1 and slots[1] >= 0


def test_minmax_candidates_after_a_fill_phase():
    # 3 of 5 slots used; a batch of 5 with c = 0 under the authors' draw: the first
    # sample fills slot 3, the second slot 4, the other three each replace a distinct
    # candidate among the 5 (the fill slots included), in the order drawn. Candidates
    # are drawn with weights (C - min C) / (max C - min C + 0.01): the lowest-scored
    # slot (1) is never one, and the first candidate is slot j with
    # probability (C_j - min C) / sum(C - min C). Chi-square over 3000 seeds (3 degrees
    # of freedom, 99.9th percentile 16.3).
    buffer = torch.tensor([1.0, 0.2, 0.6])
    new = torch.tensor([1.4, 1.8, 0.0, 0.0, 0.0])
    firsts = torch.zeros(5)
    for seed in range(3000):
        slots, scores = greedy_slots(buffer, new, 5, generator=_gen(seed),
                                     candidate_draw="minmax", gate="batch", batch_score=0.5)
        assert slots[0] in (3, -1) and slots[1] in (4, -1)  # -1: taken by a later one
        assert 1 not in slots.tolist()
        assert len(set(slots[2:].tolist())) == 3 and bool((slots[2:] >= 0).all())
        firsts[slots[2]] += 1
    full = torch.tensor([1.0, 0.2, 0.6, 1.4, 1.8])
    w = full - full.min()
    expected = 3000 * w / w.sum()
    keep = w > 0
    chi2 = float(((firsts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    assert chi2 < 16.3, firsts


def _first_candidate_counts(buffer, trials=3000):
    """How often each slot is the first candidate of the authors' draw (c = 0: taken)."""
    counts = torch.zeros(len(buffer))
    new = torch.zeros(2)
    for seed in range(trials):
        slots, _ = greedy_slots(buffer, new, len(buffer), generator=_gen(seed),
                                candidate_draw="minmax", gate="batch", batch_score=0.0)
        counts[slots[0]] += 1
    return counts


def test_minmax_weights_exclude_the_minimum_even_for_close_scores():
    # Scores 1.0, 1.005, 1.002 (spread below 0.01), two samples: two slots have a
    # positive weight, so slot 0 (the minimum) is never a candidate.
    counts = _first_candidate_counts(torch.tensor([1.0, 1.005, 1.002]), trials=300)
    assert counts[0] == 0 and counts[1] > counts[2] > 0


def test_minmax_with_exactly_as_many_weighted_slots_as_samples_keeps_the_weights():
    # Scores 0.5, 1.0, 1.5, two samples: slots 1 and 2 carry weights 1 : 2, slot 0 none.
    # The first candidate is slot 2 with probability 2/3 (within 4.5 binomial standard
    # deviations over 3000 seeds) and never slot 0.
    counts = _first_candidate_counts(torch.tensor([0.5, 1.0, 1.5]))
    assert counts[0] == 0
    assert abs(float(counts[2]) - 2000) < 4.5 * (3000 * 2 / 9) ** 0.5, counts


def test_minmax_draws_uniformly_when_fewer_slots_than_samples_have_weight():
    # Scores 0.5, 0.5, 1.5, two samples: one weighted slot for two samples, so the
    # candidates are drawn uniformly: slot 2 first with probability 1/3 (4.5 sd, 3000).
    counts = _first_candidate_counts(torch.tensor([0.5, 0.5, 1.5]))
    assert abs(float(counts[2]) - 1000) < 4.5 * (3000 * 2 / 9) ** 0.5, counts


def test_minmax_falls_back_to_uniform_when_too_few_slots_have_weight():
    # Two slots, one with the minimum score (weight 0), two samples to place: fewer
    # weighted slots than samples, so the candidates are drawn uniformly: both slots.
    slots, _ = greedy_slots(torch.tensor([0.5, 1.5]), torch.tensor([0.0, 0.0]), 2,
                            generator=_gen(0), candidate_draw="minmax", gate="batch",
                            batch_score=0.0)
    assert sorted(slots.tolist()) == [0, 1]


def test_same_generator_state_same_decisions_whatever_the_global_seed():
    # Every draw goes through the given generator: the global RNG has no say.
    for kwargs in ({}, {"candidate_draw": "minmax", "gate": "batch", "batch_score": 0.0}):
        out = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            out.append(greedy_slots(torch.tensor([0.3, 1.0, 1.7, 0.9]),
                                    torch.tensor([0.2, 0.9, 0.1, 0.4, 0.0]), 4,
                                    generator=_gen(5), **kwargs)[0])
        assert torch.equal(out[0], out[1])
    for fn in (lambda g: reservoir_slots(10, 20, 5, generator=g),
               lambda g: rand_slots(4, 20, 5, generator=g)):
        torch.manual_seed(1)
        a = fn(_gen(9))
        torch.manual_seed(2)
        assert torch.equal(a, fn(_gen(9)))


# --------------------------------------------------------------------------- Reservoir


def test_reservoir_batch_slots_are_distinct_in_range_and_the_last_drawer_keeps_a_slot():
    # M = 2 slots and batches of 4 late in the stream: draws often coincide. Slots stay
    # in [-1, M), stored slots are distinct, and every slot drawn by some sample of the
    # batch is kept by one of them (the later one).
    collisions = 0
    for seed in range(300):
        slots = reservoir_slots(50, 4, 2, generator=_gen(seed))
        assert bool((slots >= -1).all()) and bool((slots < 2).all())
        kept = slots[slots >= 0]
        assert len(kept) == len(torch.unique(kept))
        # Replay the batch one sample at a time with the same draws.
        again = [int(reservoir_slots(50 + k, 1, 2, generator=g)[0])
                 for g in [_gen(seed)] for k in range(4)]
        collisions += int(len({s for s in again if s >= 0}) < sum(s >= 0 for s in again))
        expected = [-1] * 4
        for k, s in enumerate(again):
            if s >= 0:
                expected = [-1 if e == s else e for e in expected]
                expected[k] = s
        assert slots.tolist() == expected
    assert collisions > 0  # the test saw coinciding draws


# --------------------------------------------------------------------------- Rand


def test_rand_keeps_a_uniform_m_of_buffer_and_batch():
    # Buffer of 4 (full, M = 4) and a batch of 4: each of the 8 samples is kept with
    # probability M / 8 = 1/2 over 2000 seeds (each within 4.5 binomial standard
    # deviations); new samples take the slots of dropped ones, so the buffer stays full
    # and its slots distinct.
    kept = torch.zeros(8)
    for seed in range(2000):
        slots = rand_slots(4, 4, 4, generator=_gen(seed))
        stored = slots[slots >= 0]
        assert len(stored) == len(torch.unique(stored))
        assert bool((stored < 4).all())
        survivors = set(range(4)) - set(stored.tolist())
        assert len(survivors) + len(stored) == 4
        for i in survivors:
            kept[i] += 1
        kept[4:][slots >= 0] += 1
    z = (kept - 1000) / (2000 * 0.25) ** 0.5
    assert float(z.abs().max()) < 4.5, kept


def test_rand_partial_buffer_overflow_uses_free_slots_first():
    # Buffer 2 of 4, batch of 3 (one too many): 4 of the 5 are kept. Kept new samples
    # take the free slots 2 and 3 and, if a stored sample was dropped, its slot.
    for seed in range(200):
        slots = rand_slots(2, 3, 4, generator=_gen(seed))
        stored = slots[slots >= 0].tolist()
        assert len(stored) == len(set(stored)) and {2, 3} <= set(stored)
        assert len(stored) in (2, 3) and set(stored) <= {0, 1, 2, 3}
