"""The training loop's paper claims and fault paths of the user guide, each pinned by what it does.

- The rehearsal schedule: ``n_iter`` times (a step on the incoming batch, then a step on
  exactly ``replay_batch_size`` distinct buffer rows), the buffer being the one left by
  the previous batches.
- Faults the user guide promises: labels out of range under ``nn.NLLLoss``, a replay step with
  a non-finite loss, a constrained step with non-finite buffer gradients, and the global
  NumPy / Python generators restored by ``load_state``.
"""

import math
import random

import numpy as np
import pytest
import torch
from avalanche.core import SupervisedPlugin
from helpers import experiences as _batches
from torch import nn
from torch.nn import functional as F

from avalanche_gss.checkpoint import load_state, save_state
from avalanche_gss.methods.reservoir import Reservoir, ReservoirBuffer
from avalanche_gss.models import MLP
from avalanche_gss.training import ConstrainedUpdatePlugin, OnlineRehearsalPlugin, OnlineTemplate
from avalanche_gss.training.retrieval import draw

D, C = 12, 10


class Recording(nn.Module):
    """The MLP, recording the inputs of every training-mode forward with gradients."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inner = MLP(input_size=D, hidden_sizes=(16,), num_classes=C)
        self.classifier = self.inner.classifier
        self.log: list[torch.Tensor] = []

    def forward(self, x):
        if self.training and torch.is_grad_enabled():
            self.log.append(x.detach().clone())
        return self.inner(x)


class BufferSnapshot(SupervisedPlugin):
    """Stores the buffer's rows at the start of every experience."""

    def __init__(self, buf):
        super().__init__()
        self.buf = buf
        self.rows: list[torch.Tensor] = []

    def before_training_exp(self, strategy, **kwargs):
        self.rows.append(self.buf.tensors()[0].clone() if len(self.buf) else torch.zeros(0, D))


def _stream(n, seed=0, labels=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D, generator=g)
    y = torch.randint(0, C, (n,), generator=g) if labels is None else labels
    return x, y


def _row_in(rows, r):
    return bool((rows == r).all(dim=1).any())


@pytest.mark.parametrize("n_iter", [1, 3])
def test_each_iteration_steps_on_the_batch_then_on_replay_batch_size_distinct_buffer_rows(
    n_iter,
):
    # Given Reservoir rehearsal with the default replay batch (the authors' 10) and a
    # 25-slot buffer, on 8 batches of 10 random samples,
    model = Recording()
    strategy = Reservoir(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                         mem_size=25, n_iter=n_iter)
    assert strategy.rehearsal.replay_batch_size == 10
    snap = BufferSnapshot(strategy.storage_policy)
    strategy.plugins.append(snap)
    x, y = _stream(80)
    strategy.train(_batches(x, y))
    # Then the training forwards are, per batch: n_iter x (batch, replay) once the buffer
    # holds samples (the first batch: n_iter steps on the batch alone),
    log = model.log
    assert len(log) == n_iter + 7 * 2 * n_iter
    pos = n_iter
    for e in range(1, 8):
        batch_x = x[e * 10:(e + 1) * 10]
        stored = snap.rows[e]  # the buffer as the previous batches left it
        assert len(stored) == min(25, e * 10)
        for _ in range(n_iter):
            assert torch.equal(log[pos], batch_x)
            replay = log[pos + 1]
            # each replay step: exactly 10 rows, distinct, all from the buffer.
            assert replay.shape == (10, D)
            assert len(torch.unique(replay, dim=0)) == 10
            assert all(_row_in(stored, r) for r in replay)
            assert not any(_row_in(batch_x, r) for r in replay)
            pos += 2
    assert all(torch.equal(log[i], x[:10]) for i in range(n_iter))


def test_replay_draws_are_uniform_over_the_buffer():
    # Given a full 20-slot buffer, When the plugin draws 6000 replay batches of 5, Then
    # every slot is drawn 6000 * 5 / 20 = 1500 times in expectation: chi-square (19
    # degrees of freedom) below its 99.9th percentile, 43.8.
    buf = ReservoirBuffer(20, seed=0)
    buf.add(torch.arange(20.0)[:, None], torch.zeros(20, dtype=torch.long))
    plugin = OnlineRehearsalPlugin(buf, replay_batch_size=5, seed=1)
    counts = torch.zeros(20)
    for _ in range(6000):
        bx, _, _ = draw(buf, plugin.replay_batch_size, plugin.generator, "cpu")
        assert len(torch.unique(bx)) == 5
        counts[bx.flatten().long()] += 1
    chi2 = float(((counts - 1500) ** 2 / 1500).sum())
    assert chi2 < 43.8, counts
    # And the plugin's default replay batch is the authors' 10 samples.
    default = OnlineRehearsalPlugin(buf)
    bx, by, bt = draw(buf, default.replay_batch_size, default.generator, "cpu")
    assert bx.shape == (10, 1) and len(torch.unique(bx)) == 10


