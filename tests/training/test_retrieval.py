"""Replay retrieval: uniform draws as before, and MIR against a direct computation."""

import copy
from types import SimpleNamespace

import pytest
import torch
from avalanche.benchmarks import nc_benchmark
from avalanche.benchmarks.utils import _make_taskaware_tensor_classification_dataset
from avalanche.models import MTSimpleMLP
from helpers import filled_reservoir as _filled
from torch import nn
from torch.nn import functional as F

from avalanche_gss.methods.reservoir import Reservoir, ReservoirBuffer
from avalanche_gss.reproduce.runs.training import RunSettings, run, run_label, settings_dict
from avalanche_gss.streams.online import TensorExperience
from avalanche_gss.training import (
    MIRRetrieval,
    OnlineRehearsal,
    OnlineRehearsalPlugin,
    OtherClassesRetrieval,
    RandomRetrieval,
    make_retrieval,
)


def _stepped(seed=0, dim=4, classes=3, momentum=0.0, norm=False):
    """A model whose ``.grad`` holds an incoming batch's gradient (two learning rates)."""
    torch.manual_seed(seed)
    layers = [nn.Linear(dim, 16), *([nn.BatchNorm1d(16), nn.Dropout(0.5)] if norm else []),
              nn.ReLU(), nn.Linear(16, classes)]
    model = nn.Sequential(*layers)
    optimizer = torch.optim.SGD([{"params": model[0].parameters(), "lr": 0.3},
                                 {"params": model[-1].parameters()}], lr=0.1, momentum=momentum)
    g = torch.Generator().manual_seed(seed + 100)
    x, y = torch.randn(10, dim, generator=g), torch.randint(0, classes, (10,), generator=g)
    if momentum:  # give the optimizer a state
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    strategy = SimpleNamespace(model=model, optimizer=optimizer, device="cpu",
                               _criterion=nn.CrossEntropyLoss())
    return model, optimizer, strategy


def _direct_scores(model, optimizer, x, y, t=None):
    """By hand: copy the model, take the SGD step, per-sample losses before and after."""
    after = copy.deepcopy(model)
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                q = dict(zip(model.parameters(), after.parameters(), strict=True))[p]
                q -= group["lr"] * p.grad
    args = (x,) if t is None else (x, t)
    model_mode = model.training
    model.eval()
    after.eval()
    with torch.no_grad():
        scores = (F.cross_entropy(after(*args), y, reduction="none")
                  - F.cross_entropy(model(*args), y, reduction="none"))
    model.train(model_mode)
    return scores


def test_mir_retrieves_the_candidates_the_virtual_step_interferes_with_most():
    buf = _filled()
    model, optimizer, strategy = _stepped()
    mir = MIRRetrieval(candidates=20)
    g = torch.Generator().manual_seed(5)
    slots = buf.sample_slots(20, torch.Generator().manual_seed(5))  # the same candidates
    x, y, _ = buf.rows(slots)
    expected = _direct_scores(model, optimizer, x, y)
    assert len(set(expected.tolist())) == 20  # distinct: the top 7 is one set
    top = torch.topk(expected, 7).indices
    mir.before_update(strategy, buf, 7, g)
    got_x, got_y, got_t = mir.retrieve(strategy, buf, 7, g)
    assert torch.equal(got_x, x[top]) and torch.equal(got_y, y[top])
    assert got_t.tolist() == [0] * 7
    torch.testing.assert_close(MIRRetrieval.scores(model, optimizer, nn.CrossEntropyLoss(),
                                                   x, y, torch.zeros(20, dtype=torch.long)),
                               expected)


