"""ER-ACE's asymmetric cross-entropy: its equation, Avalanche's ``ACECriterion``, in use."""

import math

import pytest
import torch
import torch.nn.functional as F
from avalanche.training import ACECriterion, Naive
from torch import nn

from avalanche_gss import ReservoirBuffer
from avalanche_gss.models import MLP
from avalanche_gss.streams import online_benchmark
from avalanche_gss.training import (
    AsymmetricCrossEntropy,
    OnlineRehearsal,
    OnlineRehearsalPlugin,
    quiet_evaluator,
    replay_criterion,
)
from avalanche_gss.training.retrieval import per_sample_loss


def oracle_incoming(z, y):
    """The paper's incoming term in float64, one sample at a time: the cross-entropy over
    the classes the batch holds, ``log sum_{k in C_in} exp z_k - z_y``."""
    present = sorted(set(y.tolist()))
    total = 0.0
    for row, label in zip(z.double().tolist(), y.tolist(), strict=True):
        top = max(row[k] for k in present)
        log_sum = top + math.log(sum(math.exp(row[k] - top) for k in present))
        total += log_sum - row[label]
    return total / len(y)


def oracle_replay(z, y):
    """The replay term in float64: the cross-entropy over every logit."""
    total = 0.0
    for row, label in zip(z.double().tolist(), y.tolist(), strict=True):
        top = max(row)
        total += top + math.log(sum(math.exp(v - top) for v in row)) - row[label]
    return total / len(y)


def _batch(g, n, classes, low=0, high=None):
    y = torch.randint(low, high or classes, (n,), generator=g)
    return torch.randn(n, classes, generator=g) * 3, y


@pytest.mark.parametrize("seed", range(6))
def test_each_term_is_the_papers_equation(seed):
    g = torch.Generator().manual_seed(seed)
    loss = AsymmetricCrossEntropy()
    z_in, y_in = _batch(g, 7, 10, low=4, high=7)  # the incoming batch: classes 4 to 6
    z_re, y_re = _batch(g, 5, 10)
    got_in = loss(z_in.requires_grad_(), y_in)
    got_re = replay_criterion(loss)(z_re.requires_grad_(), y_re)
    assert got_in.item() == pytest.approx(oracle_incoming(z_in.detach(), y_in), rel=1e-5)
    assert got_re.item() == pytest.approx(oracle_replay(z_re.detach(), y_re), rel=1e-5)
    # Avalanche's ACECriterion is the mean of the two terms
    avalanche = ACECriterion()(z_in.detach(), y_in, z_re.detach(), y_re)
    assert (got_in + got_re).item() == pytest.approx(2 * float(avalanche), rel=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_the_gradient_leaves_the_absent_classes_alone(seed):
    g = torch.Generator().manual_seed(seed)
    z, y = _batch(g, 6, 5, low=1, high=3)
    z.requires_grad_()
    AsymmetricCrossEntropy()(z, y).backward()
    present = torch.zeros(5, dtype=torch.bool)
    present[y] = True
    p = torch.softmax(z.detach().double().masked_fill(~present, float("-inf")), dim=1)
    expected = (p - torch.nn.functional.one_hot(y, 5)) / len(y)
    assert torch.isfinite(z.grad).all()
    assert torch.allclose(z.grad.double(), expected, atol=1e-6)
    assert not z.grad[:, ~present].any()


def test_without_gradients_and_per_sample_it_is_the_plain_cross_entropy():
    g = torch.Generator().manual_seed(3)
    z, y = _batch(g, 6, 5)
    loss = AsymmetricCrossEntropy()
    with torch.no_grad():
        assert float(loss(z, y)) == pytest.approx(float(torch.nn.functional.cross_entropy(z, y)))
    # MIR's and GCR's per-sample losses of replayed samples: the replay term, sample by sample
    each = per_sample_loss(replay_criterion(loss), z.requires_grad_(), y)
    assert each.tolist() == pytest.approx(
        torch.nn.functional.cross_entropy(z.detach(), y, reduction="none").tolist())
    assert replay_criterion(torch.nn.CrossEntropyLoss()).__class__ is torch.nn.CrossEntropyLoss


def test_a_single_class_batch_learns_nothing_from_itself():
    z = torch.randn(4, 3, requires_grad=True)
    value = AsymmetricCrossEntropy()(z, torch.tensor([2, 2, 2, 2]))
    value.backward()
    assert float(value) == 0.0 and not z.grad.any()


def test_a_bad_reduction_is_refused_in_one_line():
    with pytest.raises(ValueError, match="^reduction must be 'mean', 'sum' or 'none', got 'max'$"):
        AsymmetricCrossEntropy("max")


@pytest.mark.parametrize("joint", [False, True])
def test_the_rehearsal_learns_incoming_batches_masked_and_replayed_ones_plain(tiny_split, joint):
    # Every incoming step goes through the masked term, every replay step through the
    # plain one, in the separate and the joint schedule, with one of the library's buffers
    calls = {"incoming": 0, "replay": 0}

    class Counting(AsymmetricCrossEntropy):
        def incoming(self, logits, y):
            calls["incoming"] += 1
            return super().incoming(logits, y)

        def for_replay(self):
            calls["replay"] += 1
            return super().for_replay()

    torch.manual_seed(0)
    model = MLP()
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               criterion=Counting(), storage_policy=ReservoirBuffer(20, seed=1),
                               n_iter=2, joint=joint)
    stream = online_benchmark(tiny_split, batch_size=10).train_stream
    strategy.train(stream[:4])
    assert calls == {"incoming": 8, "replay": 6}  # no replay before the buffer holds any
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_stock_avalanche_strategy_learns_with_it_through_the_rehearsal_plugin(tiny_split):
    torch.manual_seed(0)
    model = MLP()
    plugin = OnlineRehearsalPlugin(ReservoirBuffer(20, seed=1), replay_batch_size=5, joint=True)
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                     criterion=AsymmetricCrossEntropy(), train_mb_size=10, plugins=[plugin],
                     evaluator=quiet_evaluator())
    stream = online_benchmark(tiny_split, batch_size=10).train_stream
    before = [p.detach().clone() for p in model.parameters()]
    for experience in stream[:3]:
        strategy.train(experience)
    assert len(plugin.storage_policy) == 20
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_non_finite_joint_replay_loss_is_left_out_of_the_step_and_counted(tiny_split):
    # The joint step learns the replay loss in the incoming batch's backward pass; one that
    # is not finite is left out (the step learns the incoming batch alone) and counted.
    class InfiniteReplay(nn.CrossEntropyLoss):
        def for_replay(self):
            return lambda out, y: F.cross_entropy(out, y) * float("inf")

    torch.manual_seed(0)
    model = MLP()
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               criterion=InfiniteReplay(), storage_policy=ReservoirBuffer(20),
                               n_iter=2, joint=True)
    with pytest.warns(RuntimeWarning, match="non-finite replay loss") as caught:
        strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream[:4])
    replayed = sum("non-finite replay loss" in str(w.message) for w in caught)
    assert strategy.rehearsal.skipped_steps == replayed == 6  # every replay after batch 1
    assert strategy.skipped_steps == 0  # the incoming steps were taken
    assert all(torch.isfinite(p).all() for p in model.parameters())
