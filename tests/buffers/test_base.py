"""Buffer invariants shared by every storage policy, and the Avalanche glue."""

from functools import partial

import pytest
import torch

from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.methods.cbrs import CBRSBuffer
from avalanche_gss.methods.gdumb import GDumbBuffer
from avalanche_gss.methods.gss_greedy import GSSGreedyBuffer
from avalanche_gss.methods.ocs import OCSBuffer
from avalanche_gss.methods.rand import RandBuffer
from avalanche_gss.methods.reservoir import ReservoirBuffer
from avalanche_gss.models import MLP

# OCS keeps k of each batch of 10: k=5 fills the 25 slots within the tests' 80 samples
POLICIES = [ReservoirBuffer, RandBuffer, GSSGreedyBuffer, CBRSBuffer, GDumbBuffer,
            partial(OCSBuffer, k=5)]


def _batches(n_batches, batch=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        yield torch.rand(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("capacity", [1, 7, 25])
def test_buffer_never_exceeds_max_size_and_fills_contiguously(policy, capacity):
    torch.manual_seed(0)
    model = MLP()
    buf = policy(capacity, seed=1)
    for x, y in _batches(8):
        slots = buf.add(x, y, model)
        assert len(buf) <= capacity
        kept = slots[slots >= 0]
        assert len(kept) == len(torch.unique(kept))
        bx, by = buf.tensors()
        # Every stored sample is one of the samples offered, in its slot.
        for i, s in enumerate(slots.tolist()):
            if s >= 0:
                assert torch.equal(bx[s], x[i]) and by[s] == y[i]
    assert len(buf) == capacity  # 80 samples offered: full
    assert buf.n_seen == 80


@pytest.mark.parametrize("policy", POLICIES)
def test_bad_sizes_and_shapes_raise(policy):
    with pytest.raises(ValueError, match="buffer size"):
        policy(0)
    buf = policy(5)
    buf.add(torch.rand(3, 1, 28, 28), torch.zeros(3, dtype=torch.long), MLP())
    with pytest.raises(ValueError, match="do not match"):
        buf.add(torch.rand(3, 784), torch.zeros(3, dtype=torch.long), MLP())
    with pytest.raises(ValueError, match="labels"):
        buf.add(torch.rand(3, 1, 28, 28), torch.zeros(2, dtype=torch.long), MLP())


def test_state_dict_round_trip_continues_identically():
    model = MLP()
    a = ReservoirBuffer(20, seed=3)
    for x, y in _batches(4):
        a.add(x, y)
    b = ReservoirBuffer(20, seed=99)
    b.load_state_dict(a.state_dict())
    for x, y in _batches(4, seed=1):
        assert torch.equal(a.add(x, y, model), b.add(x, y, model))
    assert torch.equal(a.tensors()[0], b.tensors()[0])


def test_buffer_is_an_avalanche_dataset_for_replay_plugin():
    buf = ReservoirBuffer(15)
    for x, y in _batches(3):
        buf.add(x, y)
    data = buf.buffer
    assert len(data) == 15
    x0, y0, t0 = data[0]
    assert torch.equal(x0, buf.x[0]) and int(y0) == int(buf.y[0]) and int(t0) == 0


def test_resize_keeps_a_subset():
    buf = RandBuffer(20)
    for x, y in _batches(3):
        buf.add(x, y)
    before = {tuple(r.flatten()[:5].tolist()) for r in buf.tensors()[0]}
    buf.resize(None, 8)
    after = {tuple(r.flatten()[:5].tolist()) for r in buf.tensors()[0]}
    assert len(buf) == 8 and buf.max_size == 8 and after <= before


def test_base_class_needs_a_policy():
    with pytest.raises(NotImplementedError):
        OnlineBuffer(3).add(torch.rand(2, 4), torch.zeros(2, dtype=torch.long))


class _BNNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, stride=2)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.mark.parametrize("variant", ["paper", "authors"])
def test_greedy_scoring_leaves_no_trace(variant):
    # Scoring must not touch parameters, .grad, optimizer state, BatchNorm running
    # statistics or the train/eval mode (Avalanche's plugin leaks its scoring gradient
    # into the next training step).
    torch.manual_seed(0)
    model = _BNNet().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.rand(10, 1, 28, 28), torch.randint(0, 10, (10,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()  # momentum buffers exist, .grad holds a training gradient
    state = {k: v.clone() for k, v in model.state_dict().items()}
    grads = [p.grad.clone() for p in model.parameters()]
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    buf = GSSGreedyBuffer(12, variant=variant)
    for bx, by in _batches(4):
        buf.add(bx, by, model)
    assert model.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k  # weights and BN running stats
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    assert all(torch.equal(opt.state[p]["momentum_buffer"], m)
               for p, m in zip(model.parameters(), momentum, strict=True))


def test_greedy_stores_scores_and_gates_when_full():
    torch.manual_seed(0)
    model = MLP()
    buf = GSSGreedyBuffer(20, variant="paper")  # the per-sample gate of Algorithm 2
    for bx, by in _batches(2):
        buf.add(bx, by, model)
    assert len(buf) == 20
    scores_before = buf.scores[:20].clone()
    assert ((scores_before >= 0) & (scores_before <= 2)).all()
    # The first batch met an empty buffer: score 1 (cosine 0) by definition.
    assert torch.equal(scores_before[:10], torch.ones(10))
    changed = 0
    for bx, by in _batches(5, seed=3):
        slots = buf.add(bx, by, model)
        for s in slots[slots >= 0].tolist():
            # A sample admitted into a full buffer had score c < 1 (line 9).
            assert buf.scores[s] < 1
            changed += 1
    assert changed > 0


@pytest.mark.parametrize("policy", POLICIES)
def test_a_loaded_state_does_not_share_storage_with_its_source(policy):
    model = MLP()
    first = policy(20, seed=0)
    for x, y in _batches(4):
        first.add(x, y, model)
    second = policy(20, seed=0)
    second.load_state_dict(first.state_dict())
    before = second.tensors()[0].clone()
    for x, y in _batches(4, seed=1):
        first.add(x, y, model)  # the source keeps changing
    assert torch.equal(second.tensors()[0], before)
