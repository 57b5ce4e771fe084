"""The buffers' decisions at their edges: errors, counters, generators, growth by one."""

import math
import re
import warnings

import pytest
import torch
from helpers import C, D
from helpers import small_mlp as _model
from torch.nn import functional as F

import avalanche_gss.methods.gss_greedy as gss_greedy
from avalanche_gss.methods.cbrs import CBRSBuffer
from avalanche_gss.methods.gdumb import GDumbBuffer
from avalanche_gss.methods.gss_greedy import GSSGreedyBuffer
from avalanche_gss.methods.rand import RandBuffer
from avalanche_gss.methods.reservoir import ReservoirBuffer


def _batch(b, seed, label=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, D, generator=g)
    y = torch.randint(0, C - 1, (b,), generator=g) if label is None else torch.full((b,), label)
    return x, y


def _inf_on_last_class(logits, y):
    per = F.cross_entropy(logits, y, reduction="none")
    return per * torch.where(y == C - 1, math.inf, 1.0)


def test_greedy_errors_name_the_method_and_the_fix():
    buf = GSSGreedyBuffer(5, variant="paper")
    x, y = _batch(3, 0)
    message = "GSS-Greedy scores samples by the model's gradients: pass model="
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        buf.add(x, y)
    empty = GSSGreedyBuffer(5, variant="paper", params=[])
    with pytest.raises(ValueError, match="^" + re.escape(
            "GSS-Greedy: params= is empty, there is no gradient to compare") + "$"):
        empty.add(x, y, _model())
    frozen = _model()
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match=r"^GSS-Greedy scores samples by their loss gradients"):
        GSSGreedyBuffer(5).add(x, y, frozen)
    assert buf.n_seen == empty.n_seen == 0


@pytest.mark.parametrize("variant", ["paper", "authors"])
def test_greedy_counts_every_refused_sample_and_warns_only_then(variant):
    # Given a loss that is infinite on the last class (its gradients are not finite),
    model = _model()
    buf = GSSGreedyBuffer(8, variant=variant, loss_fn=_inf_on_last_class, seed=0)


    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a finite batch raises no warning at all
        buf.add(*_batch(8, 1), model)
    assert len(buf) == 8 and buf.n_rejected == 0
    # When two batches of that class only arrive, Then no sample is stored, each batch
    # warns, and the refused samples add up.
    before = buf.tensors()[1].clone()
    for seed in (2, 3):
        with pytest.warns(RuntimeWarning, match="sample\\(s\\) with a non-finite gradient"):
            slots = buf.add(*_batch(3, seed, label=C - 1), model)
        assert slots.tolist() == [-1, -1, -1]
    assert buf.n_rejected == 6
    assert torch.equal(buf.tensors()[1], before)


def test_authors_greedy_passes_its_own_candidate_draw(monkeypatch):
    calls = []
    real = gss_greedy.greedy_slots

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(gss_greedy, "greedy_slots", spy)
    model = _model()
    for variant, draw in (("authors", "minmax"), ("paper", "proportional")):
        buf = GSSGreedyBuffer(6, variant=variant, seed=0)
        buf.add(*_batch(6, 4), model)
        buf.add(*_batch(6, 5), model)
        assert calls[-1]["candidate_draw"] == draw


@pytest.mark.parametrize("policy", [ReservoirBuffer, RandBuffer, CBRSBuffer, GDumbBuffer])
def test_buffer_draws_come_from_its_own_seeded_generator(policy):
    # Two buffers with the same seed make the same decisions whatever the global RNG.
    x = torch.arange(60.0)[:, None]
    y = torch.arange(60) % 4
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        buf = policy(7, seed=3)
        slots = [buf.add(x[i:i + 10], y[i:i + 10]) for i in range(0, 30, 10)]
        buf.resize(None, 9)
        slots += [buf.add(x[i:i + 10], y[i:i + 10]) for i in range(30, 60, 10)]
        runs.append(torch.cat(slots))
    assert torch.equal(runs[0], runs[1])


def test_reservoir_grown_by_one_slot_fills_it_with_the_next_sample():
    # After 20 samples in 5 slots, growing to 6 leaves one free slot: the next sample
    # takes it (fill first), whatever the draw.
    for seed in range(50):
        buf = ReservoirBuffer(5, seed=seed)
        buf.add(torch.zeros(20, 1), torch.arange(20))
        buf.resize(None, 6)
        assert buf.add(torch.zeros(1, 1), torch.tensor([20])).tolist() == [5]
        assert len(buf) == 6
