"""Avalanche 0.6.0's ``tests/training/test_online_strategies.py`` with avalanche-gss.

Adapted from Avalanche (https://github.com/ContinualAI/avalanche, tag v0.6.0, MIT License,
Copyright (c) 2020 ContinualAI): ``StrategyTest.test_naive``, Avalanche's ``OnlineNaive``
replaced by our ``OnlineTemplate`` (naive: no replay) and by ``OnlineRehearsal`` with each
of our buffers (``mem_size = 20``), on the same ``OnlineCLScenario``, with and without
task boundaries. Its arguments are kept (``train_mb_size=1``, ``eval_mb_size=50``,
``default_evaluator``, a ``TextLogger``); ``n_iter`` is left at our default (3).

Changed for speed: ``get_fast_benchmark(n_samples_per_class=10)`` instead of 100
(12 training samples per experience instead of 120), since the test evaluates the whole
test stream after every 10-sample online experience and runs here 8 times.

Not adapted: the ``assertWarns(PositionalArgumentsDeprecatedWarning)`` around a
positional ``OnlineNaive(model, optimizer, ...)``: it checks Avalanche's deprecation path
for positional arguments; our templates take keyword arguments only (by design, a
``TypeError`` otherwise). The strategy is built with keywords, as in the test's second half.
"""

import sys

import pytest
from avalanche.benchmarks.scenarios.online import OnlineCLScenario
from avalanche.logging import TextLogger
from avalanche.models import SimpleMLP
from avalanche.training.plugins.evaluation import default_evaluator
from torch.nn import CrossEntropyLoss
from torch.optim import SGD

from avalanche_gss import OnlineRehearsal, OnlineTemplate

from .unit_tests_utils import BUFFERS, get_fast_benchmark

MEM_SIZE = 20
DEVICE = "cpu"


def load_benchmark(use_task_labels=False):
    return get_fast_benchmark(use_task_labels=use_task_labels, n_samples_per_class=10)


def get_model(fast_test=False):
    return SimpleMLP(input_size=6, hidden_size=10)


def init_sit():
    model = get_model(fast_test=True)
    optimizer = SGD(model.parameters(), lr=1e-3)
    criterion = CrossEntropyLoss()
    benchmark = load_benchmark(use_task_labels=False)
    benchmark_streams = benchmark.streams.values()
    ocl_benchmark = OnlineCLScenario(benchmark_streams)
    return model, optimizer, criterion, ocl_benchmark


def make_strategy(name, model, optimizer, criterion):
    """Avalanche's ``OnlineNaive(...)``: our template, or our rehearsal with a buffer."""
    kwargs = dict(
        model=model,
        optimizer=optimizer,
        criterion=criterion,
        train_mb_size=1,
        device=DEVICE,
        eval_mb_size=50,
        evaluator=default_evaluator,
    )
    if name == "naive":
        return OnlineTemplate(**kwargs)
    return OnlineRehearsal(storage_policy=BUFFERS[name](MEM_SIZE), **kwargs)


def run_strategy_boundaries(benchmark, cl_strategy):
    cl_strategy.evaluator.loggers = [TextLogger(sys.stdout)]
    results = []
    for train_batch_info in benchmark.train_online_stream:
        cl_strategy.train(train_batch_info, num_workers=0)
        results.append(cl_strategy.eval(benchmark.original_test_stream[:]))
    return results


def run_strategy_no_boundaries(benchmark, cl_strategy):
    cl_strategy.evaluator.loggers = [TextLogger(sys.stdout)]
    results = []

    cl_strategy.train(benchmark.train_online_stream, num_workers=0)

    assert cl_strategy.clock.train_exp_counter > 0

    results.append(cl_strategy.eval(benchmark.original_test_stream[:]))
    return results


def _check_buffer(strategy):
    # Not in Avalanche's test: the buffer saw the stream and stays within its size.
    if isinstance(strategy, OnlineRehearsal):
        assert 0 < len(strategy.storage_policy) <= MEM_SIZE


@pytest.mark.filterwarnings("ignore::avalanche_gss.training.SlowPathWarning")
@pytest.mark.parametrize("name", ["naive", *BUFFERS])
def test_naive(name):
    benchmark = load_benchmark(use_task_labels=False)
    benchmark_streams = benchmark.streams.values()

    # With task boundaries
    model, optimizer, criterion, _ = init_sit()
    strategy = make_strategy(name, model, optimizer, criterion)
    ocl_benchmark = OnlineCLScenario(benchmark_streams, access_task_boundaries=True)
    run_strategy_boundaries(ocl_benchmark, strategy)
    _check_buffer(strategy)

    # Without task boundaries
    model, optimizer, criterion, my_nc_benchmark = init_sit()
    strategy = make_strategy(name, model, optimizer, criterion)
    ocl_benchmark = OnlineCLScenario(benchmark_streams, access_task_boundaries=False)
    run_strategy_no_boundaries(ocl_benchmark, strategy)
    _check_buffer(strategy)
