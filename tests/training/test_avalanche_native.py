"""The buffers and the online template composed the Avalanche way, with stock components.

One test (at least) per way an Avalanche user combines them: Avalanche's benchmarks
(``nc_benchmark``, ``class_incremental_benchmark``, ``split_online_stream``, with and
without task labels), strategies (``Naive``, a custom ``SupervisedTemplate``), plugins
(``ReplayPlugin``, EWC, LwF), models (``SimpleMLP``, ``MTSimpleMLP``,
``IncrementalClassifier``), loggers and checkpoints.
"""

from __future__ import annotations

import io
import warnings
from contextlib import redirect_stdout

import pytest
import torch
from avalanche.benchmarks import class_incremental_benchmark, nc_benchmark, split_online_stream
from avalanche.benchmarks.utils import _make_taskaware_tensor_classification_dataset
from avalanche.core import SupervisedPlugin
from avalanche.logging import InteractiveLogger
from avalanche.models import IncrementalClassifier, MTSimpleMLP, SimpleMLP
from avalanche.training import Naive
from avalanche.training.plugins import EWCPlugin, LwFPlugin, ReplayPlugin
from avalanche.training.templates import SupervisedTemplate
from torch import nn

from avalanche_gss import (
    CBGSSBuffer,
    CBRSBuffer,
    FSSClustBuffer,
    GDumbBuffer,
    GSSClustBuffer,
    GSSGreedy,
    GSSGreedyBuffer,
    GSSIQPBuffer,
    OnlineRehearsal,
    OnlineTemplate,
    RandBuffer,
    ReservoirBuffer,
)
from avalanche_gss.buffers import model_features
from avalanche_gss.streams import TaskSplit, online_benchmark
from avalanche_gss.training import SlowPathWarning, quiet_evaluator

N_FEATURES = 6


def _data(n_per_class=20, n_classes=10, seed=0, transform=None):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n_classes).repeat_interleave(n_per_class)
    x = torch.randn(len(y), N_FEATURES, generator=g) + y[:, None].float()
    return _make_taskaware_tensor_classification_dataset(x, y, task_labels=0, transform=transform)


def _nc(task_labels: bool, **kw):
    return nc_benchmark(_data(**kw), _data(seed=1), 5, task_labels=task_labels, shuffle=False,
                        fixed_class_order=list(range(10)))


def _buffers(m: int = 12):
    """One of each buffer class; the recent-buffer ones merge every 10 samples."""
    return [
        ReservoirBuffer(m, seed=1),
        RandBuffer(m, seed=1),
        GSSGreedyBuffer(m, seed=1),
        GSSGreedyBuffer(m, variant="authors", seed=1),
        GSSIQPBuffer(m, recent_size=10, seed=1),
        GSSClustBuffer(m, recent_size=10, growth=1.01, seed=1),
        FSSClustBuffer(m, recent_size=10, variant="paper", seed=1),
        CBRSBuffer(m, seed=1),
        GDumbBuffer(m, seed=1),
        CBGSSBuffer(m, seed=1),
    ]


BUFFER_IDS = ["reservoir", "rand", "greedy", "greedy-authors", "iqp", "gss-clust", "fss-clust",
              "cbrs", "gdumb", "cb-gss"]
ALL = range(len(BUFFER_IDS))


def _naive(model, plugins, **kw):
    return Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                 train_mb_size=10, train_epochs=1, plugins=plugins,
                 evaluator=quiet_evaluator(), **kw)


# --------------------------------------------------------------------- task labels
@pytest.mark.parametrize("index", ALL, ids=BUFFER_IDS)
def test_stored_samples_keep_their_own_task_label(index):
    buf = _buffers()[index]
    bench = _nc(task_labels=True)
    model = MTSimpleMLP(input_size=N_FEATURES, hidden_size=16)
    strategy = _naive(model, [ReplayPlugin(mem_size=12, storage_policy=buf)])
    for exp in bench.train_stream:
        strategy.train(exp)
    assert len(buf) > 0
    task_of_class = {c: k for k, exp in enumerate(bench.train_stream)
                     for c in exp.classes_in_this_experience}
    data = buf.buffer
    assert len(data) == len(buf)
    _, labels, tasks = zip(*[data[i] for i in range(len(data))], strict=True)
    assert [task_of_class[int(c)] for c in labels] == [int(t) for t in tasks]
    assert buf.task_labels.tolist() == [int(t) for t in tasks]
    if isinstance(buf, (ReservoirBuffer, CBRSBuffer, GDumbBuffer)):  # Rand: the last task's
        assert len(set(tasks)) > 1  # samples of several tasks were stored


