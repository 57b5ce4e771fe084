"""Faults and bad input: each ends in a clear error or a stated fallback, never in a buffer
that silently shrank or holds garbage (the user guide, "Reliability")."""

import copy
import math
import sys

import pytest
import torch
from helpers import experiences as batches
from torch import nn
from torch.nn import functional as F

from avalanche_gss.gradients import per_sample_grad_loop, sample_gram
from avalanche_gss.methods.cb_gss import CBGSS, CBGSSBuffer
from avalanche_gss.methods.cbrs import CBRS, CBRSBuffer
from avalanche_gss.methods.clust import FSSClust, FSSClustBuffer, GSSClust, GSSClustBuffer
from avalanche_gss.methods.gdumb import GDumb, GDumbBuffer
from avalanche_gss.methods.gss_greedy import GSSGreedy, GSSGreedyBuffer
from avalanche_gss.methods.gss_iqp import GSSIQP, GSSIQPBuffer, GSSIQPConstrained
from avalanche_gss.methods.rand import Rand, RandBuffer
from avalanche_gss.methods.reservoir import Reservoir, ReservoirBuffer
from avalanche_gss.models import MLP
from avalanche_gss.streams import TensorExperience, online_benchmark

STRATEGIES = {
    "Reservoir": Reservoir,
    "Rand": Rand,
    "GSS-Greedy": GSSGreedy,
    "GSS-IQP": lambda **kw: GSSIQP(recent_size=20, **kw),
    "GSS-Clust": lambda **kw: GSSClust(recent_size=20, growth=1.01, **kw),
    "FSS-Clust": lambda **kw: FSSClust(recent_size=20, **kw),
    "GSS-IQP-constrained": lambda **kw: GSSIQPConstrained(recent_size=20, **kw),
    "CBRS": CBRS,
    "GDumb": GDumb,
    "CB-GSS": CBGSS,
    "CB-GSS-step": lambda **kw: CBGSS(score_from="step", **kw),
}
GRADIENT_BUFFERS = {
    "GSS-Greedy": lambda m, **kw: GSSGreedyBuffer(m, **kw),
    "GSS-IQP": lambda m, **kw: GSSIQPBuffer(m, recent_size=20, **kw),
    "GSS-Clust": lambda m, **kw: GSSClustBuffer(m, recent_size=20, growth=1.01, **kw),
    "CB-GSS": lambda m, **kw: CBGSSBuffer(m, **kw),
}


def mlp(seed=0):
    torch.manual_seed(seed)
    return MLP()


def strategy(name, *, mem_size=20, n_iter=2, **kw):
    model = mlp()
    return STRATEGIES[name](model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                            mem_size=mem_size, n_iter=n_iter, **kw)


def diverged(model):
    """A copy of ``model`` whose logits are NaN/inf: every loss gradient is non-finite."""
    bad = copy.deepcopy(model)
    with torch.no_grad():
        bad.classifier.weight[0, 0] = math.inf
    return bad


def inf_loss_for(label):
    """Cross-entropy, infinite for the samples of ``label`` (their gradients are not finite)."""

    def loss_fn(logits, y):
        weight = torch.where(y == label, math.inf, 1.0)
        return F.cross_entropy(logits, y, reduction="none") * weight

    return loss_fn


@pytest.fixture
def stream(tiny_split):
    return tiny_split.stream_tensors()  # 300 digits, 5 tasks of 2 classes, in order


def _stored(buf):
    x, y = buf.tensors()
    return x.clone(), y.clone(), buf.scores[: len(buf)].clone()


# ---------------------------------------------------------------- NaN / inf
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_nan_or_inf_input_skips_the_step_and_is_never_stored(stream, name):
    # Given a stream whose 6th batch holds a NaN and an inf pixel
    x, y = stream
    x = x[:120].clone()
    x[52, 0, 3, 3] = math.nan
    x[57, 0, 5, 5] = math.inf
    s = strategy(name)
    # When the strategy learns it
    with pytest.warns(RuntimeWarning) as record:
        s.train(batches(x, y[:120]))
    messages = " ".join(str(w.message) for w in record)
    # Then the training steps on that batch (loss NaN) are skipped, the model stays finite
    assert "non-finite loss" in messages and s.skipped_steps == 2
    assert all(bool(torch.isfinite(p).all()) for p in s.model.parameters())
    # And the two bad samples are refused by every buffer, the other eight are offered
    buf = s.storage_policy
    assert "2 sample(s) with NaN or infinite inputs not stored" in messages
    assert buf.n_rejected == 2 and buf.n_seen == 118
    assert bool(torch.isfinite(buf.tensors()[0]).all())
    assert bool(torch.isfinite(buf.scores[: len(buf)]).all())


