"""CB-GSS: CBRS's class quotas, GSS-Greedy's score for the overwritten sample."""

import math

import pytest
import torch

from avalanche_gss.methods.cb_gss import CBGSSBuffer
from avalanche_gss.methods.cbrs import CBRSBuffer
from avalanche_gss.models import MLP
from avalanche_gss.selection.cbrs import cbrs_slots

D, C = 12, 4


def _model(seed=0):
    torch.manual_seed(seed)
    return MLP(input_size=D, hidden_sizes=(16,), num_classes=C)


def _imbalanced_stream(seed=0):
    """Batches of 5: 60 samples of class 0, then 10 of each other class, interleaved."""
    g = torch.Generator().manual_seed(seed)
    y = torch.cat([torch.zeros(60, dtype=torch.long), torch.arange(1, C).repeat(10)])
    x = torch.randn(len(y), D, generator=g)
    return [(x[i : i + 5], y[i : i + 5]) for i in range(0, len(y), 5)]


def test_random_victims_are_cbrs_exactly():
    # The ablation of the score: victim="random" makes CBRS's decisions, draw for draw.
    model = _model()
    ours, cbrs = CBGSSBuffer(20, victim="random", seed=3), CBRSBuffer(20, seed=3)
    for x, y in _imbalanced_stream():
        assert torch.equal(ours.add(x, y, model), cbrs.add(x, y, model))
    assert torch.equal(ours.tensors()[1], cbrs.tensors()[1])


def test_class_quotas_are_cbrs_whatever_the_scores():
    # Which class gives up a slot, and whether a sample is stored, never depend on the
    # scores: only which instance of the class leaves does. So the class counts along
    # the stream are CBRS's, for the same seed.
    model = _model()
    ours, cbrs = CBGSSBuffer(20, seed=5), CBRSBuffer(20, seed=5)
    for x, y in _imbalanced_stream(1):
        ours.add(x, y, model)
        cbrs.add(x, y, model)
        assert torch.equal(torch.bincount(ours.tensors()[1], minlength=C),
                           torch.bincount(cbrs.tensors()[1], minlength=C))
    # and the comparison is not vacuous: the scores did change which instances stayed
    assert not torch.equal(ours.tensors()[0], cbrs.tensors()[0])


def test_the_overwritten_instance_is_drawn_in_proportion_to_its_score():
    # Stored: classes [0, 0, 0, 1] (class 0 the largest, full), scores [3, 1, 0, 1]. A
    # sample of class 1 (not full) overwrites an instance of class 0 with probability
    # 3/4, 1/4 and 0 for slots 0, 1 and 2.
    stored, weights = torch.tensor([0, 0, 0, 1]), torch.tensor([3.0, 1.0, 0.0, 1.0])
    trials, hits = 4000, torch.zeros(4)
    for seed in range(trials):
        decision = cbrs_slots(stored, torch.tensor([1]), 4, torch.tensor([3, 1]),
                              torch.tensor([True, False]),
                              generator=torch.Generator().manual_seed(seed),
                              weights=(weights, torch.tensor([1.0])))
        hits[int(decision.slots[0])] += 1
    z = 4.0  # two-sided, ~6e-5 per cell
    for slot, p in ((0, 0.75), (1, 0.25)):
        tolerance = z * math.sqrt(p * (1 - p) / trials)
        assert abs(float(hits[slot]) / trials - p) < tolerance, (slot, hits)
    assert hits[2] == 0 and hits[3] == 0


def test_stored_scores_are_the_scores_of_the_samples_that_took_the_slots():
    model = _model()
    buf = CBGSSBuffer(20, seed=0)
    for x, y in _imbalanced_stream(2):
        slots = buf.add(x, y, model)
        scores = buf.last_scores
        assert scores is not None and bool(((scores >= 0) & (scores <= 2)).all())
        for i, s in enumerate(slots.tolist()):
            if s >= 0:
                assert float(buf.scores[s]) == pytest.approx(float(scores[i]), abs=1e-6)


def test_options_are_checked():
    with pytest.raises(ValueError, match="victim must be 'score' or 'random', got 'oldest'"):
        CBGSSBuffer(10, victim="oldest")
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        CBGSSBuffer(10, n=0)
    with pytest.raises(ValueError, match="CB-GSS scores samples by the model's gradients"):
        CBGSSBuffer(10).add(torch.randn(3, D), torch.tensor([0, 1, 2]))


def test_state_round_trip_gives_the_same_next_decisions():
    model = _model()
    stream = _imbalanced_stream(3)
    first = CBGSSBuffer(20, seed=7)
    for x, y in stream[:12]:
        first.add(x, y, model)
    second = CBGSSBuffer(20, seed=99)
    second.load_state_dict({k: v.clone() if isinstance(v, torch.Tensor) else v
                            for k, v in first.state_dict().items()})
    for x, y in stream[12:]:
        assert torch.equal(first.add(x, y, model), second.add(x, y, model))
