"""online_benchmark: task-free online streams in Avalanche; NCScenario for iCaRL."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from avalanche_gss.streams import (
    ArrayDataset,
    OnlineTrainStream,
    blurry_tasks,
    class_incremental_benchmark_for,
    disjoint_tasks,
    experience_tensors,
    imbalanced_tasks,
    online_benchmark,
    permuted_tasks,
    tensor_dataset,
)

BOUNDARY_ATTRIBUTES = (
    "origin_experience",
    "is_first_subexp",
    "is_last_subexp",
    "sub_stream_length",
)


def test_experiences_are_batches_in_task_order_without_straddling(toy) -> None:
    split = disjoint_tasks(toy, samples_per_task=25, seed=0)
    bm = online_benchmark(split, batch_size=10)
    exps = list(bm.train_stream)
    # 25 per task -> 10, 10, 5: batches never straddle a task.
    assert [len(e.dataset) for e in exps] == [10, 10, 5] * 5
    assert len(bm.train_stream) == 15
    assert bm.task_experience_ranges == tuple(range(3 * k, 3 * k + 3) for k in range(5))
    for k, r in enumerate(bm.task_experience_ranges):
        for i in r:
            assert set(exps[i].classes_in_this_experience) <= set(split.task_classes[k])
    # Stream order = task order, sample by sample.
    x = torch.cat([experience_tensors(e)[0] for e in exps])
    y = torch.cat([experience_tensors(e)[1] for e in exps])
    x_ref, y_ref = split.stream_tensors()
    assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
    assert [e.current_experience for e in exps] == list(range(15))


def test_no_task_label_or_boundary_reaches_the_learner(toy) -> None:
    bm = online_benchmark(disjoint_tasks(toy, samples_per_task=20, seed=0), batch_size=10)
    for exp in bm.train_stream:
        for view in (exp, exp.train()):
            assert view.task_labels == [0] and view.task_label == 0
            assert set(view.dataset.targets_task_labels.uniques) == {0}
            assert all(view.dataset[i][2] == 0 for i in range(len(view.dataset)))
            for attr in BOUNDARY_ATTRIBUTES:
                assert not hasattr(view, attr), attr
        assert len(exp.dataset) == 10
    for stream in (bm.test_stream, bm.task_stream):
        assert [e.task_labels for e in stream] == [[0]] * 5


def test_test_and_task_streams_hold_one_experience_per_task(toy) -> None:
    split = blurry_tasks(disjoint_tasks(toy, samples_per_task=30, seed=0), keep=0.8)
    bm = online_benchmark(split)
    assert len(bm.test_stream) == len(bm.task_stream) == bm.n_tasks == 5
    for k in range(5):
        for stream, (x, y) in ((bm.test_stream, split.test[k]), (bm.task_stream, split.train[k])):
            ex, ey = experience_tensors(stream[k])
            assert torch.equal(ex, x) and torch.equal(ey, y)
    assert bm.num_classes == 10 and bm.data_source == toy.source
    protocol = json.loads(json.dumps(bm.protocol))
    assert protocol["batch_size"] == 10 and protocol["blurry"]["keep"] == 0.8


def test_train_stream_of_task_is_the_task_slice(toy) -> None:
    split = disjoint_tasks(toy, samples_per_task=30, seed=0)
    bm = online_benchmark(split, batch_size=10)
    part = bm.train_stream_of_task(2)
    assert len(part) == 3 and [e.current_experience for e in part] == [6, 7, 8]
    assert torch.equal(torch.cat([experience_tensors(e)[1] for e in part]), split.train[2][1])


def test_experience_tensors_generic_path_matches_fast_path(toy) -> None:
    bm = online_benchmark(disjoint_tasks(toy, samples_per_task=20, seed=0))
    exp = bm.train_stream[3]
    fast = experience_tensors(exp)
    slow = experience_tensors(exp.dataset)  # item-by-item through the Avalanche dataset
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
    sub = tensor_dataset(*fast).subset([7, 2])
    assert torch.equal(experience_tensors(sub)[1], fast[1][[7, 2]])


def test_construction_is_cheap_and_lazy(monkeypatch) -> None:
    # Lazy: building a 10,000-experience stream makes no experience; reading one makes
    # exactly that one (counted on the stream's real factory, not timed).
    made: list[int] = []
    real = OnlineTrainStream._make_experience

    def counting(self, idx):
        made.append(idx)
        return real(self, idx)

    monkeypatch.setattr(OnlineTrainStream, "_make_experience", counting)
    n = 100_000
    x = torch.zeros(n, 784)
    data = ArrayDataset("big", "zeros", x, torch.arange(n) % 10, x[:10], torch.arange(10), 10)
    split = disjoint_tasks(data, samples_per_task=None, seed=0)  # 5 tasks of 20,000
    bm = online_benchmark(split, batch_size=10)
    assert len(bm.train_stream) == 10_000
    assert made == []
    last = bm.train_stream[9_999]
    assert len(last.dataset) == 10 and last.current_experience == 9_999
    assert made == [9_999]


def test_class_incremental_benchmark_for_icarl(toy) -> None:
    split = imbalanced_tasks(toy, sequence=2, major=40, minor=8, seed=0)
    nc = class_incremental_benchmark_for(split)
    assert nc.n_classes_per_exp == [2] * 5 and nc.classes_order == list(range(10))
    assert [len(e.dataset) for e in nc.train_stream] == [8, 40, 8, 8, 8]
    for exp, classes in zip(nc.train_stream, split.task_classes, strict=True):
        assert sorted(exp.classes_in_this_experience) == list(classes)
        assert exp.task_label == 0
    assert [len(e.dataset) for e in nc.test_stream] == list(split.test_sizes)
    with pytest.raises(ValueError, match="class-disjoint"):
        class_incremental_benchmark_for(permuted_tasks(toy, n_tasks=2, samples_per_task=10))
    with pytest.raises(ValueError, match="class-disjoint"):
        class_incremental_benchmark_for(blurry_tasks(disjoint_tasks(toy, samples_per_task=20)))


@pytest.mark.filterwarnings("ignore:No loggers specified")
def test_avalanche_strategy_trains_and_evaluates_on_the_streams(toy) -> None:
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training import Naive
    from avalanche.training.plugins import EvaluationPlugin

    bm = online_benchmark(disjoint_tasks(toy, samples_per_task=20, seed=0), batch_size=10)
    model = torch.nn.Linear(6, 10)
    strategy = Naive(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
        train_mb_size=10,
        eval_mb_size=50,
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
    )
    strategy.train(bm.train_stream, eval_streams=[])
    assert strategy.clock.train_exp_counter == 10  # one per 10-sample experience
    results = strategy.eval(bm.test_stream)
    assert sum("Top1_Acc_Exp" in key for key in results) == 5


@pytest.mark.slow
def test_package_names_resolve_and_online_ones_load_avalanche_on_first_access():
    code = (
        "import sys\n"
        "import avalanche_gss.streams as b\n"
        "assert not {'avalanche', 'torch'} & set(sys.modules), 'the package imported them'\n"
        "assert b.REGISTRY['disjoint'] is not None and 'torch' not in sys.modules\n"
        "assert b.TaskSplit is not None and 'avalanche' not in sys.modules\n"
        "lazy = {n for n, module in b._LAZY.items() if module == 'online'}\n"
        "assert b.online_benchmark is not None and 'avalanche' in sys.modules\n"
        "import avalanche_gss.streams.online as o\n"
        "assert all(hasattr(b, n) for n in b.__all__)\n"
        "assert all(getattr(b, n) is getattr(o, n) for n in lazy), lazy\n"
        "assert o.__all__ == sorted(lazy | {'sample_fields'}), o.__all__\n"
        "assert 'sample_fields' not in b.__all__ and not hasattr(b, 'sample_fields')\n"
        "print(len(lazy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, timeout=600,
                          capture_output=True, text=True)
    assert done.stdout.split() == ["8"]