# --------------------------------------------------------------------- multi-head
@pytest.mark.parametrize("index", [2, 3, 4, 5, 6, 9], ids=[*BUFFER_IDS[2:7], BUFFER_IDS[9]])
def test_scored_buffers_work_with_a_multi_head_model(index):
    buf = _buffers()[index]
    bench = _nc(task_labels=True)
    torch.manual_seed(0)
    model = MTSimpleMLP(input_size=N_FEATURES, hidden_size=16)
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               storage_policy=buf, n_iter=1, train_mb_size=10)
    for exp in bench.train_stream:
        strategy.train(exp)
    assert len(buf) > 0 and len(set(buf.task_labels.tolist())) > 1


def test_multi_head_replay_goes_to_each_sample_own_head():
    bench = _nc(task_labels=True)
    model = MTSimpleMLP(input_size=N_FEATURES, hidden_size=16)
    buf = ReservoirBuffer(20, seed=0)
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               storage_policy=buf, n_iter=1)
    heads_used: list[int] = []
    original = model.classifier.forward_single_task

    def spy(x, task_label):
        heads_used.append(int(task_label))
        return original(x, task_label)

    model.classifier.forward_single_task = spy  # type: ignore[method-assign]
    for exp in bench.train_stream:
        strategy.train(exp)
    # replay batches after task 0 mix tasks: heads other than the experience's are used
    assert set(buf.task_labels.tolist()) == set(range(5))
    assert set(heads_used) == set(range(5))


# ------------------------------------------------------- ReplayPlugin in stock strategies
def _sizes_plugin(sizes: list[int]) -> SupervisedPlugin:
    class Sizes(SupervisedPlugin):
        def before_forward(self, strategy, **kwargs):
            sizes.append(len(strategy.mb_y))

    return Sizes()


@pytest.mark.parametrize("index", ALL, ids=BUFFER_IDS)
def test_replay_plugin_with_stock_naive_on_class_incremental_online_stream(index):
    buf = _buffers()[index]
    bench = class_incremental_benchmark({"train": _data(), "test": _data(seed=1)},
                                        num_experiences=5)
    stream = split_online_stream(bench.train_stream, experience_size=10, seed=0)
    model = SimpleMLP(num_classes=10, input_size=N_FEATURES, hidden_size=16)
    sizes: list[int] = []
    strategy = _naive(model, [ReplayPlugin(mem_size=12, batch_size=10, storage_policy=buf),
                              _sizes_plugin(sizes)])
    experiences = list(stream)[:40]
    strategy.train(experiences)
    assert len(buf) > 0
    assert max(sizes) == 20  # batches of 10 new + 10 replayed samples
    assert len(buf.buffer[0]) == len(experiences[0].dataset[0])  # the stream's own fields


@pytest.mark.parametrize("index", ALL, ids=BUFFER_IDS)
def test_replay_plugin_in_the_online_template_on_a_multi_task_online_stream(index):
    """Avalanche 0.6's Naive calls a multi-head model without task labels on online
    experiences; the online template passes them, so the multi-head case runs there."""
    buf = _buffers()[index]
    bench = _nc(task_labels=True)
    stream = split_online_stream(bench.train_stream, experience_size=10, seed=0,
                                 access_task_boundaries=True)
    model = MTSimpleMLP(input_size=N_FEATURES, hidden_size=16)
    sizes: list[int] = []
    with pytest.warns(SlowPathWarning):
        strategy = OnlineTemplate(
            model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01), n_iter=1,
            plugins=[ReplayPlugin(mem_size=12, batch_size=10, storage_policy=buf),
                     _sizes_plugin(sizes)])
        strategy.train(stream)
    assert len(buf) > 0 and max(sizes) == 20
    assert len(buf.buffer[0]) == 3 and len(set(buf.task_labels.tolist())) >= 1


