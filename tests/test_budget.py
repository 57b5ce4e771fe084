"""Compute accounting: the pass counter, Reservoir's closed form and the real-time stream rule."""

import copy
import json
import math
import random
from fractions import Fraction

import pytest
import torch
from helpers import benchmark_script
from torch import nn

from avalanche_gss import methods
from avalanche_gss.gradients import per_sample_grad_loop, per_sample_grad_vmap, sample_gram
from avalanche_gss.models import MLP
from avalanche_gss.reproduce.runs.budget import (
    PassCount,
    PassCounter,
    as_fraction,
    kept_samples,
    rehearsal_passes,
    relative_cost,
    trained_batches,
)
from avalanche_gss.streams import disjoint_tasks, online_benchmark


def _mlp(seed=0):
    torch.manual_seed(seed)
    return MLP(input_size=6, hidden_sizes=(5, 4), num_classes=3)


def _batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


# ---- the counter ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forward_only_counts_samples_once_per_call_and_no_backward(seed):
    model = _mlp(seed)
    n = 3 + seed
    x, _ = _batch(n, seed)
    with PassCounter(model) as counter, torch.no_grad():
        model(x)
        model(x[:2])
    # the MLP's inner Linear layers are modules too: only the top call counts
    assert counter.count == PassCount(forward=n + 2, backward=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forward_and_backward_count_the_samples_whose_gradient_flows_back(seed):
    model = _mlp(seed)
    x, y = _batch(7, seed)
    with PassCounter(model) as counter:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward(retain_graph=True)
        loss.backward()  # a second backward through the same forward is a second pass
        model(x[:4]).detach().sum()  # no gradient ever flows back: forward only
        torch.autograd.grad(model(x[:5]).sum(), list(model.parameters()))
    assert counter.count == PassCount(forward=7 + 4 + 5, backward=2 * 7 + 5)


def test_the_counter_stops_at_exit_and_refuses_a_second_enter():
    model = _mlp()
    x, _ = _batch(4)
    counter = PassCounter(model)
    with counter:
        with pytest.raises(RuntimeError, match="already counting"), counter:
            pass
        model(x)
    model(x)
    assert counter.count == PassCount(4, 0)
    counter.reset()
    assert counter.count == PassCount()


def test_functional_call_and_copies_of_the_model_are_counted():
    model = _mlp()
    x, _ = _batch(6)
    with PassCounter(model) as counter:
        params = {k: v.detach() * 2 for k, v in model.named_parameters()}
        torch.func.functional_call(model, params, (x,))  # MIR's virtual step
        copy.deepcopy(model)(x[:3]).sum().backward()
    assert counter.count == PassCount(6 + 3, 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_engine_gram_costs_one_batched_forward_and_backward_and_is_unchanged(seed):
    model = _mlp(seed).double()
    x, y = _batch(9, seed)
    x = x.double()
    with PassCounter(model) as counter:
        gram = sample_gram(model, x, y)
    assert counter.count == PassCount(9, 9)
    g = per_sample_grad_loop(model, x, y)  # float64 oracle, outside the counter
    torch.testing.assert_close(gram, g @ g.T, rtol=1e-10, atol=1e-12)


def test_the_per_sample_routes_count_every_sample():
    model = _mlp()
    x, y = _batch(5)
    with PassCounter(model) as loop:
        per_sample_grad_loop(model, x, y)
    with PassCounter(model) as vmapped:
        per_sample_grad_vmap(model, x, y)  # the module sees one sample under vmap
    assert loop.count == vmapped.count == PassCount(5, 5)


def test_a_layer_without_closed_form_adds_the_vmap_route_passes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3))
    x, y = _batch(8)
    with PassCounter(model) as counter:
        sample_gram(model, x, y)
    assert counter.count == PassCount(2 * 8, 2 * 8)  # closed forms, then torch.func


# ---- Reservoir's cost, counted and in closed form --------------------------------------------


def _train(mnist, name, *, mem_size, n_iter, samples_per_task=20, count=True, **options):
    """Train ``name`` on a tiny disjoint stream: (passes or None, batch sizes, final weights)."""
    split = disjoint_tasks(mnist, samples_per_task=samples_per_task, seed=0)
    torch.manual_seed(0)
    model = MLP()
    strategy = methods.get(name).strategy(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
        mem_size=mem_size, n_iter=n_iter, **options)
    bench = online_benchmark(split, batch_size=10)
    counter = PassCounter(model)
    if count:
        with counter:
            strategy.train(bench.train_stream)
    else:
        strategy.train(bench.train_stream)
    sizes = [len(e.dataset) for e in bench.train_stream]
    return (counter.count if count else None), sizes, model.state_dict()


@pytest.mark.parametrize(("name", "options"), [("GSS-Greedy", {}), ("OCS", {}),
                                               ("Reservoir", {"retrieval": "mir"})])
def test_counting_changes_no_result(mnist, name, options):
    *_, counted = _train(mnist, name, mem_size=30, n_iter=2, **options)
    *_, plain = _train(mnist, name, mem_size=30, n_iter=2, count=False, **options)
    assert counted.keys() == plain.keys()
    for key, value in counted.items():
        assert torch.equal(value, plain[key]), key


@pytest.mark.parametrize(("mem_size", "n_iter"), [(300, 3), (15, 1), (5, 2)])
def test_reservoir_counted_equals_its_closed_form(mnist, mem_size, n_iter):
    counted, sizes, _ = _train(mnist, "Reservoir", mem_size=mem_size, n_iter=n_iter)
    assert counted == rehearsal_passes(sizes, n_iter=n_iter, replay_batch_size=10,
                                       buffer_size=mem_size)
    # 10 batches of 10: the first has no replay; M = 5 replays 5 samples per step
    replay = min(10, mem_size)
    assert counted.forward == n_iter * (10 * 10 + 9 * replay)


