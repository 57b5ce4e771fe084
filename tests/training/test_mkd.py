"""MKD: the distillation term and the EMA teacher against their equations, and in use."""

import math

import pytest
import torch
from avalanche.training import Naive
from avalanche.training.plugins import ReplayPlugin

from avalanche_gss import ReservoirBuffer
from avalanche_gss.models import MLP
from avalanche_gss.streams import online_benchmark
from avalanche_gss.training import (
    MKDPlugin,
    OnlineRehearsal,
    OnlineRehearsalPlugin,
    distillation,
    quiet_evaluator,
)


def oracle_distillation(student, teacher, tau):
    """``tau^2 * mean_i sum_k q_ik (log q_ik - log p_ik)`` in float64, one sample at a time,
    ``q = softmax(teacher / tau)``, ``p = softmax(student / tau)``."""
    def log_softmax(row):
        top = max(v / tau for v in row)
        log_sum = top + math.log(sum(math.exp(v / tau - top) for v in row))
        return [v / tau - log_sum for v in row]

    total = 0.0
    for s, t in zip(student.double().tolist(), teacher.double().tolist(), strict=True):
        lp, lq = log_softmax(s), log_softmax(t)
        total += sum(math.exp(q) * (q - p) for p, q in zip(lp, lq, strict=True))
    return tau**2 * total / len(student)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("tau", [1.0, 2.0, 4.0])
def test_the_distillation_is_the_papers_equation(seed, tau):
    g = torch.Generator().manual_seed(seed)
    student = torch.randn(6, 5, generator=g) * 3
    teacher = torch.randn(6, 5, generator=g) * 3
    got = distillation(student.requires_grad_(), teacher, tau)
    assert got.item() == pytest.approx(oracle_distillation(student.detach(), teacher, tau),
                                       rel=1e-5, abs=1e-7)
    got.backward()  # the gradient reaches the student only
    assert student.grad is not None and torch.isfinite(student.grad).all()
    # with the teacher's own logits, nothing to distil
    assert distillation(teacher, teacher, tau).item() == pytest.approx(0.0, abs=1e-6)


def test_a_head_that_grew_is_compared_on_the_classes_both_have():
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(4, 7, generator=g), torch.randn(4, 5, generator=g)
    assert distillation(student, teacher, 2.0).item() == pytest.approx(
        oracle_distillation(student[:, :5], teacher, 2.0), rel=1e-5)


def _learner(seed=0):
    torch.manual_seed(seed)
    model = MLP()
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


