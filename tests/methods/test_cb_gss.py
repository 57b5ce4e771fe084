"""CB-GSS: CBRS's class quotas, GSS-Greedy's score for the overwritten sample."""

import math

import pytest
import torch
from helpers import C, D
from helpers import small_mlp as _model

from avalanche_gss.methods.cb_gss import CBGSSBuffer
from avalanche_gss.methods.cbrs import CBRSBuffer
from avalanche_gss.selection.cbrs import cbrs_plan, place_by_weight


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


def test_class_quotas_do_not_depend_on_the_scores():
    # Whether a sample is stored and which class gives up a slot are decided from the
    # class counts alone: two different models (so different scores) give the same
    # class counts along the stream, and the same samples in the buffer's classes.
    ours, other = CBGSSBuffer(20, seed=5), CBGSSBuffer(20, seed=5)
    model_a, model_b = _model(0), _model(1)
    for x, y in _imbalanced_stream(1):
        ours.add(x, y, model_a)
        other.add(x, y, model_b)
        assert torch.equal(torch.bincount(ours.tensors()[1], minlength=C),
                           torch.bincount(other.tensors()[1], minlength=C))
    # and the comparison is not vacuous: the scores did change which instances stayed
    assert not torch.equal(ours.tensors()[0].sum(1).sort().values,
                           other.tensors()[0].sum(1).sort().values)


def test_class_quotas_follow_cbrs_rule():
    # CBRS's consequences hold for CB-GSS: a class that never was the largest keeps every
    # sample it has seen; the largest count never grows once the memory is filled.
    buf = CBGSSBuffer(20, seed=2)
    model, seen, top = _model(), torch.zeros(C, dtype=torch.long), None
    for x, y in _imbalanced_stream(4):
        buf.add(x, y, model)
        seen += torch.bincount(y, minlength=C)
        counts = torch.bincount(buf.tensors()[1], minlength=C)
        full = torch.zeros(C, dtype=torch.bool)
        full[: len(buf.full_classes)] = buf.full_classes
        assert torch.equal(counts[~full], seen[~full])
        if len(buf) == 20:
            assert top is None or int(counts.max()) <= top
            top = int(counts.max())


def test_only_the_samples_that_take_a_slot_are_scored():
    # The gradient Gram is computed for the admitted samples only: the others' scores
    # are NaN, and no sample is scored when none is admitted.
    model = _model()
    buf = CBGSSBuffer(20, seed=0)
    stream = _imbalanced_stream(2)
    calls = []
    original = buf._score
    buf._score = lambda x, y, t, m: calls.append(len(y)) or original(x, y, t, m)
    for x, y in stream:
        slots = buf.add(x, y, model)
        scores = buf.last_scores
        assert scores is not None
        admitted = ~torch.isnan(scores)
        assert bool((admitted | (slots < 0)).all())  # a stored sample was scored
        if bool(admitted.any()):
            assert calls == [int(admitted.sum())]
        else:
            assert calls == []
        calls.clear()


def test_the_overwritten_instance_is_drawn_in_proportion_to_its_score():
    # Stored: classes [0, 0, 0, 1] (class 0 the largest, full), scores [3, 1, 0, 1]. A
    # sample of class 1 (not full) overwrites an instance of class 0 with probability
    # 3/4, 1/4 and 0 for slots 0, 1 and 2.
    stored, weights = torch.tensor([0, 0, 0, 1]), torch.tensor([3.0, 1.0, 0.0, 1.0])
    trials, hits = 4000, torch.zeros(4)
    for seed in range(trials):
        plan = cbrs_plan(stored, torch.tensor([1]), 4, torch.tensor([3, 1]),
                         torch.tensor([True, False]),
                         generator=torch.Generator().manual_seed(seed))
        slots = place_by_weight(plan, stored, torch.tensor([1]), (weights, torch.tensor([1.0])))
        hits[int(slots[0])] += 1
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
        assert scores is not None
        scored = scores[~torch.isnan(scores)]
        assert bool(((scored >= 0) & (scored <= 2)).all())
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


def test_a_sample_with_a_non_finite_gradient_is_refused_and_the_batch_decided_again():
    # Given a buffer of classes 0 and 1, and a loss that is infinite for class 3
    def loss_fn(logits, y):
        weight = torch.where(y == 3, math.inf, 1.0)
        return torch.nn.functional.cross_entropy(logits, y, reduction="none") * weight

    model = _model()
    buf = CBGSSBuffer(12, loss_fn=loss_fn, seed=0)
    g = torch.Generator().manual_seed(0)
    buf.add(torch.randn(12, D, generator=g), torch.tensor([0, 1] * 6), model)
    # When a batch of 2s and 3s arrives (new classes: the rule would store all of them)
    y = torch.tensor([3, 2, 3, 2, 2, 3])
    with pytest.warns(RuntimeWarning, match=r"^CBGSSBuffer: 3 sample\(s\) with a non-finite"):
        slots = buf.add(torch.randn(6, D, generator=g), y, model)
    # Then the 3s are refused and counted, the 2s stored as if the 3s had not come
    assert slots[y == 3].tolist() == [-1, -1, -1] and bool((slots[y == 2] >= 0).all())
    assert buf.n_rejected == 3 and 3 not in buf.tensors()[1].tolist()
    assert bool(torch.isfinite(buf.scores[: len(buf)]).all())
    seen = buf.class_seen.tolist()  # the refused samples were never seen by the rule
    assert seen[2] == 3 and (len(seen) < 4 or seen[3] == 0)