@pytest.mark.parametrize("index", ALL, ids=BUFFER_IDS)
def test_replay_plugin_with_stock_online_naive(index):
    from avalanche.benchmarks.scenarios.online import OnlineCLScenario
    from avalanche.training import OnlineNaive

    buf = _buffers()[index]
    bench = _nc(task_labels=False)
    ocl = OnlineCLScenario(bench.streams.values(), experience_size=10)
    model = SimpleMLP(num_classes=10, input_size=N_FEATURES, hidden_size=16)
    sizes: list[int] = []
    strategy = OnlineNaive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                           train_mb_size=10, evaluator=quiet_evaluator(),
                           plugins=[ReplayPlugin(mem_size=12, batch_size=10, storage_policy=buf),
                                    _sizes_plugin(sizes)])
    strategy.train(list(ocl.train_online_stream)[:40])
    assert len(buf) > 0 and max(sizes) == 20


def test_replay_plugin_in_a_custom_supervised_template():
    class MyStrategy(SupervisedTemplate):
        pass

    buf = GSSGreedyBuffer(12, seed=0)
    bench = _nc(task_labels=False)
    model = SimpleMLP(num_classes=10, input_size=N_FEATURES, hidden_size=16)
    strategy = MyStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                          train_mb_size=10, plugins=[ReplayPlugin(mem_size=12, storage_policy=buf)],
                          evaluator=quiet_evaluator())
    for exp in bench.train_stream:
        strategy.train(exp)
    assert len(buf) == 12
    assert set(buf.buffer_groups) == set(range(10)) & set(buf.buffer_groups)
    assert sum(len(d) for d in buf.buffer_datasets) == 12


# ------------------------------------------------------------------ the online template
def _split(n_tasks=3, per_task=40):
    g = torch.Generator().manual_seed(0)
    tasks, test = [], []
    for k in range(n_tasks):
        y = torch.tensor([2 * k, 2 * k + 1]).repeat(per_task // 2)
        x = torch.randn(len(y), N_FEATURES, generator=g) + y[:, None].float()
        tasks.append((x, y))
        test.append((x[:10], y[:10]))
    classes = tuple((2 * k, 2 * k + 1) for k in range(n_tasks))
    return TaskSplit(train=tuple(tasks), test=tuple(test), task_classes=classes,
                     num_classes=2 * n_tasks, dataset="blobs", data_source="generated")


def _mlp(outputs=6):
    return SimpleMLP(num_classes=outputs, input_size=N_FEATURES, hidden_size=16, drop_rate=0)


def test_online_template_replays_through_the_strategy_dataloader():
    bench = online_benchmark(_split())
    model = _mlp()
    sizes: list[int] = []

    class Sizes(SupervisedPlugin):
        def before_forward(self, strategy, **kwargs):
            sizes.append(len(strategy.mb_y))

    buf = ReservoirBuffer(20, seed=0)
    strategy = OnlineTemplate(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05), n_iter=2,
        plugins=[ReplayPlugin(mem_size=20, batch_size=10, storage_policy=buf), Sizes()])
    strategy.train(bench.train_stream)
    assert len(buf) == 20
    assert sizes[:2] == [10, 10] and set(sizes[2:]) == {20}  # replay from the 2nd batch on


def test_online_template_fires_every_callback_once_per_experience():
    bench = online_benchmark(_split())
    counts: dict[str, int] = {}

    class Counter(SupervisedPlugin):
        pass

    events = ["before_train_dataset_adaptation", "after_train_dataset_adaptation",
              "before_training_exp", "before_training_epoch", "after_training_epoch",
              "after_training_exp", "before_training_iteration", "after_training_iteration",
              "before_training", "after_training"]
    for event in events:
        def hook(self, strategy, _event=event, **kwargs):
            counts[_event] = counts.get(_event, 0) + 1
        setattr(Counter, event, hook)
    model = _mlp()
    strategy = OnlineTemplate(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                              n_iter=3, plugins=[Counter()])
    strategy.train(bench.train_stream)
    n = len(bench.train_stream)
    assert counts["before_training"] == counts["after_training"] == 1
    for event in events[:6]:
        assert counts[event] == n, event
    assert counts["before_training_iteration"] == counts["after_training_iteration"] == 3 * n