class _Snapshots(MKDPlugin):
    """Records the learner's weights at each EMA update, and every loss it adds to."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.snapshots, self.added = [], []

    def update_teacher(self, model):
        self.snapshots.append([p.detach().double().clone() for p in model.parameters()])
        super().update_teacher(model)

    def before_backward(self, strategy, **kwargs):
        before = strategy.loss.detach().clone()
        super().before_backward(strategy, **kwargs)
        x = strategy.mbatch[0]
        with torch.no_grad():
            teacher = self.teacher(x)
        self.added.append((float(strategy.loss.detach() - before),
                           self.weight * oracle_distillation(strategy.mb_output.detach(),
                                                             teacher, self.temperature)))


@pytest.mark.parametrize(("momentum", "joint"), [(0.99, False), (0.9, True), (0.5, False)])
def test_the_teacher_is_the_moving_average_of_the_learner(tiny_split, momentum, joint):
    model, sgd = _learner()
    initial = [p.detach().double().clone() for p in model.parameters()]
    mkd = _Snapshots(momentum=momentum, temperature=2.0, weight=3.0)
    strategy = OnlineRehearsal(model=model, optimizer=sgd, storage_policy=ReservoirBuffer(20),
                               n_iter=2, joint=joint, plugins=[mkd])
    strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream[:4])
    # The EMA, in float64, of the learner after each iteration, from the learner at the start
    expected = initial
    for snap in mkd.snapshots:
        expected = [momentum * e + (1 - momentum) * s for e, s in zip(expected, snap, strict=True)]
    assert len(mkd.snapshots) == mkd.updates == 8
    for got, want in zip(mkd.teacher.parameters(), expected, strict=True):
        assert torch.allclose(got.double(), want, atol=1e-5)
    # Each incoming step's loss gained lambda times the distillation from the teacher
    for added, oracle in mkd.added:
        assert added == pytest.approx(oracle, rel=1e-4, abs=1e-6)


def test_the_replay_step_gains_the_term_on_the_replay_batch(tiny_split):
    seen = []

    class Recording(MKDPlugin):
        def replay_term(self, strategy, x, t, out):
            value = super().replay_term(strategy, x, t, out)
            seen.append((len(x), value.item()))
            return value

    model, sgd = _learner()
    strategy = OnlineRehearsal(model=model, optimizer=sgd, storage_policy=ReservoirBuffer(20),
                               replay_batch_size=7, n_iter=1, plugins=[Recording()])
    strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream[:3])
    assert [n for n, _ in seen] == [7, 7] and all(v >= 0 for _, v in seen)


def test_with_weight_zero_the_run_is_the_plain_rehearsal(tiny_split):
    stream = online_benchmark(tiny_split, batch_size=10).train_stream[:4]
    finals = []
    for plugins in ([], [MKDPlugin(weight=0.0)]):
        model, sgd = _learner()
        OnlineRehearsal(model=model, optimizer=sgd, storage_policy=ReservoirBuffer(20, seed=3),
                        n_iter=2, plugins=plugins).train(stream)
        finals.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*finals, strict=True))


def test_a_stock_avalanche_strategy_learns_with_it(tiny_split):
    model, sgd = _learner()
    mkd = MKDPlugin()
    strategy = Naive(model=model, optimizer=sgd, train_mb_size=10, evaluator=quiet_evaluator(),
                     plugins=[ReplayPlugin(mem_size=20), mkd])
    for experience in online_benchmark(tiny_split, batch_size=10).train_stream[:3]:
        strategy.train(experience)
    assert mkd.updates == 3
    assert all(torch.isfinite(p).all() for p in mkd.teacher.parameters())


def test_its_state_resumes_the_teacher(tiny_split):
    stream = online_benchmark(tiny_split, batch_size=10).train_stream[:4]
    model, sgd = _learner()
    mkd = MKDPlugin(momentum=0.9)
    plugin = OnlineRehearsalPlugin(ReservoirBuffer(20), joint=True)
    strategy = Naive(model=model, optimizer=sgd, train_mb_size=10, evaluator=quiet_evaluator(),
                     plugins=[plugin, mkd])
    for experience in stream[:2]:
        strategy.train(experience)
    state = mkd.state_dict()
    again = MKDPlugin(momentum=0.9)
    again.load_state_dict(state)
    assert again.updates == 2
    x = torch.randn(3, 784)
    assert torch.equal(again.teacher_logits(model, x, None), mkd.teacher_logits(model, x, None))
    assert not torch.equal(again.teacher_logits(model, x, None), model(x))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"momentum": 1.0}, r"momentum must be a number in \[0, 1\), got 1.0"),
    ({"momentum": -0.1}, r"momentum must be a number in \[0, 1\), got -0.1"),
    ({"temperature": 0}, r"temperature must be a number in \(0, 100\], got 0"),
    ({"weight": float("nan")}, r"weight must be a number in \[0, 1e6\], got nan"),
    ({"weight": True}, r"weight must be a number in \[0, 1e6\], got True"),
])
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        MKDPlugin(**kwargs)


def test_a_checkpoint_resumes_a_run_with_it_exactly(tmp_path, tiny_split):
    from avalanche_gss.checkpoint import load_state, save_state

    stream = online_benchmark(tiny_split, batch_size=10).train_stream[:5]

    def make():
        model, sgd = _learner()
        return OnlineRehearsal(model=model, optimizer=sgd, storage_policy=ReservoirBuffer(20),
                               n_iter=2, plugins=[MKDPlugin(momentum=0.9)])

    whole = make()
    whole.train(stream)
    first = make()
    first.train(stream[:3])
    save_state(first, tmp_path / "run.ckpt", experiences=3)
    resumed = make()
    load_state(resumed, tmp_path / "run.ckpt")
    resumed.train(stream[3:])
    for a, b in zip(whole.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