def test_greedy_refuses_samples_whose_gradient_is_not_finite(stream):
    # Given a GSS-Greedy buffer holding digits 0/1, and a loss infinite for label 3
    x, y = stream
    model = mlp()
    buf = GSSGreedyBuffer(20, loss_fn=inf_loss_for(3), seed=0)
    buf.add(x[:20], y[:20], model)
    assert len(buf) == 20
    # When a batch of 2s and 3s is scored
    bx, by = x[60:80], y[60:80]
    with pytest.warns(RuntimeWarning, match=r"\d+ sample\(s\) with a non-finite gradient score"):
        slots = buf.add(bx, by, model)
    # Then the 3s are not stored, the 2s were scored like any sample, the scores stay finite
    assert bool((slots[by == 3] == -1).all())
    assert buf.n_rejected == int((by == 3).sum()) > 0
    assert 3 not in buf.tensors()[1].tolist()
    assert bool(torch.isfinite(buf.scores).all())


@pytest.mark.parametrize("name", list(GRADIENT_BUFFERS))
def test_a_diverged_model_leaves_the_buffer_unchanged(stream, name):
    # Given a full buffer, and a model whose gradients are all NaN
    x, y = stream
    model = mlp()
    buf = GRADIENT_BUFFERS[name](20)
    for i in range(0, 60, 10):
        buf.add(x[i : i + 10], y[i : i + 10], model)
    before = _stored(buf)
    # When the next batches are scored with it
    with pytest.warns(RuntimeWarning, match="non-finite"):
        for i in range(60, 100, 10):
            slots = buf.add(x[i : i + 10], y[i : i + 10], diverged(model))
    # Then nothing enters, nothing leaves, the waiting samples are dropped
    after = _stored(buf)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert bool((slots == -1).all()) and getattr(buf, "n_recent", 0) == 0
    assert buf.n_rejected > 0


@pytest.mark.parametrize("name", ["GSS-IQP", "GSS-Clust"])
def test_merges_drop_waiting_samples_whose_gradient_is_not_finite(stream, name):
    # Given a buffer of 0s and 1s (the first merge keeps all: nothing is scored) and a
    # loss infinite for label 3
    x, y = stream
    model = mlp()
    buf = GRADIENT_BUFFERS[name](20, loss_fn=inf_loss_for(3))
    buf.add(x[:20], y[:20], model)
    assert len(buf) == 20
    # When 2s and 3s are merged
    with pytest.warns(RuntimeWarning, match="waiting sample\\(s\\) with a non-finite gradient"):
        buf.add(x[60:80], y[60:80], model)
    # Then the 3s are dropped, the others compete as usual
    assert buf.n_rejected == int((y[60:80] == 3).sum()) > 0
    assert 3 not in buf.tensors()[1].tolist() and 0 < len(buf) <= 20


def test_fss_clust_with_non_finite_features_leaves_the_buffer_unchanged(stream):
    x, y = stream
    model = mlp()
    buf = FSSClustBuffer(20, recent_size=20, features="logits")
    for i in range(0, 40, 10):
        buf.add(x[i : i + 10], y[i : i + 10], model)
    before = _stored(buf)
    with pytest.warns(RuntimeWarning, match="non-finite feature; the buffer is left unchanged"):
        buf.add(x[40:60], y[40:60], diverged(model))
    assert all(torch.equal(a, b) for a, b in zip(before, _stored(buf), strict=True))


# ---------------------------------------------------------------- zero gradients
def _zero_loss(logits, y):
    return logits.sum(dim=1) * 0.0  # every gradient is the zero vector


