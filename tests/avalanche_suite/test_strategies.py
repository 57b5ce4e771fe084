"""Avalanche 0.6.0's ``tests/training/test_strategies.py`` with avalanche-gss.

Adapted from Avalanche (https://github.com/ContinualAI/avalanche, tag v0.6.0, MIT License,
Copyright (c) 2020 ContinualAI).

* ``StrategyTest.test_replay``: Avalanche's ``Replay`` strategy is ``SupervisedTemplate``
  plus ``ReplayPlugin(mem_size)`` and takes no storage policy, so it becomes Avalanche's
  ``Naive`` plus ``ReplayPlugin(mem_size=10, storage_policy=<our buffer>)``
  (``test_replay``), also with our ``OnlineTemplate`` in place of ``Naive``; and, as our
  own rehearsal strategy, ``OnlineRehearsal`` with the same buffer
  (``test_replay_online_rehearsal``). ``n_iter=2`` stands for ``train_epochs=2`` in our
  templates (two passes on every mini-batch). All in the class-incremental (SIT) and
  the multi-task (MT, ``MTSimpleMLP``: the scored buffers call ``model(x, t)``) scenarios.
  Changed for speed: ``get_fast_benchmark(n_samples_per_class=20)`` instead of 100.
* ``BaseStrategyTest.test_periodic_eval`` and ``test_early_stop``: ``OnlineTemplate``
  replaces ``Naive`` / ``Cumulative`` (it overrides the training epoch and the periodic
  evaluation's inputs, and claims Avalanche's behaviour), see each test.

Not adapted:

* ``test_replay``'s ``assertWarns(PositionalArgumentsDeprecatedWarning)``: a check of
  Avalanche's deprecation path for positional arguments; ``OnlineRehearsal`` takes keyword
  arguments only (by design), and ``Naive`` is Avalanche's own.
* The strategies that build their own buffer and take no storage policy: ``test_mer``
  (MER), ``test_gdumb`` (GDumb's own buffer), ``test_erace`` / ``test_eraml`` (their
  ``ClassBalancedBuffer``), ``test_der`` (``ClassBalancedBufferWithLogits``), ``test_mir``,
  ``test_icarl``, ``test_bic``, ``test_feature_replay`` (a buffer of features),
  ``test_cope``; ``test_warning_slda_lwf`` (Avalanche's plugin compatibility warning).
* The other strategies (Naive, Joint, CWR*, Cumulative, SLDA, LwF, AGEM, GEM, EWC, RWalk,
  SI, PNN, ExpertGate, LFL, MAS, L2P, feature distillation) and
  ``test_eval_streams_normalization``, ``test_plugins_compatibility_checks``,
  ``test_forward_hooks``: no storage policy and no online template to swap in.
"""

import sys

import pytest
from avalanche.evaluation.metrics import StreamAccuracy
from avalanche.logging import TextLogger
from avalanche.models import IncrementalClassifier, MTSimpleMLP, SimpleMLP
from avalanche.training.plugins import EvaluationPlugin, ReplayPlugin, SupervisedPlugin
from avalanche.training.supervised import Naive
from torch.nn import CrossEntropyLoss
from torch.optim import SGD

from avalanche_gss import OnlineRehearsal, OnlineTemplate

from .unit_tests_utils import BUFFERS, get_fast_benchmark

DEVICE = "cpu"

CASES = [
    pytest.param(
        name,
        multi_task,
        id=f"{name}-{'MT' if multi_task else 'SIT'}",
    )
    for name in BUFFERS
    for multi_task in (False, True)
]


def run_strategy(benchmark, cl_strategy):
    """Avalanche's ``tests/training/test_strategy_utils.run_strategy``."""
    cl_strategy.evaluator.loggers = [TextLogger(sys.stdout)]
    results = []
    for train_batch_info in benchmark.train_stream:
        cl_strategy.train(train_batch_info, num_workers=0)
        results.append(cl_strategy.eval(benchmark.test_stream[:]))
    return results


def init_scenario(multi_task=False):
    model = get_model(fast_test=True, multi_task=multi_task)
    optimizer = SGD(model.parameters(), lr=1e-4)
    criterion = CrossEntropyLoss()
    benchmark = get_fast_benchmark(use_task_labels=multi_task, n_samples_per_class=20)
    return model, optimizer, criterion, benchmark


def get_model(fast_test=False, multi_task=False):
    if multi_task:
        return MTSimpleMLP(input_size=6, hidden_size=10)
    return SimpleMLP(input_size=6, hidden_size=10)


def _seen(buffer, mem_size):
    # Not in Avalanche's test: the buffer was filled through the strategy.
    assert 0 < len(buffer) <= mem_size


@pytest.mark.filterwarnings("ignore::avalanche_gss.training.SlowPathWarning")
@pytest.mark.parametrize("template", ["Naive", "OnlineTemplate"])
@pytest.mark.parametrize(("name", "multi_task"), CASES)
def test_replay(name, multi_task, template):
    model, optimizer, criterion, benchmark = init_scenario(multi_task=multi_task)
    buffer = BUFFERS[name](10)
    kwargs = dict(
        model=model,
        optimizer=optimizer,
        criterion=criterion,
        train_mb_size=64,
        device=DEVICE,
        eval_mb_size=50,
        plugins=[ReplayPlugin(mem_size=10, storage_policy=buffer)],
    )
    if template == "Naive":
        strategy = Naive(**kwargs, train_epochs=2)
    else:
        strategy = OnlineTemplate(**kwargs, n_iter=2)
    run_strategy(benchmark, strategy)
    _seen(buffer, 10)