def test_interactive_logger_sees_one_epoch_per_experience():
    bench = online_benchmark(_split(per_task=20))
    model = _mlp()
    out = io.StringIO()
    with redirect_stdout(out):
        strategy = OnlineTemplate(
            model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05), n_iter=3,
            evaluator=quiet_evaluator(loggers=[InteractiveLogger()]))
        strategy.train(bench.train_stream)
    epochs = [line for line in out.getvalue().splitlines() if "Epoch" in line and "ended" in line]
    assert len(epochs) == len(bench.train_stream)


def test_incremental_classifier_grows_along_the_stream():
    bench = online_benchmark(_split())
    model = _mlp()
    model.classifier = IncrementalClassifier(16, initial_out_features=2)
    strategy = GSSGreedy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                         mem_size=20)
    strategy.train(bench.train_stream)
    assert model.classifier.classifier.out_features == 6
    # the optimizer was told about the new parameters
    optimized = {id(p) for group in strategy.optimizer.param_groups for p in group["params"]}
    assert {id(p) for p in model.parameters()} <= optimized


@pytest.mark.parametrize(("eval_every", "mode"), [(0, "epoch"), (4, "epoch"), (2, "iteration")])
def test_eval_every_evaluates_as_avalanche_naive_does(eval_every, mode):
    """Periodic evaluation: the same evaluations as Avalanche's Naive on the same stream."""
    bench = online_benchmark(_split())

    def evaluations(make):
        evals: list[tuple[int, int]] = []

        class Evals(SupervisedPlugin):
            def after_eval_exp(self, strategy, **kwargs):
                evals.append((strategy.clock.train_iterations,
                              strategy.experience.current_experience))

        model = _mlp()
        strategy = make(model, [Evals()])
        strategy.train(bench.train_stream[:5], eval_streams=[bench.test_stream])
        return evals

    ours = evaluations(lambda model, plugins: OnlineTemplate(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05), n_iter=1,
        eval_every=eval_every, peval_mode=mode, plugins=plugins))
    naive = evaluations(lambda model, plugins: Naive(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05), train_mb_size=10,
        train_epochs=1, eval_every=eval_every, peval_mode=mode, plugins=plugins,
        evaluator=quiet_evaluator()))
    assert ours == naive and len(ours) > len(bench.test_stream)


def test_train_without_eval_every_evaluates_nothing_and_walks_the_stream_once():
    bench = online_benchmark(_split())
    model = _mlp()
    built: list[int] = []
    stream = bench.train_stream
    make = stream._make_experience

    def counting(i):
        built.append(i)
        return make(i)

    stream._make_experience = counting
    strategy = OnlineTemplate(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05))
    strategy.train(stream)
    assert built == list(range(len(stream)))