@pytest.mark.parametrize("variant", ["paper", "authors"])
def test_greedy_with_zero_gradients_fills_then_admits_nothing(stream, variant):
    # Given zero gradients: every cosine is 0, so every score is 1
    x, y = stream
    model = mlp()
    buf = GSSGreedyBuffer(15, loss_fn=_zero_loss, variant=variant)
    for i in range(0, 60, 10):
        slots = buf.add(x[i : i + 10], y[i : i + 10], model)
    # Then the buffer filled, and once full the c < 1 gate admits nothing (c = 1)
    assert len(buf) == 15 and bool((slots == -1).all())
    assert torch.equal(buf.scores, torch.ones(15))


def test_iqp_with_zero_gradients_keeps_the_buffer(stream):
    # Given zero gradients, left out of the IQP by slack=0 (no direction to compare)
    x, y = stream
    model = mlp()
    buf = GSSIQPBuffer(15, recent_size=20, loss_fn=_zero_loss)
    buf.add(x[:20], y[:20], model)
    before = _stored(buf)
    buf.add(x[20:40], y[20:40], model)
    # Then the stored samples stay (filled in index order), the buffer stays full
    assert len(buf) == 15
    assert torch.equal(_stored(buf)[0], before[0])


def test_gss_clust_with_zero_gradients_keeps_distinct_finite_centres(stream):
    x, y = stream
    model = mlp()
    buf = GSSClustBuffer(15, recent_size=20, loss_fn=_zero_loss)
    for i in range(0, 80, 10):
        buf.add(x[i : i + 10], y[i : i + 10], model)
    assert 1 <= len(buf) <= 15 and math.isfinite(buf.clustering.state.threshold)


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_buffer_of_one_sample(tiny_split, name):
    s = strategy(name, mem_size=1)
    s.train(online_benchmark(tiny_split, batch_size=10).train_stream[:12])
    assert len(s.storage_policy) == 1


