"""The online rehearsal loop end to end on tiny real data, inside Avalanche."""

import pytest
import torch
from avalanche.training import Naive
from avalanche.training.plugins import EvaluationPlugin, ReplayPlugin
from avalanche.training.storage_policy import ReservoirSamplingBuffer
from helpers import sgd as _sgd

from avalanche_gss.methods.gss_greedy import GSSGreedy, GSSGreedyBuffer
from avalanche_gss.methods.rand import Rand
from avalanche_gss.methods.reservoir import Reservoir, ReservoirBuffer
from avalanche_gss.models import MLP
from avalanche_gss.streams import online_benchmark
from avalanche_gss.training import OnlineRehearsalPlugin, OnlineTemplate


class StepCounter(OnlineRehearsalPlugin.__mro__[1]):  # a bare SupervisedPlugin
    def __init__(self):
        super().__init__()
        self.iterations = 0
        self.experiences = 0

    def after_training_iteration(self, strategy, **kw):
        self.iterations += 1

    def after_training_exp(self, strategy, **kw):
        self.experiences += 1


def _earlier_tasks_accuracy(model, split):
    """Mean test accuracy on every task but the last (what rehearsal must keep)."""
    model.eval()
    with torch.no_grad():
        accs = [float((model(x).argmax(1) == y).float().mean()) for x, y in split.test]
    return sum(accs[:-1]) / (len(accs) - 1), accs


@pytest.fixture(scope="module")
def earlier_baselines(tiny_split):
    """Rand's and Single's (no memory) earlier-task accuracy in the setting below."""
    out = {}
    for name in ("Rand", "Single"):
        torch.manual_seed(0)
        model = MLP()
        kw = {"model": model, "optimizer": _sgd(model), "n_iter": 3}
        strategy = Rand(mem_size=50, **kw) if name == "Rand" else OnlineTemplate(**kw)
        strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream)
        out[name] = _earlier_tasks_accuracy(model, tiny_split)[0]
    return out


MARGIN = 0.15
"""Earlier-task accuracy by which Reservoir and GSS-Greedy beat Rand and Single, and Rand
beats Single (seed 0: Reservoir 0.69, GSS-Greedy 0.59, Rand 0.32, Single 0.00)."""


@pytest.mark.parametrize("cls", [Reservoir, Rand, GSSGreedy])
def test_strategy_learns_the_stream_with_n_iter_steps_per_batch(tiny_split, earlier_baselines,
                                                                cls):
    torch.manual_seed(0)
    model = MLP()
    counter = StepCounter()
    strategy = cls(model=model, optimizer=_sgd(model), mem_size=50, n_iter=3, plugins=[counter])
    bench = online_benchmark(tiny_split, batch_size=10)
    strategy.train(bench.train_stream)
    assert counter.experiences == 30  # 300 samples in batches of 10
    assert counter.iterations == 90  # n_iter = 3 per batch
    buf = strategy.storage_policy
    assert len(buf) == 50 and buf.n_seen == 300
    # The buffer holds real samples of the stream.
    stream_x = torch.cat([x for x, _ in tiny_split.train]).flatten(1)
    bx, _ = buf.tensors()
    assert all(bool((stream_x == row).all(dim=1).any()) for row in bx.flatten(1)[:10])
    # And the model learnt: the last task is known, and rehearsal kept the earlier ones
    # better than the baselines measured in the same setting, by MARGIN.
    earlier, accs = _earlier_tasks_accuracy(model, tiny_split)
    assert accs[-1] > 0.8
    beaten = ["Single"] if cls is Rand else ["Rand", "Single"]
    for name in beaten:
        assert earlier > earlier_baselines[name] + MARGIN, (accs, earlier_baselines)


def test_replay_step_uses_buffer_samples_and_separate_steps(tiny_split):
    # The plugin takes one extra optimizer step per iteration once the buffer holds data.
    torch.manual_seed(0)
    model = MLP()
    opt = _sgd(model)
    steps = []
    original = opt.step

    def counting_step(*a, **k):
        steps.append(1)
        return original(*a, **k)

    opt.step = counting_step
    strategy = Reservoir(model=model, optimizer=opt, mem_size=20, n_iter=2)
    strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream)
    # First batch: buffer empty -> 2 steps; the other 29 batches: 2 x (batch + replay).
    assert len(steps) == 2 + 29 * 4


def test_storage_policy_works_in_avalanche_replay_plugin(tiny_split):
    # Our buffers are plain ExemplarsBuffers: Avalanche's ReplayPlugin can use them.
    torch.manual_seed(0)
    model = MLP()
    buf = ReservoirBuffer(30)
    strategy = Naive(model=model, optimizer=_sgd(model), train_mb_size=10,
                     plugins=[ReplayPlugin(mem_size=30, storage_policy=buf)],
                     evaluator=EvaluationPlugin())
    bench = online_benchmark(tiny_split, batch_size=10)
    for exp in list(bench.train_stream)[:6]:
        strategy.train(exp)
    assert len(buf) == 30 and buf.n_seen == 60


def test_greedy_buffer_in_avalanche_replay_plugin(tiny_split):
    torch.manual_seed(0)
    model = MLP()
    buf = GSSGreedyBuffer(25)
    strategy = Naive(model=model, optimizer=_sgd(model), train_mb_size=10,
                     plugins=[ReplayPlugin(mem_size=25, storage_policy=buf)],
                     evaluator=EvaluationPlugin())
    for exp in list(online_benchmark(tiny_split, batch_size=10).train_stream)[:8]:
        strategy.train(exp)
    assert len(buf) == 25
    assert (buf.scores[:25] >= 0).all() and (buf.scores[:25] <= 2).all()


def test_plugin_with_an_avalanche_buffer(tiny_split):
    torch.manual_seed(0)
    model = MLP()
    plugin = OnlineRehearsalPlugin(ReservoirSamplingBuffer(20))
    strategy = OnlineTemplate(model=model, optimizer=_sgd(model), n_iter=2, plugins=[plugin])
    strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream)
    assert len(plugin.storage_policy.buffer) == 20


def test_bad_settings_raise():
    model = MLP()
    with pytest.raises(ValueError, match="n_iter"):
        OnlineTemplate(model=model, optimizer=_sgd(model), n_iter=0)
    with pytest.raises(ValueError, match="buffer size"):
        Reservoir(model=model, optimizer=_sgd(model), mem_size=0)
    with pytest.raises(ValueError, match="replay_batch_size"):
        OnlineRehearsalPlugin(ReservoirBuffer(3), replay_batch_size=0)
