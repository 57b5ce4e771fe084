"""``LogitAdjustedLoss``: Logit Adjusted Softmax's loss, against its equation, and in use."""

import math

import pytest
import torch
import torch.nn.functional as F
from avalanche.benchmarks import nc_benchmark
from avalanche.benchmarks.utils import _make_taskaware_tensor_classification_dataset
from avalanche.training import Naive
from avalanche.training.plugins import ReplayPlugin
from helpers.cli import cli

from avalanche_gss.models import MLP
from avalanche_gss.reproduce.runs.training import RunSettings, build_strategy, run, run_label
from avalanche_gss.training import LogitAdjustedLoss, quiet_evaluator


def oracle(batches, tau, window):
    """Each call's loss by the paper's equation, in float64, one sample at a time: the
    cross-entropy of ``z_k + tau * log(c_k + 1e-3)``, ``c_k`` the count of label ``k``
    among the last ``window`` labels seen, this batch's included."""
    seen, losses = [], []
    for z, y in batches:
        seen.extend(int(v) for v in y)
        recent = seen[-window:]
        total = 0.0
        for row, label in zip(z.tolist(), y.tolist(), strict=True):
            adjusted = [v + tau * math.log(recent.count(k) + 1e-3) for k, v in enumerate(row)]
            top = max(adjusted)
            log_sum = top + math.log(sum(math.exp(a - top) for a in adjusted))
            total += log_sum - adjusted[label]
        losses.append(total / len(y))
    return losses


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize(("tau", "window"), [(1.0, 7), (0.5, 40), (2.0, 3), (1.0, 1000)])
def test_each_loss_is_the_papers_equation_on_the_recent_labels(seed, tau, window):
    g = torch.Generator().manual_seed(seed)
    # Batches of varying size whose labels drift, as a class-incremental stream's do
    batches = []
    for b in range(12):
        n = int(torch.randint(1, 9, (1,), generator=g))
        y = torch.randint(0, 3, (n,), generator=g) + min(b // 3, 3)
        batches.append((torch.randn(n, 6, generator=g, dtype=torch.float64), y))
    loss = LogitAdjustedLoss(tau, window)
    got = [loss(z.float().requires_grad_(), y).item() for z, y in batches]
    assert got == pytest.approx(oracle(batches, tau, window), rel=1e-5, abs=1e-5)


def test_the_gradient_is_that_of_the_adjusted_softmax():
    g = torch.Generator().manual_seed(5)
    loss = LogitAdjustedLoss(1.0, 100)
    loss(torch.randn(8, 4, generator=g, requires_grad=True), torch.tensor([0, 0, 0, 0, 0, 1, 1, 2]))
    z = torch.randn(4, 4, generator=g, requires_grad=True)
    y = torch.tensor([3, 0, 1, 0])
    loss(z, y).backward()
    counts = torch.tensor([7.0, 3.0, 1.0, 1.0])  # both batches' labels
    p = torch.softmax(z.detach() + torch.log(counts + 1e-3), dim=1)
    expected = (p - F.one_hot(y, 4)) / 4
    assert torch.allclose(z.grad, expected, atol=1e-6)


def test_without_gradients_it_is_the_plain_cross_entropy_and_counts_nothing():
    loss = LogitAdjustedLoss(1.0, 10)
    loss(torch.zeros(3, 5, requires_grad=True), torch.tensor([4, 4, 4]))
    z, y = torch.randn(6, 5), torch.tensor([0, 1, 2, 3, 4, 4])
    with torch.no_grad():
        assert float(loss(z, y)) == pytest.approx(float(F.cross_entropy(z, y)))
    assert float(loss(z, y)) == pytest.approx(float(F.cross_entropy(z, y)))  # no grad needed
    assert loss.counts(5).tolist() == [0, 0, 0, 0, 3]


def test_the_window_keeps_the_last_labels_and_its_state_resumes():
    loss = LogitAdjustedLoss(1.0, 5)
    loss.observe(torch.tensor([0, 0, 1]))
    loss.observe(torch.tensor([2, 2, 2, 3]))  # 0 and 0 leave the window
    assert loss.counts(4).tolist() == [0, 1, 3, 1]
    loss.observe(torch.arange(8) % 2)  # longer than the window: its last 5 labels stay
    assert loss.counts(4).tolist() == [2, 3, 0, 0]
    copy = LogitAdjustedLoss(1.0, 5)
    copy.load_state_dict(loss.state_dict())
    copy.observe(torch.tensor([3]))
    loss.observe(torch.tensor([3]))
    assert copy.counts(4).tolist() == loss.counts(4).tolist() == [2, 2, 0, 1]
    # A label beyond the logits (a head that has not grown yet) is not counted
    assert loss.counts(2).tolist() == [2, 2]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tau": -1.0}, "tau must be a finite number >= 0, got -1.0"),
    ({"tau": float("nan")}, "tau must be a finite number >= 0, got nan"),
    ({"window": 0}, "window must be an integer >= 1, got 0"),
    ({"window": True}, "window must be an integer >= 1, got True"),
])
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        LogitAdjustedLoss(**kwargs)