class BNMLP(nn.Module):
    """An MLP with BatchNorm1d: one value per channel for a one-sample batch."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.BatchNorm1d(32),
                                      nn.ReLU())
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        return self.classifier(self.features(x))


@pytest.mark.parametrize(("name", "retrieval", "joint"), [
    ("Reservoir", "random", False), ("Reservoir", "mir", False), ("Reservoir", "random", True),
    ("CBRS", "other-classes", False), ("GSS-Greedy", "random", False),
    ("GSS-IQP", "random", False)])
def test_buffer_of_one_sample_with_batchnorm(tiny_split, name, retrieval, joint):
    # Given a BatchNorm model and M = 1: every replay batch holds a single sample
    torch.manual_seed(0)
    model = BNMLP()
    s = STRATEGIES[name](model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                         mem_size=1, n_iter=2, retrieval=retrieval, joint=joint)
    bn = model.features[2]
    stats = []
    bn.register_forward_hook(lambda m, args, out: stats.append(
        (len(args[0]), m.training, m.running_mean.clone())))
    # When it learns the stream, Then it runs
    s.train(online_benchmark(tiny_split, batch_size=10).train_stream[:6])
    assert len(s.storage_policy) == 1 and model.training
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    # And the one-sample replay steps normalised with the running statistics (eval mode
    # for that layer, statistics left as they were), while the batches updated them
    singles = [i for i, (n, _, _) in enumerate(stats) if n == 1 and i > 0]
    assert singles and all(not stats[i][1] for i in singles)
    assert all(torch.equal(stats[i - 1][2], stats[i][2]) for i in singles)
    assert not torch.equal(bn.running_mean, torch.zeros(32))


@pytest.mark.parametrize("variant", ["paper", "authors"])
def test_n_larger_than_the_buffer_compares_with_every_stored_sample(tiny_split, variant):
    s = strategy("GSS-Greedy", mem_size=3, n=10, variant=variant)
    s.train(online_benchmark(tiny_split, batch_size=10).train_stream[:12])
    assert len(s.storage_policy) == 3


def test_batches_and_buffer_smaller_than_the_replay_batch(tiny_split):
    # Given incoming batches of 3 and a buffer of 5, with replay batches of 10
    s = strategy("Reservoir", mem_size=5, n_iter=1, replay_batch_size=10)
    sizes = []
    s.model.register_forward_hook(lambda m, args, out: sizes.append(len(args[0])))
    s.train(online_benchmark(tiny_split, batch_size=3).train_stream[:8])
    # Then each replay step draws the whole (smaller) buffer
    assert sizes[:3] == [3, 3, 3]  # batch, replay of the 3 stored, batch
    assert set(sizes[3:]) == {3, 5}


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("cls", [ReservoirBuffer, RandBuffer, GSSGreedyBuffer, GSSIQPBuffer,
                                 CBRSBuffer, GDumbBuffer, CBGSSBuffer])
def test_inputs_of_another_shape_raise_and_leave_the_buffer(stream, cls):
    x, y = stream
    model = mlp()
    buf = cls(20) if cls is not GSSIQPBuffer else cls(20, recent_size=20)
    buf.add(x[:20], y[:20], model)
    before = buf.state_dict()
    with pytest.raises(ValueError, match="do not match the buffer's"):
        buf.add(x[20:30].flatten(1), y[20:30], model)
    assert torch.equal(buf.state_dict()["x"], before["x"]) and buf.n_seen == 20


def test_a_stream_that_changes_shape_stops_with_a_clear_error(stream):
    x, y = stream
    exps = batches(x[:40], y[:40])
    exps[3] = TensorExperience(x[30:40].flatten(1), y[30:40])  # the MLP accepts both
    s = strategy("GSS-IQP")
    with pytest.raises(ValueError, match="do not match the buffer's"):
        s.train(exps)


@pytest.mark.parametrize("name", ["Reservoir", "GSS-Greedy", "GSS-IQP-constrained"])
def test_labels_outside_the_model_outputs_raise_before_the_step(stream, name):
    # Given a strategy that learnt 3 batches, then a batch with label 12 (10 outputs)
    x, y = stream
    y = y[:40].clone()
    y[33] = 12
    s = strategy(name)
    s.train(batches(x[:30], y[:30]))
    params = [p.detach().clone() for p in s.model.parameters()]
    n_seen = s.storage_policy.n_seen
    # When it meets that batch, Then a ValueError names the label before any step
    with pytest.raises(ValueError, match="label 12 is outside the model's 10 outputs"):
        s.train(batches(x[30:40], y[30:40]))
    assert all(torch.equal(p, q) for p, q in zip(params, s.model.parameters(), strict=True))
    assert s.storage_policy.n_seen == n_seen


def test_negative_or_float_labels_are_refused_by_every_buffer(stream):
    x, y = stream
    for buf in (ReservoirBuffer(5), GSSIQPBuffer(5, recent_size=5)):
        with pytest.raises(ValueError, match=">= 0"):
            buf.add(x[:3], torch.tensor([0, -1, 2]))
        with pytest.raises(ValueError, match="integer"):
            buf.add(x[:3], torch.tensor([0.0, 1.0, 2.0]))
        assert buf.n_seen == 0


@pytest.mark.parametrize("name", list(GRADIENT_BUFFERS))
def test_a_label_the_model_lacks_is_refused_and_the_buffer_goes_on(stream, name):
    # Given a buffer fed directly with a 4-output model, and a batch holding label 7
    x, y = stream
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 4))
    good = [(x[i : i + 10], y[i : i + 10] % 4) for i in range(0, 200, 10)]
    buf = GRADIENT_BUFFERS[name](10)
    buf.add(*good[0], model)
    before = buf.state_dict()
    bad_y = good[1][1].clone()
    bad_y[4] = 7
    # When it is offered, Then it is refused before it enters the buffer or its recent buffer
    with pytest.raises(ValueError, match="label 7 is outside the model's 4 outputs"):
        buf.add(good[1][0], bad_y, model)
    after = buf.state_dict()
    assert after["n_seen"] == before["n_seen"] == 10
    assert getattr(buf, "n_recent", 10) == 10  # GSS-IQP/Clust: only the first batch waits
    assert torch.equal(after["generator"], before["generator"])
    # And every later good batch is taken as usual: merges happen, n_seen moves
    for bx, by in good[1:]:
        buf.add(bx, by, model)
    assert buf.n_seen == 200 and len(buf) > 0


# ---------------------------------------------------------------- IQP solver
@pytest.fixture
def iqp_input(stream):
    x, y = stream
    return mlp(), x, y


def _run_exact(buf, model, x, y):
    for i in range(0, 60, 10):
        buf.add(x[i : i + 10], y[i : i + 10], model)
    return buf


def test_iqp_solver_missing_falls_back_to_the_fast_solver(iqp_input, monkeypatch):
    model, x, y = iqp_input
    monkeypatch.setitem(sys.modules, "cvxpy", None)  # import cvxpy -> ImportError
    buf = GSSIQPBuffer(15, recent_size=20, solver="exact")
    with pytest.warns(RuntimeWarning, match="cvxpy is not installed.*fast solver"):
        _run_exact(buf, model, x, y)
    assert len(buf) == 15 and buf.last_result.solver == "fast"


def test_iqp_solver_failing_falls_back_to_the_fast_solver(iqp_input, monkeypatch):
    import cvxpy as cp  # a declared dependency: its absence must fail, not skip
    model, x, y = iqp_input

    def broken(*args, **kwargs):
        raise cp.SolverError("solver crashed")

    monkeypatch.setattr(cp.Problem, "solve", broken)
    buf = GSSIQPBuffer(15, recent_size=20, solver="exact")
    with pytest.warns(RuntimeWarning, match="solver crashed.*fast solver"):
        _run_exact(buf, model, x, y)
    assert len(buf) == 15 and buf.last_result.solver == "fast"


def test_iqp_solver_timing_out_still_keeps_m_samples(iqp_input):
    import pyscipopt  # noqa: F401  (declared dependency: must be installed)
    model, x, y = iqp_input
    buf = GSSIQPBuffer(15, recent_size=20, solver="exact", time_limit=1e-9)
    with pytest.warns(RuntimeWarning, match="no solution in 1e-09 s.*fast solver"):
        _run_exact(buf, model, x, y)
    assert len(buf) == 15 and buf.last_result.solver == "fast"


# ---------------------------------------------------------------- models
class NoParams(nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :10]


@pytest.mark.parametrize("name", list(GRADIENT_BUFFERS))
def test_a_model_without_trainable_parameters_is_refused_by_gradient_policies(stream, name):
    x, y = stream
    buf = GRADIENT_BUFFERS[name](10)
    with pytest.raises(ValueError, match="has no trainable parameter"):
        for i in range(0, 60, 10):
            buf.add(x[i : i + 10], y[i : i + 10], NoParams())
    # FSS-Clust needs no gradient: the same model is fine there
    fss = FSSClustBuffer(10, recent_size=20, features="logits")
    for i in range(0, 60, 10):
        fss.add(x[i : i + 10], y[i : i + 10], NoParams())
    assert 1 <= len(fss) <= 10


class Affine(nn.Module):
    """A layer the engine has no closed form for (not an nn.Linear): torch.func route."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n_in, n_out) * 0.05)
        self.b = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x.flatten(1) @ self.w + self.b


class SignFlip(Affine):
    """Data-dependent control flow: torch.func.vmap cannot batch it."""

    def forward(self, x):
        out = super().forward(x)
        return out if float(x.sum()) > 0 else -out


def test_unsupported_modules_go_through_torch_func_and_train(stream):
    x, y = stream
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm([1, 28, 28]), Affine(784, 10))
    gram = sample_gram(model, x[:12], y[:12])
    ref = per_sample_grad_loop(model, x[:12], y[:12])
    torch.testing.assert_close(gram, ref @ ref.T, atol=1e-5, rtol=1e-4)
    s = GSSGreedy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                  mem_size=20, n_iter=1)
    s.train(batches(x[:60], y[:60]))
    assert len(s.storage_policy) == 20


def test_a_model_vmap_cannot_batch_falls_back_to_a_loop(stream):
    x, y = stream
    torch.manual_seed(0)
    model = SignFlip(784, 10)
    with pytest.warns(RuntimeWarning, match="vmap cannot batch SignFlip"):
        gram = sample_gram(model, x[:8], y[:8])
    ref = per_sample_grad_loop(model, x[:8], y[:8])
    torch.testing.assert_close(gram, ref @ ref.T, atol=1e-5, rtol=1e-4)