def test_a_plugin_that_replaces_the_dataset_takes_effect_and_is_said_once():
    bench = online_benchmark(_split())
    seen: list[int] = []
    extra = _make_taskaware_tensor_classification_dataset(
        torch.zeros(5, N_FEATURES), torch.zeros(5, dtype=torch.long), task_labels=0)

    class Adds(SupervisedPlugin):
        def after_train_dataset_adaptation(self, strategy, **kwargs):
            strategy.adapted_dataset = strategy.adapted_dataset.concat(extra)

        def before_forward(self, strategy, **kwargs):
            seen.append(len(strategy.mb_y))

    model = _mlp()
    strategy = OnlineTemplate(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                              n_iter=1, train_mb_size=100, plugins=[Adds()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy.train(bench.train_stream[:4])
    assert seen == [15, 15, 15, 15]
    slow = [w for w in caught if issubclass(w.category, SlowPathWarning)]
    assert len(slow) == 1 and "replaced the adapted dataset" in str(slow[0].message)


@pytest.mark.parametrize("eval_mb_size", [7, 1000])
def test_evaluation_on_the_tensor_path_is_avalanches_dataloader_path(eval_mb_size):
    # The same strategy state evaluated on the tensor path and, in a subclass that makes
    # Avalanche's own loader, through its DataLoader: the same batches, so the same metrics
    # to the bit, and the model sees eval_mb_size samples at a time with their task label.
    from avalanche.evaluation.metrics import accuracy_metrics, loss_metrics

    class Loader(OnlineTemplate):
        def make_eval_dataloader(self, **kwargs):
            SupervisedTemplate.make_eval_dataloader(self, **kwargs)

    bench = online_benchmark(_split(per_task=30))
    results, sizes = [], []

    class Sizes(SupervisedPlugin):
        def before_eval_forward(self, strategy, **kwargs):
            sizes.append((len(strategy.mb_x), strategy.mb_task_id.tolist()))

    for template in (OnlineTemplate, Loader):
        model = _mlp()
        torch.manual_seed(0)
        model.load_state_dict(SimpleMLP(num_classes=6, input_size=N_FEATURES, hidden_size=16,
                                        drop_rate=0).state_dict())
        strategy = template(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                            eval_mb_size=eval_mb_size, plugins=[Sizes()], evaluator=quiet_evaluator(
                                accuracy_metrics(experience=True), loss_metrics(experience=True)))
        strategy.train(bench.train_stream)
        results.append(strategy.eval(bench.test_stream))
    assert results[0] == results[1] and len(results[0]) >= 6
    half = len(sizes) // 2
    assert sizes[:half] == sizes[half:]
    assert [n for n, _ in sizes[:half]] == ([7, 3] * 3 if eval_mb_size == 7 else [10] * 3)
    assert all(set(t) == {0} for _, t in sizes)


def test_a_plugin_that_replaces_the_eval_dataset_takes_effect():
    bench = online_benchmark(_split())
    extra = _make_taskaware_tensor_classification_dataset(
        torch.zeros(5, N_FEATURES), torch.zeros(5, dtype=torch.long), task_labels=0)
    seen: list[int] = []

    class Adds(SupervisedPlugin):
        def after_eval_dataset_adaptation(self, strategy, **kwargs):
            strategy.adapted_dataset = strategy.adapted_dataset.concat(extra)

        def before_eval_forward(self, strategy, **kwargs):
            seen.append(len(strategy.mb_y))

    model = _mlp()
    strategy = OnlineTemplate(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                              plugins=[Adds()])
    strategy.eval(bench.test_stream)
    assert seen == [15, 15, 15]


def test_an_experience_dataset_is_built_only_when_read():
    # The tensor path and the buffer read the tensors; a plugin reading adapted_dataset, or
    # the buffer read as a dataset, gets the experience's own dataset, built then.
    from avalanche_gss.streams import online

    built: list[int] = []
    make = online.tensor_dataset

    def counting(x, y):
        built.append(len(y))
        return make(x, y)

    bench = online_benchmark(_split())
    model = _mlp()
    buf = ReservoirBuffer(15, seed=0)
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               n_iter=1, storage_policy=buf)
    online.tensor_dataset = counting
    try:
        strategy.train(bench.train_stream[:6])
        assert built == []
        read: list[bool] = []

        class Reads(SupervisedPlugin):
            def after_train_dataset_adaptation(self, strategy, **kwargs):
                read.append(strategy.adapted_dataset is strategy.experience.dataset)

        strategy.plugins.append(Reads())
        with warnings.catch_warnings():
            warnings.simplefilter("error", SlowPathWarning)  # reading it keeps the fast path
            strategy.train(bench.train_stream[6:8])
        assert read == [True, True] and built == [10, 10]
        data = buf.buffer  # 15 samples of 8 experiences: their datasets are built now
        x, y = buf.tensors()
        assert len(data) == 15 and all(torch.equal(data[i][0], x[i]) for i in range(15))
        assert all(int(data[i][1]) == int(y[i]) for i in range(15))
        assert len(built) > 2
    finally:
        online.tensor_dataset = make


def test_ewc_and_lwf_together_with_a_gss_buffer():
    bench = online_benchmark(_split())
    model = _mlp()
    buf = GSSGreedyBuffer(20, seed=0)
    strategy = OnlineRehearsal(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05), n_iter=1,
        storage_policy=buf, plugins=[EWCPlugin(ewc_lambda=0.1), LwFPlugin()])
    for task in range(3):
        strategy.train(bench.train_stream_of_task(task))
    assert len(buf) == 20
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_avalanche_checkpoint_round_trip_with_a_gss_buffer(tmp_path):
    from avalanche.checkpointing import maybe_load_checkpoint, save_checkpoint

    bench = online_benchmark(_split())

    def make():
        torch.manual_seed(0)
        model = _mlp()
        return GSSGreedy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                         mem_size=15, n_iter=1)

    first = make()
    first.train(bench.train_stream[:6])
    path = str(tmp_path / "ckpt.pkl")
    save_checkpoint(first, path)
    loaded, _ = maybe_load_checkpoint(make(), path)
    assert torch.equal(loaded.storage_policy.tensors()[0], first.storage_policy.tensors()[0])
    loaded.train(bench.train_stream[6:])
    first.train(bench.train_stream[6:])
    for a, b in zip(first.model.parameters(), loaded.model.parameters(), strict=True):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------- augmentation
