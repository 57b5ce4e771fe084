"""GSS-Greedy's rules (paper Algorithm 2, lines 7-17), checked on score tensors."""

import torch

from avalanche_gss.selection.greedy import greedy_scores, greedy_slots


def test_score_is_max_cosine_plus_one():
    cos = torch.tensor([[0.2, -0.5, 0.9], [-0.3, -0.1, -0.7]])
    assert torch.allclose(greedy_scores(cos), torch.tensor([1.9, 0.9]))
    assert greedy_scores(torch.zeros(4, 0)).tolist() == [1.0] * 4  # empty buffer


def test_fill_phase_appends_with_scores():
    # Given 2 of 4 slots used, When 2 samples arrive, Then they take slots 2 and 3 with
    # their scores, whatever the scores (no gate before the buffer is full).
    old = torch.tensor([1.2, 0.4], dtype=torch.float64)
    slots, scores = greedy_slots(old, torch.tensor([1.5, 1.9], dtype=torch.float64), 4)
    assert slots.tolist() == [2, 3]
    assert scores.tolist() == [1.2, 0.4, 1.5, 1.9]


def test_gate_rejects_scores_of_one_or_more_when_full():
    # Given a full buffer, When a sample's gradient has non-negative cosine with some
    # buffer gradient (c >= 1), Then it never enters and the scores do not change.
    full = torch.tensor([1.5, 1.5, 1.5])
    for seed in range(200):
        g = torch.Generator().manual_seed(seed)
        slots, scores = greedy_slots(full, torch.tensor([1.0, 1.3]), 3, generator=g)
        assert slots.tolist() == [-1, -1]
        assert torch.equal(scores, full.double())


def test_candidate_drawn_proportionally_to_score():
    # With c = 0 the replacement probability C_i / (C_i + c) is 1, so the slot taken is
    # exactly the candidate draw: P(i) = C_i / sum_j C_j.
    buffer = torch.tensor([0.5, 1.0, 1.5, 2.0])
    counts = torch.zeros(4)
    trials = 4000
    g = torch.Generator().manual_seed(0)
    for _ in range(trials):
        slots, _ = greedy_slots(buffer, torch.tensor([0.0]), 4, generator=g)
        counts[slots[0]] += 1
    expected = trials * buffer / buffer.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 16.3, (counts, chi2)  # 99.9th percentile, 3 degrees of freedom


def test_replacement_probability_is_ci_over_ci_plus_c():
    # One slot of score C = 1.5 and a new sample of score c = 0.5: P(replace) = 0.75.
    g = torch.Generator().manual_seed(1)
    trials = 4000
    hits = sum(
        int(greedy_slots(torch.tensor([1.5]), torch.tensor([0.5]), 1, generator=g)[0][0] == 0)
        for _ in range(trials)
    )
    p = hits / trials
    assert abs(p - 0.75) < 4 * (0.75 * 0.25 / trials) ** 0.5, p


def test_replaced_slot_takes_the_new_score():
    g = torch.Generator().manual_seed(0)
    slots, scores = greedy_slots(torch.tensor([2.0, 2.0]), torch.tensor([0.0]), 2, generator=g)
    assert slots[0] >= 0
    assert scores[slots[0]] == 0.0


def test_later_sample_overwriting_earlier_one_reports_it_dropped():
    # A one-slot buffer and two new samples that may both replace it: whenever the second
    # takes the slot after the first did, the first is reported as not stored.
    both = 0
    for seed in range(100):
        g = torch.Generator().manual_seed(seed)
        slots, scores = greedy_slots(
            torch.tensor([1.0]), torch.tensor([0.5, 0.2], dtype=torch.float64), 1, generator=g
        )
        assert (slots >= 0).sum() <= 1
        if slots[1] == 0:
            assert slots[0] == -1 and scores[0] == 0.2
            both += 1
    assert both > 0


def test_batch_gate_blocks_or_admits_the_whole_batch():
    full = torch.tensor([1.5, 1.5])
    blocked, _ = greedy_slots(full, torch.zeros(2), 2, gate="batch", batch_score=1.2)
    assert blocked.tolist() == [-1, -1]
    # A passing batch: samples with c >= 1 may still enter (no per-sample gate).
    g = torch.Generator().manual_seed(0)
    entered = 0
    for _ in range(200):
        s, _ = greedy_slots(full, torch.tensor([1.4]), 2, gate="batch", batch_score=0.5,
                            generator=g)
        entered += int(s[0] >= 0)
    assert 60 < entered < 140  # P = 1.5 / (1.5 + 1.4) ≈ 0.52


def test_minmax_draw_never_picks_the_lowest_score():
    buffer = torch.tensor([0.2, 1.0, 1.5, 1.9])
    g = torch.Generator().manual_seed(0)
    picked = set()
    for _ in range(500):
        slots, _ = greedy_slots(buffer, torch.tensor([0.0]), 4, candidate_draw="minmax",
                                generator=g)
        picked.add(int(slots[0]))
    assert 0 not in picked and picked == {1, 2, 3}
