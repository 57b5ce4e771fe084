"""Buffer metrics on a real short online run, logged through Avalanche's TensorboardLogger."""

import copy
from collections import Counter

import pytest
import torch
from avalanche.core import SupervisedPlugin
from avalanche.logging import TensorboardLogger
from avalanche.training.plugins import EvaluationPlugin
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from avalanche_gss.gradients import per_sample_grad_loop
from avalanche_gss.methods.reservoir import Reservoir, ReservoirBuffer
from avalanche_gss.metrics import (
    BufferCompositionMetric,
    BufferSurrogateMetric,
    buffer_metrics,
    class_task_map,
    count_by_task,
    find_buffer,
)
from avalanche_gss.models import MLP
from avalanche_gss.streams import blurry_tasks, online_benchmark
from avalanche_gss.training import quiet_evaluator

MEM = 40
EVERY = 7
STREAM = "train_phase/train_stream"


def oracle_task(split, x_row, label):
    """The task whose training data holds this exact sample (found by brute force)."""
    hits = [
        k
        for k, (x, y) in enumerate(split.train)
        if bool(((x.flatten(1) == x_row.flatten()).all(dim=1) & (y == label)).any())
    ]
    assert len(hits) == 1, hits
    return hits[0]


class Recorder(SupervisedPlugin):
    """Records the buffer's true state after every experience (after the buffer update,
    before the evaluator: plugins run in order and the evaluator is last)."""

    def __init__(self, split=None, surrogate=False):
        super().__init__()
        self.split = split
        self.surrogate = surrogate
        self.states = {}  # train_iterations -> state

    def after_training_exp(self, strategy, **kw):
        buf = strategy.storage_policy
        x, y = buf.tensors()
        state = {"size": len(buf), "classes": Counter(y.tolist())}
        if self.split is not None:
            state["tasks"] = Counter(
                oracle_task(self.split, row, int(c)) for row, c in zip(x, y, strict=True)
            )
        if self.surrogate:
            model64 = copy.deepcopy(strategy.model).double()  # float64 reference
            grads = per_sample_grad_loop(model64, x.double(), y)  # (M, P)
            unit = grads / grads.norm(dim=1, keepdim=True)
            state["surrogate"] = float((unit @ unit.T).sum())
        self.states[strategy.clock.train_iterations] = state


def run(split, metrics, recorder=None, tb_dir=None, seed=0):
    torch.manual_seed(seed)
    model = MLP()
    loggers = [TensorboardLogger(tb_dir)] if tb_dir is not None else []
    if loggers:
        evaluator = EvaluationPlugin(*metrics, loggers=loggers)
    else:
        evaluator = quiet_evaluator(*metrics)
    strategy = Reservoir(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
        mem_size=MEM,
        n_iter=1,
        seed=seed,
        evaluator=evaluator,
        plugins=[] if recorder is None else [recorder],
    )
    strategy.train(online_benchmark(split).train_stream)
    for logger in loggers:
        logger.writer.flush()
    return strategy, evaluator


def curves(evaluator, prefix):
    return {k: v for k, v in evaluator.get_all_metrics().items() if k.startswith(prefix)}