def test_buffer_rereads_random_train_transforms_and_applies_eval_ones():
    calls = {"train": 0}

    def train_t(x):
        calls["train"] += 1
        return x + torch.randn_like(x)

    data = _make_taskaware_tensor_classification_dataset(
        torch.zeros(30, N_FEATURES), torch.arange(30) % 3, task_labels=0,
        transform_groups={"train": (train_t, None), "eval": (lambda x: x + 100.0, None)})
    buf = ReservoirBuffer(10, seed=0)
    buf.update_from_dataset(data)
    assert not buf.replays_tensors
    stored = buf.buffer
    a, b = stored[0][0], stored[0][0]
    assert not torch.equal(a, b)  # a fresh augmentation at each read
    assert torch.equal(stored.eval()[0][0], torch.full((N_FEATURES,), 100.0))
    # the rehearsal plugin reads such a buffer through its dataset: fresh augmentations
    from avalanche_gss import OnlineRehearsalPlugin
    from avalanche_gss.training.retrieval import draw

    plugin = OnlineRehearsalPlugin(buf, replay_batch_size=4)
    before = calls["train"]
    x1, _, _ = draw(plugin.storage_policy, 4, plugin.generator, "cpu")
    x2, _, _ = draw(plugin.storage_policy, 4, plugin.generator, "cpu")
    assert calls["train"] - before == 8
    assert not torch.equal(x1, x2)


# ----------------------------------------------------------------------- resize and views
@pytest.mark.parametrize("seed", range(20))
def test_reservoir_grows_mid_run(seed):
    buf = ReservoirBuffer(5, seed=seed)
    x, y = torch.randn(40, 3), torch.arange(40)
    buf.add(x[:20], y[:20])
    buf.resize(None, 10)
    assert len(buf) == 5
    buf.add(x[20:25], y[20:25])  # exactly the free slots: every sample is stored
    assert len(buf) == 10 and set(range(20, 25)) <= set(buf.tensors()[1].tolist())
    buf.resize(None, 15)
    buf.add(x[25:], y[25:])  # more than the free slots
    assert len(buf) == 15 and buf.max_size == 15


@pytest.mark.parametrize("index", ALL, ids=BUFFER_IDS)
def test_every_buffer_is_a_storage_policy_in_full(index):
    """Invariants every buffer keeps, through updates, grow and shrink."""
    buf = _buffers(8)[index]
    model = _mlp(10)
    data = _data(n_per_class=4)  # 40 samples of 10 classes
    buf.update_from_dataset(data, model)
    assert 0 < len(buf) <= 8 and len(buf.buffer) == len(buf)
    groups = buf.buffer_groups
    assert sum(len(g) for g in groups.values()) == len(buf)
    for label, group in groups.items():
        assert {int(item[1]) for item in group.buffer} == {label}
    assert sum(len(d) for d in buf.task_datasets) == len(buf)
    buf.resize(None, 12)
    assert buf.max_size == 12
    buf.update_from_dataset(_data(n_per_class=4, seed=3), model)
    assert len(buf) <= 12 and len(buf.buffer) == len(buf)
    buf.resize(None, 3)
    assert len(buf) <= 3 and len(buf.buffer) == len(buf)
    buf.update_from_dataset(_data(n_per_class=2, seed=4), model)
    assert len(buf) <= 3
    x, y = buf.tensors()
    for i in range(len(buf)):  # slot i of the dataset is slot i of the tensors
        assert torch.equal(buf.buffer[i][0], x[i]) and int(buf.buffer[i][1]) == int(y[i])