def test_gss_greedy_and_mir_cost_more_than_reservoir(mnist):
    base, *_ = _train(mnist, "Reservoir", mem_size=30, n_iter=3)
    gss, *_ = _train(mnist, "GSS-Greedy", mem_size=30, n_iter=3)
    mir, *_ = _train(mnist, "Reservoir", mem_size=30, n_iter=3, retrieval="mir",
                    samples_per_task=40)
    assert relative_cost(base, base) == 1
    assert relative_cost(gss, base) > 1
    assert mir.forward > mir.backward  # MIR scores its candidates without gradients
    mir_base = rehearsal_passes([10] * 20, n_iter=3, replay_batch_size=10, buffer_size=30)
    assert relative_cost(mir, mir_base) > 1


def test_relative_cost_weighs_the_backward_passes():
    policy, base = PassCount(30, 10), PassCount(10, 10)
    assert relative_cost(policy, base) == Fraction(50, 30)
    assert relative_cost(policy, base, backward_weight=1) == 2
    with pytest.raises(ValueError, match="baseline"):
        relative_cost(policy, PassCount())
    with pytest.raises(ValueError, match="n_iter"):
        rehearsal_passes([10], n_iter=0, replay_batch_size=10, buffer_size=10)


# ---- the stream rule -------------------------------------------------------------------------


def _event_oracle(n_batches, c):
    """Batch i arrives at time i; a free learner takes the newest batch and is busy for c."""
    free_at, out = Fraction(0), []
    for i in range(n_batches):
        if free_at < i + 1:  # free before batch i + 1 arrives: batch i is the newest
            out.append(i)
            free_at = max(free_at, Fraction(i)) + c
    return out


def test_the_rule_on_hand_checked_cases():
    assert trained_batches(5, 1) == [0, 1, 2, 3, 4]
    assert trained_batches(7, 2) == [0, 2, 4, 6]
    assert trained_batches(10, 3) == [0, 3, 6, 9]
    assert trained_batches(11, 2.5) == [0, 2, 5, 7, 10]
    assert trained_batches(5, 0.5) == [0, 1, 2, 3, 4]  # cheaper than the stream: every batch
    assert trained_batches(0, 2) == []


@pytest.mark.parametrize("n", [1, 20, 101])
def test_the_rule_is_the_authors_code_for_their_cases(n):
    # Delay.is_training_batch: batch_delay = C - 1 (integer), 1.5 (MIR) and 0.33 (LwF)
    for k in (1, 2, 3, 4):
        assert trained_batches(n, k) == [i for i in range(n) if i % k == 0]
    assert trained_batches(n, 2.5) == [i for i in range(n) if i % 5 in (0, 2)]
    assert trained_batches(n, 4 / 3) == [i for i in range(n) if i % 4 < 3]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_the_rule_matches_an_event_simulation(seed):
    rng = random.Random(seed)
    for _ in range(50):
        c = Fraction(rng.randint(1, 60), rng.randint(1, 12))
        n = rng.randint(0, 80)
        got = trained_batches(n, c)
        assert got == _event_oracle(n, c), (n, c)
        if c >= 1:  # the stream does not wait: n / c batches, rounded up
            assert len(got) == math.ceil(n / c)


@pytest.mark.parametrize("bad", [0, -1, 0.0, float("nan"), float("inf"), "2"])
def test_a_bad_relative_cost_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="relative cost must be a finite number > 0"):
        trained_batches(3, bad)


def test_a_float_cost_is_read_as_the_nearest_simple_fraction():
    assert as_fraction(4 / 3) == Fraction(4, 3)
    assert as_fraction(2.5) == Fraction(5, 2)
    with pytest.raises(ValueError, match="n_batches"):
        trained_batches(-1, 2)


# ---- the benchmark script --------------------------------------------------------------------


def test_compute_cost_script_reports_reservoir_at_one_and_mir_above(tmp_path, capsys):
    script = benchmark_script("compute_cost")
    out = tmp_path / "cost.json"
    threads = torch.get_num_threads()
    try:  # in this process: the script's one-thread setting is undone after it
        assert script.main(["--data", "mnist-5k", "--samples-per-task", "20",
                            "--policies", "Reservoir", "ER-MIR", "--json", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = {r["policy"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["Reservoir"]["C"] == 1
    assert rows["Reservoir"]["forward_per_batch"] == 3 * (10 + 10 * 3 / 4)  # 4 batches
    assert rows["ER-MIR"]["C"] > 1
    assert rows["ER-MIR"]["forward_per_batch"] > rows["ER-MIR"]["backward_per_batch"]
    assert "| ER-MIR |" in capsys.readouterr().out


def test_kept_samples_cut_batches_within_tasks_and_keep_the_trained_ones():
    # batches: task 0 -> 0 [0, 10), 1 [10, 20), 2 [20, 25); task 1 -> 3 [0, 10), 4 [10, 20)
    kept = kept_samples([25, 20], 10, 2)
    assert [k.tolist() for k in kept] == [[*range(10), *range(20, 25)], list(range(10, 20))]
    assert [k.tolist() for k in kept_samples([25, 20], 10, 1)] == [
        list(range(25)), list(range(20))]
    assert [k.tolist() for k in kept_samples([10, 10], 10, 3)] == [list(range(10)), []]
    with pytest.raises(ValueError, match="batch_size"):
        kept_samples([10], 0, 2)