class LogSoftmaxMLP(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inner = MLP(input_size=D, hidden_sizes=(16,), num_classes=C)
        self.classifier = self.inner.classifier

    def forward(self, x):
        return F.log_softmax(self.inner(x), dim=1)


def test_labels_outside_the_outputs_raise_a_clear_error_under_nll_loss():
    # Given a log-softmax model trained with nn.NLLLoss (user guide: "cross-entropy and NLL
    # criteria"), When a batch holds label 12 (10 outputs), Then a ValueError names it
    # before any step (PyTorch itself would raise an IndexError).
    model = LogSoftmaxMLP()
    strategy = Reservoir(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                         mem_size=20, n_iter=1, criterion=nn.NLLLoss())
    x, y = _stream(30)
    strategy.train(_batches(x[:20], y[:20]))
    before = [p.detach().clone() for p in model.parameters()]
    y_bad = y[20:].clone()
    y_bad[3] = 12
    with pytest.raises(ValueError, match="label 12 is outside the model's 10 outputs"):
        strategy.train(_batches(x[20:], y_bad))
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters(), strict=True))


class InfOnLabel(nn.Module):
    """Mean cross-entropy, infinite as soon as the batch holds ``label``."""

    def __init__(self, label):
        super().__init__()
        self.label = label

    def forward(self, logits, y):
        per = F.cross_entropy(logits, y, reduction="none")
        return (per * torch.where(y == self.label, math.inf, 1.0)).mean()


def test_a_replay_step_with_a_non_finite_loss_is_skipped():
    # Given a criterion that is infinite on label 9, and a buffer that stored label-9
    # samples (their own batch steps were skipped by the strategy),
    model = MLP(input_size=D, hidden_sizes=(16,), num_classes=C)
    strategy = Reservoir(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                         mem_size=10, n_iter=1, criterion=InfOnLabel(9))
    x, _ = _stream(40)
    y = torch.cat([torch.full((10,), 9), torch.arange(30) % 9])  # 9 only in the first batch
    strategy.train(_batches(x[:10], y[:10]))
    assert strategy.skipped_steps == 1 and len(strategy.storage_policy) == 10
    # When later batches (finite loss) are replayed against that buffer,
    with pytest.warns(RuntimeWarning, match="non-finite loss"):
        strategy.train(_batches(x[10:], y[10:]))
    # Then every replay step (all 10 stored samples have label 9 at first) is skipped and
    # counted, and the weights stay finite.
    assert strategy.rehearsal.skipped_steps >= 1
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_a_constrained_step_with_non_finite_buffer_gradients_is_not_projected():
    # Given the constrained update whose per-sample loss is infinite on label 9 and a
    # buffer holding label-9 samples (the strategy's own criterion is finite),
    model = MLP(input_size=D, hidden_sizes=(16,), num_classes=C)

    def loss_fn(logits, y):
        return F.cross_entropy(logits, y, reduction="none") * torch.where(y == 9, math.inf, 1.0)

    buf = ReservoirBuffer(10, seed=0)
    plugin = ConstrainedUpdatePlugin(buf, loss_fn=loss_fn)
    strategy = OnlineTemplate(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                              n_iter=1, plugins=[plugin])
    x, _ = _stream(30)
    y = torch.cat([torch.full((10,), 9), torch.arange(20) % 9])
    strategy.train(_batches(x[:10], y[:10]))
    assert len(buf) == 10
    # When batches without label 9 are learnt, Then each step warns and is not projected
    # (the batch's own step is taken, and the weights stay finite).
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.warns(RuntimeWarning, match="non-finite gradients; the step is not projected"):
        strategy.train(_batches(x[10:20], y[10:20]))
    assert plugin.projections == 0 and plugin.steps == 0
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert any(not torch.equal(p, q) for p, q in zip(before, model.parameters(), strict=True))


def test_load_state_restores_the_numpy_and_python_generators(tmp_path):
    # Given a checkpoint saved mid-run, When the global NumPy and Python generators move
    # on and the checkpoint is loaded into a fresh strategy, Then both generators give
    # the draws they would have given right after the save.
    def build():
        model = MLP(input_size=D, hidden_sizes=(16,), num_classes=C)
        return Reservoir(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                         mem_size=10, n_iter=1)

    x, y = _stream(20)
    first = build()
    first.train(_batches(x, y))
    np.random.seed(123)
    random.seed(456)
    save_state(first, tmp_path / "ckpt.pt", experiences=2)
    expected_np = np.random.rand(5).tolist()
    expected_py = [random.random() for _ in range(5)]
    np.random.seed(1)
    random.seed(2)
    second = build()
    assert load_state(second, tmp_path / "ckpt.pt") == 2
    assert np.random.rand(5).tolist() == expected_np
    assert [random.random() for _ in range(5)] == expected_py