def test_a_stock_avalanche_strategy_trains_with_it(mnist):
    # Avalanche's own Naive with its ReplayPlugin, on an Avalanche benchmark: the loss
    # counts every training batch (incoming and replayed samples are one minibatch
    # there) and evaluation is the plain cross-entropy
    labels = torch.as_tensor(mnist.y_train)
    keep = torch.cat([(labels == k).nonzero().flatten()[:50] for k in range(4)])
    x, y = torch.as_tensor(mnist.x_train)[keep], torch.as_tensor(mnist.y_train)[keep]
    data = _make_taskaware_tensor_classification_dataset(x, y)
    bench = nc_benchmark(data, data, n_experiences=2, task_labels=False, shuffle=False)
    loss = LogitAdjustedLoss(1.0, window=10_000)
    model = MLP()
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                     criterion=loss, train_mb_size=20, train_epochs=1,
                     plugins=[ReplayPlugin(mem_size=40)], evaluator=quiet_evaluator())
    for experience in bench.train_stream:
        strategy.train(experience)
    first, second = (len(e.dataset) for e in bench.train_stream)
    # the second experience's minibatches carry 20 replayed samples each
    replayed = 20 * math.ceil(second / 20)
    assert int(loss.counts(10).sum()) == first + second + replayed
    counted = int(loss.counts(10).sum())
    strategy.eval(bench.test_stream)
    assert int(loss.counts(10).sum()) == counted


def test_a_run_with_logit_adjustment_trains_with_the_loss(tiny_split):
    settings = RunSettings("CBRS", buffer_size=30, retrieval="other-classes", n_iter=2,
                           logit_adjustment=1.0, prior_window=50)
    assert run_label(settings) == "CBRS-other-classes-la1-M30-seed0"
    model = MLP()
    strategy = build_strategy(settings, model, torch.optim.SGD(model.parameters(), lr=0.05))
    assert isinstance(strategy._criterion, LogitAdjustedLoss)
    assert (strategy._criterion.tau, strategy._criterion.window) == (1.0, 50)
    adjusted, plain = (run(RunSettings("CBRS", buffer_size=30, n_iter=2, logit_adjustment=t),
                           tiny_split) for t in (1.0, 0.0))
    assert adjusted.task_accuracy != plain.task_accuracy


@pytest.mark.parametrize(("keywords", "message"), [
    ({"logit_adjustment": -0.5}, "logit_adjustment must be a finite number >= 0, got -0.5"),
    ({"logit_adjustment": "1"}, "logit_adjustment must be a finite number >= 0, got '1'"),
    ({"logit_adjustment": True}, "logit_adjustment must be a finite number >= 0, got True"),
    ({"prior_window": 0}, "prior_window must be an integer >= 1, got 0"),
    ({"method": "Single", "logit_adjustment": 1.0},
     "logit_adjustment=1.0 is the loss of the buffer methods' rehearsal, not of 'Single'"),
    ({"method": "GSS-IQP", "update": "constrained", "logit_adjustment": 1.0},
     "logit_adjustment=1.0 is the loss of the buffer methods' rehearsal, not of 'GSS-IQP'"),
])
def test_run_settings_refuse_a_bad_adjustment(keywords, message):
    keywords = {"method": "Reservoir", **keywords}
    with pytest.raises(ValueError, match=f"^{message}"):
        RunSettings(**keywords)