def test_composition_matches_the_buffer_and_is_logged_to_tensorboard(tiny_split, tmp_path):
    # Given a Reservoir run on 30 ten-sample experiences, composition emitted every 7
    task_of_class = {c: k for k, cls in enumerate(tiny_split.task_classes) for c in cls}
    metric = BufferCompositionMetric(every=EVERY, task_of_class=task_of_class)
    recorder = Recorder(tiny_split)
    strategy, evaluator = run(tiny_split, [metric], recorder, tb_dir=tmp_path)
    # Then values were emitted after experiences 7, 14, 21, 28 and at the end (30)
    sizes = evaluator.get_all_metrics()[f"BufferSize/{STREAM}"]
    xs = sizes[0]
    assert xs == [7, 14, 21, 28, 30]  # n_iter=1: one iteration per experience
    # And each emitted value is the buffer's true composition at that time
    for i, x in enumerate(xs):
        truth = recorder.states[x]
        assert sizes[1][i] == truth["size"] == min(MEM, 10 * x)
        # (a curve starts when its class or task first enters the buffer)
        for key, part in (("classes", "Class"), ("tasks", "Task")):
            for name, (cx, cv) in curves(evaluator, f"Buffer{part}Count/").items():
                c = int(name.rsplit(part, 1)[1])
                emitted = cv[cx.index(x)] if x in cx else 0
                assert emitted == truth[key].get(c, 0), (name, x)
    # Every class and task ever stored has a curve, and they add up to the buffer size
    final_classes = {
        int(k.rsplit("Class", 1)[1]): v[1][-1]
        for k, v in curves(evaluator, "BufferClassCount/").items()
    }
    assert set(final_classes) == set(range(10))
    assert sum(final_classes.values()) == MEM
    final_tasks = [v[1][-1] for v in curves(evaluator, "BufferTaskCount/").values()]
    assert len(final_tasks) == 5 and sum(final_tasks) == MEM
    assert metric.result()[f"BufferSize/{STREAM}"] == MEM
    # And the TensorBoard event file holds the same scalars
    events = list(tmp_path.glob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    logged = acc.Scalars(f"BufferSize/{STREAM}")
    assert [(e.step, e.value) for e in logged] == list(zip(xs, sizes[1], strict=True))
    assert f"BufferTaskCount/{STREAM}/Task004" in acc.Tags()["scalars"]


def test_per_sample_task_ids_attribute_a_blurry_stream(tiny_split):
    # Given a blurry stream (classes no longer tell the task) and the task of every sample
    split = blurry_tasks(tiny_split, keep=0.8, seed=1)
    sample_tasks = torch.repeat_interleave(
        torch.arange(split.n_tasks), torch.tensor(split.train_sizes)
    )
    metric = BufferCompositionMetric(every=5, sample_tasks=sample_tasks)
    recorder = Recorder(split)
    _, evaluator = run(split, [metric], recorder)
    # Then the per-task counts equal the true origin of every stored sample
    task_curves = curves(evaluator, "BufferTaskCount/")
    assert len(task_curves) == 5 and not any("Unknown" in k for k in task_curves)
    xs = evaluator.get_all_metrics()[f"BufferSize/{STREAM}"][0]
    assert xs == [5, 10, 15, 20, 25, 30]
    for name, (tx, tv) in task_curves.items():
        t = int(name.rsplit("Task", 1)[1])
        for x in xs:
            emitted = tv[tx.index(x)] if x in tx else 0
            assert emitted == recorder.states[x]["tasks"].get(t, 0), (name, x)


def test_surrogate_matches_the_loop_oracle_and_leaves_training_unchanged(tiny_split):
    # Given the same seeded run with and without the buffer metrics
    recorder = Recorder(surrogate=True)
    with_metrics, evaluator = run(tiny_split, buffer_metrics(every=EVERY), recorder)
    without, _ = run(tiny_split, [])
    # Then the surrogate equals sum_ij cos(g_i, g_j) from per-sample autograd gradients
    xs, values = evaluator.get_all_metrics()[f"BufferSurrogate/{STREAM}"]
    assert xs == [7, 14, 21, 28, 30]
    for x, v in zip(xs, values, strict=True):
        truth = recorder.states[x]["surrogate"]
        assert v == pytest.approx(truth, rel=1e-4), x
        assert 0 <= v <= recorder.states[x]["size"] ** 2  # |sum of unit gradients|^2
    # And computing it changed nothing in training: same weights, same buffer
    for p, q in zip(with_metrics.model.parameters(), without.model.parameters(), strict=True):
        assert torch.equal(p, q)
    buffers = (with_metrics.storage_policy.tensors(), without.storage_policy.tensors())
    assert torch.equal(buffers[0][0], buffers[1][0])


def test_surrogate_of_known_buffers():
    model = MLP(input_size=4, hidden_sizes=(), num_classes=3)
    metric = BufferSurrogateMetric()
    buf = ReservoirBuffer(5)
    assert metric.surrogate(model, buf) == 0.0  # empty buffer
    x = torch.randn(1, 4, generator=torch.Generator().manual_seed(0))
    buf.add(x.repeat(5, 1), torch.zeros(5, dtype=torch.long))
    # Five copies of one sample: all gradients parallel, surrogate M^2
    assert metric.surrogate(model, buf) == pytest.approx(25.0, rel=1e-5)


def test_arguments_and_buffer_lookup(tiny_split):
    with pytest.raises(ValueError, match="every"):
        BufferCompositionMetric(every=0)
    with pytest.raises(ValueError, match="not both"):
        BufferCompositionMetric(task_of_class={0: 0}, sample_tasks=[0])
    assert [type(m) for m in buffer_metrics(surrogate=False)] == [BufferCompositionMetric]

    class Bare:
        plugins = []

    with pytest.raises(ValueError, match="OnlineBuffer"):
        find_buffer(Bare())
    # A sample_tasks shorter than the stream is an error, not a silent miscount
    metric = BufferCompositionMetric(every=100, sample_tasks=[0] * 25)
    with pytest.raises(ValueError, match="sample_tasks covers 25"):
        run(tiny_split, [metric])


def test_count_by_task_maps_keys_and_counts_unknown_under_minus_one():
    task_of = class_task_map([[0, 1], [2, 3], [4]])
    assert task_of == {0: 0, 1: 0, 2: 1, 3: 1, 4: 2}
    # 9 is in no task: it counts under -1; zero counts are left out
    assert count_by_task([0, 1, 1, 4, 9, 9], task_of) == {0: 3, 2: 1, -1: 2}
    assert count_by_task([], task_of) == {}
    # any hashable key works (the metric maps sample fingerprints)
    assert count_by_task([(1, b"a"), (1, b"b")], {(1, b"a"): 3}) == {3: 1, -1: 1}


def test_buffer_trace_and_composition_metric_count_tasks_alike():
    from avalanche_gss.diagnostics import BufferTrace

    task_classes = [[0, 1], [2, 3], [5, 6]]
    buffer = ReservoirBuffer(MEM, seed=0)
    y = torch.tensor([0] * 5 + [1] * 3 + [3] * 4 + [4] * 2)  # label 4: in no task
    buffer.add(torch.randn(len(y), 4), y)
    trace = BufferTrace(buffer, task_classes).snapshot()["task_counts"]
    _, per_task = BufferCompositionMetric(
        buffer, task_of_class=class_task_map(task_classes)).counts(buffer)
    assert per_task == {0: 8, 1: 4, -1: 2}
    # The trace lists every task (zeros included) and leaves the unknown samples out
    assert trace == [per_task.get(t, 0) for t in range(3)] == [8, 4, 0]