def test_mir_changes_nothing_of_model_grads_norm_statistics_or_optimizer():
    buf = _filled()
    model, optimizer, strategy = _stepped(momentum=0.9, norm=True)
    model.train()
    state = copy.deepcopy(model.state_dict())  # parameters and BatchNorm statistics
    grads = [p.grad.clone() for p in model.parameters()]
    opt_state = copy.deepcopy(optimizer.state_dict())
    mir = MIRRetrieval(candidates=25)
    mir.before_update(strategy, buf, 5, torch.Generator().manual_seed(0))
    assert model.training and all(m.training for m in model.modules())
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    for p, grad in zip(model.parameters(), grads, strict=True):
        assert torch.equal(p.grad, grad)
    after = optimizer.state_dict()
    assert after["param_groups"] == opt_state["param_groups"]
    for key, value in opt_state["state"].items():
        assert torch.equal(after["state"][key]["momentum_buffer"], value["momentum_buffer"])


def test_the_default_retrieval_draws_what_the_rehearsal_drew_before():
    plain = OnlineRehearsalPlugin(_filled(), replay_batch_size=7, seed=1)
    for spec in ("random", RandomRetrieval()):
        named = OnlineRehearsalPlugin(_filled(), replay_batch_size=7, seed=1, retrieval=spec)
        assert isinstance(named.retrieval, RandomRetrieval)
    assert isinstance(plain.retrieval, RandomRetrieval)
    strategy = SimpleNamespace(device="cpu")
    reference = torch.Generator().manual_seed(1)  # one randperm of the buffer per draw
    stored = _filled().tensors()[0]
    for _ in range(4):
        x, _, _ = plain.retrieval.retrieve(strategy, plain.storage_policy, 7, plain.generator)
        y, _, _ = named.retrieval.retrieve(strategy, named.storage_policy, 7, named.generator)
        assert torch.equal(x, y)
        assert torch.equal(x, stored[torch.randperm(30, generator=reference)[:7]])


def test_a_run_with_retrieval_random_is_the_run_without_the_option(tiny_split):
    a = run(RunSettings(method="Reservoir", buffer_size=20, n_iter=1), tiny_split)
    b = run(RunSettings(method="Reservoir", buffer_size=20, n_iter=1, retrieval="random"),
            tiny_split)
    assert a.task_accuracy == b.task_accuracy


def test_state_round_trip_gives_identical_next_mir_retrievals():
    model, _, strategy = _stepped()
    first = OnlineRehearsalPlugin(_filled(), replay_batch_size=5, seed=3,
                                  retrieval=MIRRetrieval(candidates=12))
    first.before_update(strategy)
    first.retrieval.retrieve(strategy, first.storage_policy, 5, first.generator)
    state = first.state_dict()
    first.before_update(strategy)
    expected = first.retrieval.retrieve(strategy, first.storage_policy, 5, first.generator)
    second = OnlineRehearsalPlugin(ReservoirBuffer(30), replay_batch_size=5, seed=99,
                                   retrieval="mir")
    second.retrieval.candidates = 12
    second.load_state_dict(state)
    second.before_update(strategy)
    got = second.retrieval.retrieve(strategy, second.storage_policy, 5, second.generator)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


def _tasks(n_per_class=20, dim=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(10).repeat_interleave(n_per_class)
    x = torch.randn(len(y), dim, generator=g) + y[:, None].float()
    data = _make_taskaware_tensor_classification_dataset(x, y, task_labels=0)
    return nc_benchmark(data, data, 5, task_labels=True, shuffle=False,
                        fixed_class_order=list(range(10)))


def test_mir_with_a_multi_head_model_scores_each_candidate_on_its_own_head():
    torch.manual_seed(0)
    model = MTSimpleMLP(input_size=6, hidden_size=16)
    buf = ReservoirBuffer(30, seed=0)
    mir = MIRRetrieval(candidates=20)
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               storage_policy=buf, n_iter=1, retrieval=mir)
    chosen_tasks: list[int] = []
    original = mir.retrieve

    def spy(*args):
        batch = original(*args)
        if batch is not None:
            chosen_tasks.extend(batch[2].tolist())
        return batch

    mir.retrieve = spy  # type: ignore[method-assign]
    for exp in _tasks().train_stream:
        strategy.train(exp)
    assert len(set(buf.task_labels.tolist())) > 1
    assert len(set(chosen_tasks)) > 1  # replayed samples of several tasks (heads)
    # Scores on the trained model agree with the direct computation, head by head.
    x, y = buf.tensors()
    t = buf.task_labels
    model.zero_grad()
    F.cross_entropy(model(x[:10], t[:10]), y[:10]).backward()
    expected = _direct_scores(model, strategy.optimizer, x, y, t)
    got = MIRRetrieval.scores(model, strategy.optimizer, nn.CrossEntropyLoss(), x, y, t)
    torch.testing.assert_close(got, expected)