def test_a_checkpoint_resumes_only_into_the_same_adjustment(tmp_path, tiny_split):
    # tau and window are in the saved configuration: another value is refused, in one line
    from avalanche_gss.checkpoint import CheckpointError, load_state, save_state
    from avalanche_gss.methods.cbrs import CBRS
    from avalanche_gss.streams import online_benchmark

    def make(loss):
        model = MLP()
        return CBRS(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                    mem_size=20, n_iter=1, criterion=loss)

    stream = online_benchmark(tiny_split, batch_size=10).train_stream
    strategy = make(LogitAdjustedLoss(1.0, 80))
    strategy.train(stream[:3])
    path = tmp_path / "run.ckpt"
    save_state(strategy, path, experiences=3)
    for other in (LogitAdjustedLoss(0.5, 80), LogitAdjustedLoss(1.0, 60)):
        with pytest.raises(CheckpointError, match="criterion") as err:
            load_state(make(other), path)
        assert "\n" not in str(err.value)
    same = make(LogitAdjustedLoss(1.0, 80))
    load_state(same, path)
    assert same._criterion.counts(10).tolist() == strategy._criterion.counts(10).tolist()
    # 3 incoming batches of 10 and the 2 replay batches of 10 after the first one
    assert int(same._criterion.counts(10).sum()) == 50


def _bad_calls():
    z = torch.zeros(4, 5, requires_grad=True)
    return {
        "a label beyond the logits' classes": (z, torch.tensor([0, 1, 5, 2]),
                                               "label 5 is outside the logits' 5 classes"),
        "a label of -1": (z, torch.tensor([0, -1, 1, 2]), "label -1 is outside the logits'"),
        "float labels": (z, torch.tensor([0.0, 1.0, 2.0, 3.0]),
                         "labels must be integer class indices, got dtype torch.float32"),
        "2-D labels": (z, torch.zeros(4, 5, dtype=torch.long),
                       r"labels must be one class index per sample, shape \(N,\), "
                       r"got shape \(4, 5\)"),
        "class probabilities": (z, torch.full((4, 5), 0.2), "got dtype torch.float32"),
        "fewer labels than logits": (z, torch.tensor([0, 1, 2]),
                                     "3 labels for 4 rows of logits"),
        "more labels than logits": (z, torch.tensor([0, 1, 2, 3, 4]),
                                    "5 labels for 4 rows of logits"),
        "3-D logits": (torch.zeros(4, 5, 2, requires_grad=True),
                       torch.zeros(4, 2, dtype=torch.long),
                       r"logits must be \(N, num_classes\), got shape \(4, 5, 2\)"),
    }


@pytest.mark.parametrize("bad", list(_bad_calls()))
def test_a_refused_call_counts_nothing(bad):
    # Given a loss whose window of 6 labels has wrapped around
    loss, twin = LogitAdjustedLoss(1.0, 6), LogitAdjustedLoss(1.0, 6)
    for y in (torch.tensor([0, 1, 2, 3]), torch.tensor([4, 4, 1])):
        for each in (loss, twin):
            each(torch.zeros(len(y), 5, requires_grad=True), y)
    before = {k: v.clone() for k, v in loss.state_dict().items()}
    # When a training call's labels cannot be scored against its logits
    logits, y, message = _bad_calls()[bad]
    with pytest.raises(ValueError, match=message) as err:
        loss(logits, y)
    assert "\n" not in str(err.value)
    # Then its state is the one before the call, and it goes on as if the call never came
    after = loss.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(v, after[k]) for k, v in before.items())
    z, y = torch.randn(3, 5, requires_grad=True), torch.tensor([2, 2, 0])
    assert torch.equal(loss(z, y), twin(z, y))
    assert loss.counts(5).tolist() == twin.counts(5).tolist()


