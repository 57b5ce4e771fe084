"""Avalanche 0.6.0's ``tests/streams/utils/test_dataloaders.py`` with avalanche-gss.

Adapted from Avalanche (https://github.com/ContinualAI/avalanche, tag v0.6.0, MIT License,
Copyright (c) 2021 ContinualAI): the two tests that use ``ReplayPlugin``, its default
storage policy (``ExperienceBalancedBuffer``) replaced by each of our buffers; the scored
ones run on the strategy's model. The file's own ``get_fast_benchmark`` (a task-labelled
``nc_benchmark`` over ``TensorDataset``s) is copied as it is.

Not adapted: ``test_basic`` and ``test_dataloader_with_multiple_workers`` use Avalanche's
data loaders and ``Naive`` without any storage policy.
"""

import pytest
import torch
from avalanche.benchmarks import nc_benchmark
from avalanche.benchmarks.utils.data_loader import ReplayDataLoader, TaskBalancedDataLoader
from avalanche.models import SimpleMLP
from avalanche.training.plugins import ReplayPlugin
from avalanche.training.supervised import Naive
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from torch.nn import CrossEntropyLoss
from torch.optim import SGD
from torch.utils.data import TensorDataset

from .unit_tests_utils import BUFFERS


def get_fast_benchmark():
    n_samples_per_class = 100
    dataset = make_classification(
        n_samples=10 * n_samples_per_class,
        n_classes=10,
        n_features=6,
        n_informative=6,
        n_redundant=0,
    )

    X = torch.from_numpy(dataset[0]).float()
    y = torch.from_numpy(dataset[1]).long()

    train_X, test_X, train_y, test_y = train_test_split(
        X, y, train_size=0.6, shuffle=True, stratify=y
    )

    train_dataset = TensorDataset(train_X, train_y)
    test_dataset = TensorDataset(test_X, test_y)
    my_nc_benchmark = nc_benchmark(train_dataset, test_dataset, 5, task_labels=True)
    return my_nc_benchmark


@pytest.mark.parametrize("name", list(BUFFERS))
def test_dataload_reinit(name):
    benchmark = get_fast_benchmark()
    model = SimpleMLP(input_size=6, hidden_size=10)

    replayPlugin = ReplayPlugin(mem_size=5, storage_policy=BUFFERS[name](5))
    cl_strategy = Naive(
        model=model,
        optimizer=SGD(model.parameters(), lr=0.001, momentum=0.9, weight_decay=0.001),
        criterion=CrossEntropyLoss(),
        train_mb_size=16,
        train_epochs=1,
        eval_mb_size=16,
        plugins=[replayPlugin],
    )
    for step in benchmark.train_stream[:2]:
        cl_strategy.train(step)


@pytest.mark.parametrize("name", list(BUFFERS))
def test_dataload_batch_balancing(name):
    benchmark = get_fast_benchmark()
    batch_size = 32
    replayPlugin = ReplayPlugin(mem_size=20, storage_policy=BUFFERS[name](20))

    model = SimpleMLP(input_size=6, hidden_size=10)
    cl_strategy = Naive(
        model=model,
        optimizer=SGD(model.parameters(), lr=0.001, momentum=0.9, weight_decay=0.001),
        criterion=CrossEntropyLoss(),
        train_mb_size=batch_size,
        train_epochs=1,
        eval_mb_size=100,
        plugins=[replayPlugin],
    )
    for step in benchmark.train_stream:
        adapted_dataset = step.dataset
        if len(replayPlugin.storage_policy.buffer) > 0:
            dataloader = ReplayDataLoader(
                adapted_dataset,
                replayPlugin.storage_policy.buffer,
                oversample_small_tasks=True,
                num_workers=0,
                batch_size=batch_size,
                shuffle=True,
            )
        else:
            dataloader = TaskBalancedDataLoader(adapted_dataset)

        for mini_batch in dataloader:
            mb_task_labels = mini_batch[-1]
            lengths = []
            for task_id in adapted_dataset.targets_task_labels.val_to_idx:
                len_task = (mb_task_labels == task_id).sum()
                lengths.append(len_task)
            if sum(lengths) == batch_size:
                difference = max(lengths) - min(lengths)
                assert difference <= 1
            assert sum(lengths) <= batch_size
        cl_strategy.train(step)