def test_joint_replay_takes_one_step_on_the_sum_of_both_gradients():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    buf = _filled(n=5)  # smaller than the replay batch: replayed whole
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                               storage_policy=buf, n_iter=1, replay_batch_size=10, joint=True)
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(10, 4, generator=g), torch.randint(0, 3, (10,), generator=g)
    reference = copy.deepcopy(model)
    bx, by = buf.tensors()
    loss = F.cross_entropy(reference(x), y) + F.cross_entropy(reference(bx), by)
    grads = torch.autograd.grad(loss, list(reference.parameters()))
    expected = [p.detach() - 0.1 * gr for p, gr in zip(reference.parameters(), grads, strict=True)]
    strategy.rehearsal.after_training_exp = lambda *a, **k: None  # keep the buffer as it is
    strategy.train([TensorExperience(x, y)])
    for p, e in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.detach(), e)


def test_reservoir_with_mir_learns(tiny_split, baselines):
    settings = RunSettings(method="Reservoir", retrieval="mir", buffer_size=40, n_iter=1)
    assert run_label(settings) == "Reservoir-mir-M40-seed0"
    result = run(settings, tiny_split)
    assert result.avg > baselines.floor, (result.task_accuracy, baselines.floor)
    assert result.extras["skipped_steps"] == 0


def test_every_ready_strategy_takes_a_retrieval():
    model = nn.Linear(4, 3)
    strategy = Reservoir(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                         mem_size=10, retrieval="mir")
    assert isinstance(strategy.rehearsal.retrieval, MIRRetrieval)
    assert strategy.rehearsal.retrieval.candidates == 50


@pytest.mark.parametrize("bad, message", [
    (lambda: make_retrieval("gss"),
     "unknown retrieval 'gss'; choose from random, mir, other-classes"),
    (lambda: MIRRetrieval(candidates=0), "candidates must be >= 1, got 0"),
    (lambda: OnlineRehearsalPlugin(ReservoirBuffer(5), replay_batch_size=10,
                                   retrieval=MIRRetrieval(candidates=5)),
     r"MIR candidates \(5\) must be >= replay_batch_size \(10\)"),
])
def test_bad_retrievals_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        bad()


def _labelled(labels, seed=0, dim=3):
    """A Reservoir buffer holding one sample per label, in this order."""
    buf = ReservoirBuffer(len(labels), seed=seed)
    g = torch.Generator().manual_seed(seed)
    buf.add(torch.randn(len(labels), dim, generator=g), torch.tensor(labels))
    return buf


@pytest.mark.parametrize("batch, k", [([0, 1, 1], 6), ([0, 1, 2], 6), ([0, 1, 2, 3], 5),
                                      ([4], 3), ([2, 3], 8)])
def test_other_classes_come_first_in_the_order_of_the_uniform_draw(batch, k):
    labels = [0, 1, 2, 3] * 6
    buf = _labelled(labels)
    strategy = SimpleNamespace(device="cpu", mb_y=torch.tensor(batch))
    got = OtherClassesRetrieval().retrieve(strategy, buf, k, torch.Generator().manual_seed(3))
    # By hand: the uniform draw's permutation, the batch's classes moved to its end.
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(3)).tolist()
    stored_y = buf.tensors()[1]
    others = [i for i in order if int(stored_y[i]) not in batch]
    expected = (others + [i for i in order if int(stored_y[i]) in batch])[:k]
    x, y, _ = buf.rows(torch.tensor(expected))
    assert torch.equal(got[0], x) and torch.equal(got[1], y)
    n_others = sum(1 for c in labels if c not in batch)
    assert int((~torch.isin(got[1], torch.tensor(batch))).sum()) == min(k, n_others)