@pytest.mark.parametrize(("y", "message"), [
    (torch.tensor([0, -1]), "labels must be >= 0, got -1"),
    (torch.tensor([0.0, 1.0]), "got dtype torch.float32"),
    (torch.tensor([[0, 1]]), r"got shape \(1, 2\)"),
])
def test_observe_refuses_labels_it_cannot_count(y, message):
    loss = LogitAdjustedLoss(1.0, 4)
    loss.observe(torch.tensor([1, 2, 3]))
    before = {k: v.clone() for k, v in loss.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        loss.observe(y)
    assert all(torch.equal(v, loss.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tau": 1e39}, r"tau must be at most 100 \(.*\), got 1e\+39$"),
    ({"tau": 100.5}, r"tau must be at most 100 \(.*\), got 100.5$"),
    ({"window": 10**12},
     "window must be at most 10,000,000 labels, got 1,000,000,000,000: its int64 labels "
     "would take 8,000,000,000,000 bytes"),
    ({"window": 10**9}, "would take 8,000,000,000 bytes"),
])
def test_a_tau_or_window_beyond_the_bounds_is_refused_before_any_allocation(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        LogitAdjustedLoss(**kwargs)
    assert "\n" not in str(err.value)


def test_the_largest_tau_keeps_the_loss_and_its_gradient_finite():
    # tau = 100 on a window with absent and frequent classes, in float32 and bfloat16
    for dtype in (torch.float32, torch.bfloat16):
        loss = LogitAdjustedLoss(100, 50)
        loss(torch.zeros(50, 4, requires_grad=True), torch.zeros(50, dtype=torch.long))
        z = (torch.randn(6, 4) * 20).to(dtype).requires_grad_()
        value = loss(z, torch.tensor([0, 1, 2, 3, 3, 1]))
        value.backward()
        assert torch.isfinite(value) and bool(torch.isfinite(z.grad).all())


@pytest.mark.parametrize(("keywords", "message"), [
    ({"logit_adjustment": 1e39}, r"logit_adjustment must be at most 100 \(.*\), got 1e\+39$"),
    ({"logit_adjustment": 1.0, "prior_window": 10**12},
     "prior_window must be at most 10,000,000 labels, got 1,000,000,000,000: its int64 "
     "labels would take 8,000,000,000,000 bytes$"),
    ({"logit_adjustment": 1.0, "prior_window": 10**9},
     "prior_window must be at most 10,000,000 labels, got 1,000,000,000: its int64 "
     "labels would take 8,000,000,000 bytes$"),
])
def test_run_settings_refuse_an_adjustment_beyond_the_bounds(keywords, message):
    with pytest.raises(ValueError, match=f"^{message}") as err:
        RunSettings("Reservoir", **keywords)
    assert "\n" not in str(err.value)
    RunSettings("Reservoir", logit_adjustment=100, prior_window=10**7)  # the bounds themselves


@pytest.mark.slow
def test_which_buffer_refuses_an_adjustment_beyond_the_bounds_before_any_run(tmp_path):
    res = cli("which-buffer", "--quick", "--streams", "disjoint", "--seeds", "0",
              "--policies", "Reservoir:loss.logit_adjustment=1e39",
              "Reservoir:loss.logit_adjustment=1.0,loss.prior_window=1000000000000",
              "--out", "o", cwd=tmp_path, warm=True)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert ("Reservoir:loss.logit_adjustment=1e39 (logit_adjustment must be at most 100"
            in lines[0])
    assert "prior_window must be at most 10,000,000 labels" in lines[0]
    assert "8,000,000,000,000 bytes" in lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_running_counts_are_the_windows_recount_after_every_call(seed):
    # Calls of every size (longer than the window too), labels that grow past the counts
    # kept so far, a state loaded mid-way: the counts are always the window's recount
    g = torch.Generator().manual_seed(seed)
    window = int(torch.randint(1, 12, (1,), generator=g))
    loss, seen = LogitAdjustedLoss(1.0, window), []
    ring, filled = [-1] * window, 0  # the saved window, written in a circle
    for step in range(40):
        n = int(torch.randint(0, 2 * window + 2, (1,), generator=g))
        y = torch.randint(0, 3 + step // 5, (n,), generator=g)
        if step % 3:
            loss.observe(y)
        elif n:
            loss(torch.zeros(n, 3 + step // 5, requires_grad=True), y)
        seen.extend(y.tolist())
        for label in y.tolist()[-window:]:  # a call longer than the window: its last labels
            ring[filled % window] = label
            filled += 1
        if step == 20:
            fresh = LogitAdjustedLoss(1.0, window)
            fresh.load_state_dict(loss.state_dict())
            loss = fresh
        recent = seen[-window:]
        width = 12
        assert loss.counts(width).tolist() == [float(recent.count(k)) for k in range(width)]
        assert loss.recent.tolist() == ring and int(loss.filled) == filled
        assert loss.state_dict()["recent"].tolist() == ring


@pytest.mark.parametrize("tau", [1.0, 0.5, 3.7])
def test_the_adjustment_is_the_formulas_float32_ops_bit_for_bit(tau):
    # Looked up by count, it must give what tau * log(c + eps) gives on a tensor of counts
    loss = LogitAdjustedLoss(tau, 5000)
    g = torch.Generator().manual_seed(0)
    loss.observe(torch.randint(0, 7, (4000,), generator=g))
    counts = loss.counts(9)
    assert torch.equal(loss.adjustment(9), counts.clone().add_(1e-3).log_().mul_(tau))
    every = torch.arange(5001, dtype=torch.float32)
    loss._tally = every.long().tolist()  # every count the window allows, at once
    assert torch.equal(loss.adjustment(5001), every.add_(1e-3).log_().mul_(tau))
    loss.tau = 2.0  # a changed tau: a new table
    assert torch.equal(loss.adjustment(9), loss.counts(9).add_(1e-3).log_().mul_(2.0))
