"""The README's Avalanche route (stock ``Naive`` + ``ReplayPlugin`` with this library's
buffers on an Avalanche benchmark) killed with SIGKILL and resumed, and the buffer read
as one dataset whatever mix of tensors and datasets its samples came from."""

import multiprocessing
import os
import signal

import pytest
import torch
from avalanche.benchmarks import class_incremental_benchmark, split_online_stream
from avalanche.models import SimpleMLP
from avalanche.training import Naive
from avalanche.training.plugins import ReplayPlugin
from helpers import StopAfter

from avalanche_gss import methods
from avalanche_gss._avalanche import tensor_dataset
from avalanche_gss.checkpoint import read_state, strategy_state_dict, train_resumable
from avalanche_gss.checkpoint.state import load_strategy_state_dict
from avalanche_gss.training import quiet_evaluator

MEM = 15
OPTIONS = {  # small enough that merges and replacements happen within 16 batches
    "GSS-Greedy": {"n": 5}, "CB-GSS": {"n": 5},
    "GSS-IQP": {"recent_size": 10}, "GSS-Clust": {"recent_size": 10},
    "FSS-Clust": {"recent_size": 10},
}
EVERY, KILL_AT = 3, 7  # checkpoints after 3 and 6 batches; killed after 7 of 16


def data(n=160, classes=4, features=20):
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % classes
    x = torch.randn(n, features, generator=g) + 2.0 * torch.nn.functional.one_hot(y, features)
    return x, y


def route_stream():
    """The README's route: ``class_incremental_benchmark`` then ``split_online_stream``."""
    x, y = data()
    bench = class_incremental_benchmark(
        {"train": tensor_dataset(x, y), "test": tensor_dataset(x[:40], y[:40])},
        num_experiences=2, seed=0)
    return split_online_stream(bench.train_stream, experience_size=10, seed=0)


def make(method, plugins=()):
    torch.manual_seed(0)
    model = SimpleMLP(num_classes=4, input_size=20, hidden_size=16)
    buffer = methods.get(method).buffer(MEM, seed=0, **OPTIONS.get(method, {}))
    return Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                 train_mb_size=10, train_epochs=1,
                 plugins=[ReplayPlugin(mem_size=MEM, batch_size=10, storage_policy=buffer),
                          *plugins],
                 evaluator=quiet_evaluator())


def buffer_of(strategy):
    return next(p.storage_policy for p in strategy.plugins if isinstance(p, ReplayPlugin))


def assert_same(a, b, where="state"):
    """Two nested states hold equal tensors and values, key for key (times aside)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a.keys() - {"seconds"}:  # a solver's wall time
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            assert_same(u, v, f"{where}[{i}]")
    else:
        assert a == b, where


class _Paused(Exception):
    pass


def _pause():
    raise _Paused


def PauseAt(k):
    """Stop this strategy's training (an exception) once ``k`` experiences were learnt."""
    return StopAfter(k, _pause)


def _killed_runs(folder):
    """Every method, each stopped mid-stream; then SIGKILL while all of them are."""
    torch.set_num_threads(1)
    for method in methods.NAMES:
        try:
            train_resumable(make(method, [PauseAt(KILL_AT)]), route_stream(),
                            folder / f"{method}.ckpt", every=EVERY)
        except _Paused:
            continue
        os._exit(3)  # not reached: each run is stopped mid-stream
    os.kill(os.getpid(), signal.SIGKILL)


def test_sigkilled_avalanche_route_resumes_bit_for_bit(tmp_path):
    # Given the README's route for every buffer method of the registry, killed with
    # SIGKILL after 7 of 16 batches (a checkpoint every 3: batch 7 is lost)
    child = multiprocessing.get_context("fork").Process(target=_killed_runs, args=(tmp_path,))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    for method in methods.NAMES:
        path = tmp_path / f"{method}.ckpt"
        assert read_state(path)["experiences"] == 6, method
        # When a freshly built strategy resumes it (the restored samples are mixed with
        # the stream's on the next update, and read by ReplayPlugin's dataloader)
        resumed = make(method)
        assert train_resumable(resumed, route_stream(), path, every=EVERY) == 16
        # Then model, optimizer, buffer and generators equal the uninterrupted run's
        reference = make(method)
        reference.train(route_stream())
        assert_same(strategy_state_dict(resumed), strategy_state_dict(reference), method)
        # And its buffer reads as the same samples, through its datasets
        assert_same(_read(buffer_of(resumed)), _read(buffer_of(reference)), method)


