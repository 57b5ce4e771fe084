"""CSReL (Tong et al., ICLR 2025): the reducible loss, the weights and the streaming rule
against their equations in float64, and the buffer's scores, refits and invariants."""

import math

import pytest
import torch
from helpers import small_data as _data
from helpers import small_mlp as _model

from avalanche_gss.methods.csrel import CSReL, CSReLBuffer
from avalanche_gss.selection.csrel import admission_weights, reducible_loss, streaming_slots
from avalanche_gss.testing import check_policy


def _ce(row, label):
    top = max(row)
    return top + math.log(sum(math.exp(v - top) for v in row)) - row[label]


@pytest.mark.parametrize("seed", range(5))
def test_the_reducible_loss_is_the_coreset_models_loss_minus_the_full_models(seed):
    g = torch.Generator().manual_seed(seed)
    coreset, full = torch.randn(8, 5, generator=g) * 2, torch.randn(8, 5, generator=g) * 2
    y = torch.randint(0, 5, (8,), generator=g)
    want = [_ce(c, k) - _ce(f, k) for c, f, k in
            zip(coreset.double().tolist(), full.double().tolist(), y.tolist(), strict=True)]
    assert reducible_loss(coreset, full, y).tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_the_weights_are_the_batch_size_times_the_softmax_of_the_scores(seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(10, generator=g) * 3
    total = sum(math.exp(v) for v in s.double().tolist())
    want = [10 * math.exp(v) / total for v in s.double().tolist()]
    assert admission_weights(s).tolist() == pytest.approx(want, rel=1e-9)
    # a non-finite score: weight 0, the others share the batch's mass
    s[3] = float("nan")
    w = admission_weights(s)
    assert w[3] == 0 and float(w.sum()) == pytest.approx(10.0)
    assert admission_weights(torch.full((4,), float("nan"))).tolist() == [0.0] * 4


def _rule(weights, n_seen, size, max_size, generator):
    """The streaming rule, one sample after the other, with the same draws."""
    b = len(weights)
    u = torch.rand(b, generator=generator, dtype=torch.float64).tolist()
    drawn = torch.randint(0, max_size, (b,), generator=generator).tolist()
    slots = [-1] * b
    for i, w in enumerate(weights.tolist()):
        if w <= 0:
            continue
        if size < max_size:
            slot, size = size, size + 1
        elif u[i] * (n_seen + i + 1) < max_size * w:
            slot = drawn[i]
        else:
            continue
        slots = [-1 if s == slot else s for s in slots]
        slots[i] = slot
    return slots


@pytest.mark.parametrize("seed", range(4))
def test_the_streaming_rule_is_the_weighted_reservoir_sample_by_sample(seed):
    g = torch.Generator().manual_seed(seed)
    for n_seen, size, max_size in ((0, 0, 6), (3, 3, 6), (40, 6, 6), (7, 6, 6), (12, 3, 3)):
        w = admission_weights(torch.randn(10, generator=g) * 2)
        w[int(torch.randint(0, 10, (1,), generator=g))] = 0.0
        state = torch.Generator().manual_seed(seed + 100)
        twin = torch.Generator().manual_seed(seed + 100)
        got = streaming_slots(w, n_seen, size, max_size, state).tolist()
        assert got == _rule(w, n_seen, size, max_size, twin)
        kept = [s for s in got if s >= 0]
        assert len(kept) == len(set(kept)) and all(s < max_size for s in kept)


def test_with_equal_weights_it_is_reservoir_sampling():
    # Equal scores: weights 1, every one of the stream's 50 samples ends in the buffer of 5
    # with probability 5/50, early and late ones alike
    g = torch.Generator().manual_seed(0)
    trials, counts = 300, torch.zeros(50)
    for _ in range(trials):
        held = [-1] * 5
        size = 0
        for b in range(5):
            slots = streaming_slots(torch.ones(10), 10 * b, size, 5, g)
            for i, s in enumerate(slots.tolist()):
                if s >= 0:
                    held[s] = 10 * b + i
            size = min(5, size + 10)
        counts[held] += 1
    freq = counts / trials
    assert float(freq.sum()) == pytest.approx(5.0)
    assert float(freq[:25].mean()) == pytest.approx(0.1, abs=0.015)
    assert float(freq[25:].mean()) == pytest.approx(0.1, abs=0.015)


def test_the_buffer_stores_each_samples_reducible_loss_with_its_two_models():
    model = _model(0)
    buffer = CSReLBuffer(6, refit_every=4, refit_steps=3, seed=2)
    for b in range(4):
        x, y = _data(10, b)
        coreset = buffer.coreset_model(model)
        with torch.no_grad():
            want = [_ce(c, k) - _ce(f, k) for c, f, k in zip(
                coreset(x).double().tolist(), model(x).double().tolist(), y.tolist(),
                strict=True)]
        buffer.add(x, y, model)
        assert buffer.last_scores.tolist() == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_a_refit_trains_a_fresh_model_on_the_buffer_and_leaves_the_global_rng_alone():
    model = _model(0)
    buffer = CSReLBuffer(20, refit_every=1000, refit_steps=60, refit_lr=0.5, seed=2)
    x, y = _data(20, 3)
    buffer.add(x, y, model)
    before = buffer.coreset_model(model)
    with torch.no_grad():
        loss_before = float(torch.nn.functional.cross_entropy(before(x), y))
    rng = torch.get_rng_state()
    buffer.refit(model)
    assert torch.equal(rng, torch.get_rng_state())
    after = buffer.coreset_model(model)
    assert after is not before and buffer.refits == 1 and buffer.since_refit == 0
    with torch.no_grad():
        assert float(torch.nn.functional.cross_entropy(after(x), y)) < 0.5 * loss_before
    assert not any(p.requires_grad for p in after.parameters())


def test_refits_come_every_refit_every_stored_samples():
    model = _model(0)
    buffer = CSReLBuffer(10, refit_every=4, refit_steps=1, seed=0)
    x, y = _data(10, 0)
    buffer.add(x, y, model)  # 10 stored: one refit at the end of the batch
    assert buffer.refits == 1 and buffer.since_refit == 0


def test_it_keeps_the_invariants_of_every_policy():
    check_policy(lambda max_size: CSReLBuffer(max_size, refit_every=3, refit_steps=2, seed=1))


def test_a_model_is_needed_and_bad_options_are_refused():
    with pytest.raises(ValueError, match="CSReL scores samples by the learner's loss: pass model="):
        CSReLBuffer(4).add(*_data(3, 0))
    for kwargs, message in (({"refit_steps": 0}, "refit_steps must be an integer >= 1, got 0"),
                            ({"refit_every": 0}, "refit_every must be an integer >= 1 or None"),
                            ({"refit_lr": -1.0}, "refit_lr must be a finite number > 0")):
        with pytest.raises(ValueError, match=message):
            CSReLBuffer(4, **kwargs)


def test_the_ready_strategy_learns_a_stream(tiny_split):
    from avalanche_gss.models import MLP
    from avalanche_gss.streams import online_benchmark

    torch.manual_seed(0)
    model = MLP()
    strategy = CSReL(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                     mem_size=30, refit_steps=5, n_iter=1)
    strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream[:8])
    buffer = strategy.storage_policy
    assert len(buffer) == 30 and buffer.refits >= 1
    assert torch.isfinite(buffer.scores).all()