def test_update_from_dataset_needs_the_model_for_scored_buffers():
    with pytest.raises(ValueError, match="model"):
        GSSGreedyBuffer(5).update_from_dataset(_data(n_per_class=2))


# ----------------------------------------------------------------------------- features
@pytest.mark.parametrize("make", [
    lambda: SimpleMLP(num_classes=10, input_size=N_FEATURES * 4, hidden_size=16),
    lambda: MTSimpleMLP(input_size=N_FEATURES * 4, hidden_size=16),
])
def test_fss_clust_finds_the_features_before_the_classifier(make):
    model = make().eval()
    x = torch.randn(12, 2, 2, N_FEATURES)  # not flattened: the model's forward flattens
    t = torch.arange(12) % 3
    if isinstance(model, MTSimpleMLP):
        for k in range(3):  # create the heads
            model.classifier.adaptation(type("E", (), {"task_labels": [k],
                                                        "classes_in_this_experience": [0, 1],
                                                        "dataset": None})())
    feats = model_features(model, x, t)
    expected = model.features(x.reshape(12, -1))
    assert torch.allclose(feats, expected)
    buf = FSSClustBuffer(6, recent_size=12, variant="paper")
    buf.add(x, torch.arange(12) % 4, model, task_labels=t)
    assert 0 < len(buf) <= 6


def test_fss_clust_with_avalanche_simple_mlp_in_a_run():
    bench = online_benchmark(_split())
    model = _mlp()
    buf = FSSClustBuffer(20, recent_size=20, variant="paper")
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               storage_policy=buf, n_iter=1)
    strategy.train(bench.train_stream)
    assert len(buf) > 0


def test_classifier_must_be_findable():
    model = nn.Sequential(nn.Flatten(), nn.Conv1d(1, 2, 3))
    with pytest.raises(TypeError, match="classifier"):
        model_features(model, torch.randn(2, 1, 5))


def test_source_datasets_are_forgotten_once_no_sample_refers_to_them():
    """Memory stays flat on long streams: the buffer keeps only the datasets it uses."""
    bench = online_benchmark(_split(n_tasks=3, per_task=400))  # 120 experiences
    buf = ReservoirBuffer(5, seed=0)
    strategy = type("S", (), {"model": None, "device": "cpu"})()
    for exp in bench.train_stream:
        buf.post_adapt(strategy, exp)
        assert len(buf.sources.datasets) <= 64 + 1
    assert set(buf.store.src[: len(buf)].tolist()) <= set(buf.sources.datasets)
    assert len(buf.buffer) == 5


def test_the_source_registry_s_peak_does_not_creep_up_along_the_stream():
    """At most 32 unreferenced sources between two prunings, however long the stream.

    With M = 40 and 600 experiences nearly every stored sample comes from its own
    experience late in the stream; a registry pruned when it doubled held up to twice the
    referenced sources (80 here), its peak rising with the stream, and the resident
    memory with it.
    """
    bench = online_benchmark(_split(n_tasks=3, per_task=2000))  # 600 experiences
    buf = ReservoirBuffer(40, seed=0)
    strategy = type("S", (), {"model": None, "device": "cpu"})()
    peak = 0
    for exp in bench.train_stream:
        buf.post_adapt(strategy, exp)
        peak = max(peak, len(buf.sources.datasets))
    assert len(buf) == 40 and peak <= 40 + 32, peak


@pytest.mark.parametrize("index", ALL, ids=BUFFER_IDS)
def test_buffer_dataset_follows_every_update(index):
    """Read after each update (the incremental path), through grow, shrink and merges."""
    buf = _buffers(8)[index]
    model = _mlp(10)
    for step in range(24):
        if step == 8:
            buf.resize(None, 12)
        if step == 16:
            buf.resize(None, 5)
        buf.update_from_dataset(_data(n_per_class=1, seed=step), model)
        data = buf.buffer
        assert len(data) == len(buf)
        x, y = buf.tensors()
        for i in range(len(buf)):
            assert torch.equal(data[i][0], x[i]) and int(data[i][1]) == int(y[i])
        assert buf.task_labels.tolist() == [int(data[i][2]) for i in range(len(buf))]