def _tensors(n, task=0, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 20, generator=g), torch.arange(n) % 4, torch.full((n,), task)


def _experience_data(k=0):
    return next(e for i, e in enumerate(route_stream()) if i == k).dataset


def _read(buffer):
    """Every sample of ``buffer.buffer``, as the tensors its items hold."""
    view = buffer.buffer
    items = [view[i] for i in range(len(view))]
    return (torch.stack([item[0] for item in items]),
            torch.tensor([int(item[1]) for item in items]),
            torch.tensor([int(item[2]) for item in items]))


@pytest.mark.parametrize("task", [0, 1])
@pytest.mark.parametrize("read_between", [False, True])
@pytest.mark.parametrize("order", ["add-first", "dataset-first"])
def test_added_tensors_and_dataset_samples_are_read_together(order, read_between, task):
    # Given tensors offered with add() and a stream's dataset offered with
    # update_from_dataset(), in either order, the buffer read or not in between
    buffer = methods.get("Reservoir").buffer(40, seed=0)
    x, y, t = _tensors(10, task)
    steps = [lambda: buffer.add(x, y, task_labels=t),
             lambda: buffer.update_from_dataset(_experience_data())]
    for step in steps if order == "add-first" else steps[::-1]:
        step()
        if read_between:
            _read(buffer)
    # Then the buffer reads as one dataset, slot for slot its stored tensors
    bx, by, bt = _read(buffer)
    sx, sy = buffer.tensors()
    assert len(bx) == 20
    assert torch.equal(bx, sx) and torch.equal(by, sy) and torch.equal(bt, buffer.task_labels)
    # And it concatenates with the stream's datasets on either side, as Avalanche's
    # own replay code does
    stream_data = _experience_data(1)
    assert len(buffer.buffer.concat(stream_data)) == len(stream_data.concat(buffer.buffer)) == 30


def test_a_restored_buffer_takes_new_samples_from_datasets():
    # Given a buffer of the stream's samples, saved and restored into a fresh one
    first = make("Reservoir")
    first.train([e for i, e in enumerate(route_stream()) if i < 3])
    state = strategy_state_dict(first)
    restored = make("Reservoir")
    load_strategy_state_dict(restored, state)
    buffer = buffer_of(restored)
    # When it reads, takes the next experience's samples and reads again
    before = _read(buffer)
    buffer.update_from_dataset(_experience_data(3))
    after = _read(buffer)
    # Then both reads are its stored samples, slot for slot
    assert torch.equal(before[0], state["plugins"][0]["storage_policy"]["x"][:MEM])
    sx, sy = buffer.tensors()
    assert torch.equal(after[0], sx) and torch.equal(after[1], sy)


def test_offering_a_stream_dataset_leaves_it_as_it_was():
    # Given an experience's dataset, which split_online_stream's stream keeps for good
    data = _experience_data()
    groups = (data._flat_data._transform_groups.transform_groups,
              data._flat_data._frozen_transform_groups.transform_groups)
    before = [dict(g) for g in groups]
    # When a buffer takes its samples, through both of Avalanche's entry points
    buffer = methods.get("Reservoir").buffer(40, seed=0)
    buffer.update_from_dataset(data)
    buffer.post_adapt(None, data)
    # Then reading them added nothing to it (each entry a reader adds stays as long as
    # the stream: memory that grew with every experience)
    assert [dict(g) for g in groups] == before
    assert len(buffer) == 20