@pytest.mark.filterwarnings("ignore::avalanche_gss.training.SlowPathWarning")
@pytest.mark.parametrize(("name", "multi_task"), CASES)
def test_replay_online_rehearsal(name, multi_task):
    model, optimizer, criterion, benchmark = init_scenario(multi_task=multi_task)
    buffer = BUFFERS[name](10)
    strategy = OnlineRehearsal(
        storage_policy=buffer,
        model=model,
        optimizer=optimizer,
        criterion=criterion,
        train_mb_size=64,
        device=DEVICE,
        eval_mb_size=50,
        n_iter=2,
    )
    run_strategy(benchmark, strategy)
    _seen(buffer, 10)


# BaseStrategyTest.test_periodic_eval, Naive(train_epochs=2) -> OnlineTemplate(n_iter=2):
# our template learns an experience as one epoch in which every mini-batch is learnt
# n_iter times, so the iterations are Avalanche's (2 x 120 with Naive's train_mb_size=1,
# given explicitly: ours defaults to 10) but there is one epoch. Case #3 (an evaluation
# before training and after every epoch) is Avalanche's rule with that one epoch.
@pytest.mark.filterwarnings("ignore::avalanche_gss.training.SlowPathWarning")
def test_periodic_eval():
    model = SimpleMLP(input_size=6, hidden_size=10)
    model.classifier = IncrementalClassifier(model.classifier.in_features)
    benchmark = get_fast_benchmark()
    optimizer = SGD(model.parameters(), lr=1e-3)
    criterion = CrossEntropyLoss()
    curve_key = "Top1_Acc_Stream/eval_phase/train_stream/Task000"
    common = dict(model=model, optimizer=optimizer, criterion=criterion, train_mb_size=1,
                  n_iter=2)

    ###################
    # Case #1: No eval
    ###################
    # we use stream acc. because it emits a single value
    # for each eval loop.
    acc = StreamAccuracy()
    strategy = OnlineTemplate(**common, eval_every=-1, evaluator=EvaluationPlugin(acc))
    strategy.train(benchmark.train_stream[0])
    # eval is not called in this case
    assert len(strategy.evaluator.get_all_metrics()) == 0

    ###################
    # Case #2: Eval at the end only and before training
    ###################
    acc = StreamAccuracy()
    evalp = EvaluationPlugin(acc)
    strategy = OnlineTemplate(**common, eval_every=0, evaluator=evalp)
    strategy.train(benchmark.train_stream[0])
    # eval is called once at the end of the training loop
    curve = strategy.evaluator.get_all_metrics()[curve_key][1]
    assert len(curve) == 2

    ###################
    # Case #3: Eval after every epoch and before training
    ###################
    acc = StreamAccuracy()
    strategy = OnlineTemplate(**common, eval_every=1, evaluator=EvaluationPlugin(acc))
    strategy.train(benchmark.train_stream[0])
    curve = strategy.evaluator.get_all_metrics()[curve_key][1]
    assert strategy.train_epochs == 1
    assert len(curve) == 1 + strategy.train_epochs  # Avalanche: 3 with train_epochs=2


# Case #4 of test_periodic_eval, with n_iter=2: an evaluation falls between two
# iterations of one mini-batch.
@pytest.mark.filterwarnings("ignore::avalanche_gss.training.SlowPathWarning")
def test_periodic_eval_iteration_mode():
    model = SimpleMLP(input_size=6, hidden_size=10)
    model.classifier = IncrementalClassifier(model.classifier.in_features)
    benchmark = get_fast_benchmark()
    optimizer = SGD(model.parameters(), lr=1e-3)
    criterion = CrossEntropyLoss()
    curve_key = "Top1_Acc_Stream/eval_phase/train_stream/Task000"
    common = dict(model=model, optimizer=optimizer, criterion=criterion, train_mb_size=1,
                  n_iter=2)

    ###################
    # Case #4: Eval in iteration mode
    ###################
    acc = StreamAccuracy()
    strategy = OnlineTemplate(
        **common, eval_every=100, evaluator=EvaluationPlugin(acc), peval_mode="iteration"
    )
    strategy.train(benchmark.train_stream[0])
    curve = strategy.evaluator.get_all_metrics()[curve_key][1]
    assert len(curve) == 5


class EarlyStopP(SupervisedPlugin):
    def after_training_iteration(self, strategy, **kwargs):
        if strategy.clock.train_epoch_iterations == 10:
            strategy.stop_training()


# BaseStrategyTest.test_early_stop, Cumulative -> OnlineTemplate (n_iter=1, as Cumulative's
# one pass, and our default 3): Avalanche's stop_training "signals to stop training at the
# next iteration", so the epoch ends right after the iteration that called it (11).
@pytest.mark.filterwarnings("ignore::avalanche_gss.training.SlowPathWarning")
@pytest.mark.parametrize("n_iter", [1, 3])
def test_early_stop(n_iter):
    model = SimpleMLP(input_size=6, hidden_size=100)
    criterion = CrossEntropyLoss()
    optimizer = SGD(model.parameters(), lr=1)

    strategy = OnlineTemplate(
        model=model,
        optimizer=optimizer,
        criterion=criterion,
        n_iter=n_iter,
        train_mb_size=1,
        device=DEVICE,
        eval_mb_size=512,
        evaluator=None,
        plugins=[EarlyStopP()],
    )
    benchmark = get_fast_benchmark()

    for train_batch_info in benchmark.train_stream:
        strategy.train(train_batch_info)
        assert strategy.clock.train_epoch_iterations == 11