@pytest.mark.parametrize("seed", range(6))
def test_other_classes_pick_the_same_on_the_host_as_with_device_ops(seed):
    # A CPU buffer takes the host loop; a buffer on an accelerator the tensor ops (no sync).
    from avalanche_gss.training.retrieval import _absent_first, _absent_first_on_device

    g = torch.Generator().manual_seed(seed)
    for _ in range(20):
        n = int(torch.randint(1, 40, (1,), generator=g))
        labels = torch.randint(0, 5, (n,), generator=g)
        held = torch.randint(0, 5, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g)
        order = torch.randperm(n, generator=g)
        for k in (1, 3, n, n + 2):
            host = _absent_first(order.tolist(), labels.tolist(), set(held.tolist()), k)
            assert torch.equal(host, _absent_first_on_device(order, labels, held, k))


def test_other_classes_draw_as_many_numbers_as_the_uniform_draw():
    buf = _labelled([0, 1, 2] * 5)
    strategy = SimpleNamespace(device="cpu", mb_y=torch.tensor([1]))
    a, b = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    OtherClassesRetrieval().retrieve(strategy, buf, 4, a)
    RandomRetrieval().retrieve(strategy, buf, 4, b)
    assert torch.equal(a.get_state(), b.get_state())


def test_other_classes_read_the_labels_of_an_avalanche_buffer():
    from avalanche.training.storage_policy import ReservoirSamplingBuffer

    x = torch.arange(12.0).reshape(12, 1)
    y = torch.tensor([0, 1, 2] * 4)
    data = _make_taskaware_tensor_classification_dataset(x, y, torch.zeros(12, dtype=torch.long))
    policy = ReservoirSamplingBuffer(12)
    policy.update_from_dataset(data)
    strategy = SimpleNamespace(device="cpu", mb_y=torch.tensor([0, 2]))
    got = OtherClassesRetrieval().retrieve(strategy, policy, 4, torch.Generator().manual_seed(0))
    assert got[1].tolist() == [1, 1, 1, 1]
    assert torch.equal(got[0][:, 0] % 3, torch.ones(4))  # x and y of the same samples
    empty = ReservoirSamplingBuffer(5)
    assert OtherClassesRetrieval().retrieve(strategy, empty, 4, torch.Generator()) is None


def test_cb_gss_replays_other_classes_by_default_and_random_on_request():
    from avalanche_gss.methods.cb_gss import CBGSS

    model = nn.Linear(4, 3)

    def make(**kw):
        return CBGSS(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                     mem_size=10, **kw)

    assert isinstance(make().rehearsal.retrieval, OtherClassesRetrieval)
    assert isinstance(make(retrieval=None).rehearsal.retrieval, OtherClassesRetrieval)
    assert isinstance(make(retrieval="random").rehearsal.retrieval, RandomRetrieval)
    plain = Reservoir(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                      mem_size=10)
    assert isinstance(plain.rehearsal.retrieval, RandomRetrieval)


def test_run_settings_hold_the_retrieval_that_ran_and_key_it_apart(tiny_split):
    own = RunSettings(method="CB-GSS", buffer_size=20, n_iter=1)
    uniform = RunSettings(method="CB-GSS", buffer_size=20, n_iter=1, retrieval="random")
    assert own.retrieval == "other-classes"
    assert RunSettings(method="Reservoir").retrieval == "random"
    assert run_label(own) == "CB-GSS-M20-seed0"
    assert run_label(uniform) == "CB-GSS-random-M20-seed0"
    for s in (own, uniform):
        assert RunSettings(**settings_dict(s)) == s  # the key gives the run back
    assert settings_dict(own)["retrieval"] == "other-classes"
    assert settings_dict(uniform)["retrieval"] == "random"
    assert run(own, tiny_split).task_accuracy != run(uniform, tiny_split).task_accuracy
