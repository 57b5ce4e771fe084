"""The constrained update of appendix C (GEM's projection on the buffer's samples)."""

from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional as F

from avalanche_gss.gradients import per_sample_grad_loop
from avalanche_gss.methods.gss_iqp import GSSIQPConstrained
from avalanche_gss.methods.reservoir import ReservoirBuffer
from avalanche_gss.models import MLP
from avalanche_gss.reproduce.runs.training import RunSettings, run
from avalanche_gss.streams import online_benchmark
from avalanche_gss.training import ConstrainedUpdatePlugin, gem_dual


def _flat_grad(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()]).clone()


def _step(model, buffer_x, buffer_y, x, y, **plugin_kwargs):
    """Backward on the batch, then the plugin's hook; return (plugin, g, g~, G)."""
    buffer = ReservoirBuffer(len(buffer_y))
    buffer.add(buffer_x, buffer_y)
    plugin = ConstrainedUpdatePlugin(buffer, **plugin_kwargs)
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    g = _flat_grad(model)
    plugin.after_backward(SimpleNamespace(model=model, mb_x=x, mb_y=y))
    grads = per_sample_grad_loop(model, buffer_x, buffer_y)  # (K, P), the oracle
    return plugin, g, _flat_grad(model), grads


@pytest.fixture
def model():
    torch.manual_seed(0)
    return MLP(hidden_sizes=(50,))


@pytest.mark.parametrize("margin", [0.0, 0.5])
def test_projected_update_increases_no_buffer_loss(tiny_split, model, margin):
    # Given a buffer of 20 digits of task 1 and a batch of task 5, whose gradient
    # conflicts with some buffer samples' gradients,
    (x1, y1), (x5, y5) = tiny_split.train[0], tiny_split.train[4]
    ridge = 1e-6
    plugin, g, g_new, grads = _step(model, x1[:20], y1[:20], x5[:10], y5[:10],
                                    margin=margin, ridge=ridge)
    assert bool((grads @ g < 0).any())
    assert plugin.projections == 1 and plugin.last_violations > 0
    # then the projected update has a non-negative inner product with every buffer
    # sample's gradient (GEM's KKT: <g~, g_i> = lambda_i - ridge * v_i >= -ridge * v_i),
    v = plugin.last_dual.float()
    dots = grads @ g_new  # (K,)
    scale = float(grads.norm(dim=1).max() * g_new.norm())
    assert bool((dots >= -ridge * v - 1e-4 * scale).all()), dots
    # it is g + G^T v with v >= margin,
    assert bool((v >= margin - 1e-9).all())
    assert torch.allclose(g_new, g + grads.T @ v, atol=1e-5 * float(g_new.abs().max()))
    if margin == 0.0:
        # and, with no margin, it is the Euclidean projection onto the feasible cone:
        # complementary slackness v_i <g~, g_i> = 0 on top of feasibility.
        assert float((v * dots).abs().max()) <= 1e-4 * scale * float(v.max())


def test_update_is_untouched_when_no_constraint_is_violated(tiny_split, model):
    x, y = tiny_split.train[0]
    # The batch's own sample as the only constraint: <g, g> >= 0.
    plugin, g, g_new, _ = _step(model, x[:1], y[:1], x[:1], y[:1], margin=0.5)
    assert plugin.steps == 1 and plugin.projections == 0 and plugin.last_violations == 0
    assert torch.equal(g_new, g)


def test_empty_buffer_is_skipped(tiny_split, model):
    x, y = tiny_split.train[0]
    plugin = ConstrainedUpdatePlugin(ReservoirBuffer(5))
    model.zero_grad()
    F.cross_entropy(model(x[:10]), y[:10]).backward()
    g = _flat_grad(model)
    plugin.after_backward(SimpleNamespace(model=model, mb_x=x[:10], mb_y=y[:10]))
    assert plugin.steps == 0 and torch.equal(_flat_grad(model), g)


def test_gem_dual_matches_a_hand_solved_case():
    # g = (1, -1), one constraint g_1 = (0, 1): <g, g_1> = -1, so v = 1 and g~ = (1, 0).
    gram = torch.tensor([[1.0]])
    v = gem_dual(gram, torch.tensor([-1.0]), margin=0.0, ridge=1e-12)
    assert v is not None and float(v[0]) == pytest.approx(1.0, abs=1e-9)
    v = gem_dual(gram, torch.tensor([-1.0]), margin=2.0, ridge=1e-12)
    assert float(v[0]) == pytest.approx(2.0)  # the margin binds


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="margin"):
        ConstrainedUpdatePlugin(ReservoirBuffer(5), margin=-1)
    with pytest.raises(ValueError, match="ridge"):
        ConstrainedUpdatePlugin(ReservoirBuffer(5), ridge=0)


def test_constrained_strategy_projects_instead_of_replaying(tiny_split):
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    steps = []
    optimizer.register_step_post_hook(lambda *args: steps.append(1))
    strategy = GSSIQPConstrained(model=model, optimizer=optimizer, mem_size=40,
                                 recent_size=50, n_iter=2)
    strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream)
    # One optimizer step per iteration: 30 batches x n_iter, no replay step.
    assert len(steps) == 60
    buf = strategy.storage_policy
    assert len(buf) == 40 and buf.n_seen == 300 and buf.n_recent == 0
    assert strategy.constrained.projections > 0
    assert strategy.constrained.steps == 60 - 2 * 5  # the buffer is empty for 5 batches


def test_constrained_update_runs_through_the_registry(tiny_split, baselines):
    result = run(RunSettings(method="GSS-IQP", update="constrained", buffer_size=40, n_iter=1),
                 tiny_split)
    assert len(result.task_accuracy) == tiny_split.n_tasks
    # Beats Rand and Single on the same split by MARGIN points (tests/conftest.py).
    assert result.avg > baselines.floor, (result.task_accuracy, baselines.floor)
    assert 0 < result.extras["projected_steps"] <= result.extras["constrained_steps"] == 20


@pytest.mark.parametrize("bad", [{"method": "GSS-Greedy", "update": "constrained"},
                                 {"method": "GSS-IQP", "update": "projected"},
                                 {"method": "GSS-IQP", "options": {"recent": 50}}])
def test_bad_update_settings_raise(bad):
    with pytest.raises(ValueError):
        RunSettings(**bad)
