"""Avalanche 0.6.0's ``tests/training/test_plugins.py`` with avalanche-gss.

Adapted from Avalanche (https://github.com/ContinualAI/avalanche, tag v0.6.0, MIT License,
Copyright (c) 2020 ContinualAI): ``PluginTests.test_callback_reachability``, Avalanche's
``Naive`` replaced by our ``OnlineTemplate`` (it fires the training callbacks through its
own triggers, skipping the plugins that do not act on an event) and by ``OnlineRehearsal``
with each of our buffers (the rehearsal plugin rides along the mock plugin); its
``MockPlugin``, ``_PlainMLP`` and ``create_benchmark`` are copied as they are.

Not adapted:

* ``test_scheduler_plugin``, ``test_scheduler_reduce_on_plateau_plugin`` (and its
  ``_with_val_stream`` variant): their expected learning-rate tables follow Avalanche's
  ``Naive`` over several epochs per experience; ``OnlineTemplate`` learns an experience as
  one epoch, so the tables do not apply; no storage policy in them.
* ``EvaluationPluginTest`` and ``EarlyStoppingPluginTest``: they drive Avalanche's plugins
  with mock strategies; there is no template or storage policy to swap in.
"""

import sys

import pytest
import torch
from avalanche.benchmarks import nc_benchmark
from avalanche.logging import TextLogger
from avalanche.models import BaseModel
from avalanche.training.plugins import SupervisedPlugin
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn import CrossEntropyLoss
from torch.optim import SGD
from torch.utils.data import TensorDataset

from avalanche_gss import OnlineRehearsal, OnlineTemplate

from .unit_tests_utils import BUFFERS


class MockPlugin(SupervisedPlugin):
    def __init__(self):
        super().__init__()
        self.count = 0
        self.activated = [False for _ in range(22)]

    def before_training_exp(self, strategy, **kwargs):
        self.activated[0] = True

    def after_train_dataset_adaptation(self, strategy, **kwargs):
        self.activated[1] = True

    def before_training_epoch(self, strategy, **kwargs):
        self.activated[2] = True

    def before_training_iteration(self, strategy, **kwargs):
        self.activated[3] = True

    def before_forward(self, strategy, **kwargs):
        self.activated[4] = True

    def after_forward(self, strategy, **kwargs):
        self.activated[5] = True

    def before_backward(self, strategy, **kwargs):
        self.activated[6] = True

    def after_backward(self, strategy, **kwargs):
        self.activated[7] = True

    def after_training_iteration(self, strategy, **kwargs):
        self.activated[8] = True

    def before_update(self, strategy, **kwargs):
        self.activated[9] = True

    def after_update(self, strategy, **kwargs):
        self.activated[10] = True

    def after_training_epoch(self, strategy, **kwargs):
        self.activated[11] = True

    def after_training_exp(self, strategy, **kwargs):
        self.activated[12] = True

    def before_eval(self, strategy, **kwargs):
        self.activated[13] = True

    def after_eval_dataset_adaptation(self, strategy, **kwargs):
        self.activated[14] = True

    def before_eval_exp(self, strategy, **kwargs):
        self.activated[15] = True

    def after_eval_exp(self, strategy, **kwargs):
        self.activated[16] = True

    def after_eval(self, strategy, **kwargs):
        self.activated[17] = True

    def before_eval_iteration(self, strategy, **kwargs):
        self.activated[18] = True

    def before_eval_forward(self, strategy, **kwargs):
        self.activated[19] = True

    def after_eval_forward(self, strategy, **kwargs):
        self.activated[20] = True

    def after_eval_iteration(self, strategy, **kwargs):
        self.activated[21] = True


@pytest.mark.filterwarnings("ignore::avalanche_gss.training.SlowPathWarning")
@pytest.mark.parametrize("name", ["naive", *BUFFERS])
def test_callback_reachability(name):
    # Check that all the callbacks are called during
    # training and test loops.
    model = _PlainMLP(input_size=6, hidden_size=10)
    optimizer = SGD(model.parameters(), lr=1e-3)
    criterion = CrossEntropyLoss()
    benchmark = create_benchmark()

    plug = MockPlugin()
    kwargs = dict(
        model=model,
        optimizer=optimizer,
        criterion=criterion,
        train_mb_size=100,
        eval_mb_size=100,
        device="cpu",
        plugins=[plug],
    )
    if name == "naive":
        strategy = OnlineTemplate(**kwargs)
    else:
        strategy = OnlineRehearsal(storage_policy=BUFFERS[name](10), **kwargs)
    strategy.evaluator.loggers = [TextLogger(sys.stdout)]
    strategy.train(benchmark.train_stream[0], num_workers=0)
    strategy.eval([benchmark.test_stream[0]], num_workers=0)
    assert all(plug.activated)


def create_benchmark(task_labels=False, seed=None, n_samples_per_class=20):
    dataset = make_classification(
        n_samples=10 * n_samples_per_class,
        n_classes=10,
        n_features=6,
        n_informative=6,
        n_redundant=0,
        random_state=seed,
    )

    X = torch.from_numpy(dataset[0]).float()
    y = torch.from_numpy(dataset[1]).long()

    train_X, test_X, train_y, test_y = train_test_split(
        X, y, train_size=0.6, shuffle=True, stratify=y, random_state=seed
    )

    train_dataset = TensorDataset(train_X, train_y)
    test_dataset = TensorDataset(test_X, test_y)
    return nc_benchmark(
        train_dataset,
        test_dataset,
        5,
        task_labels=task_labels,
        fixed_class_order=list(range(10)),
    )


class _PlainMLP(nn.Module, BaseModel):
    """
    An internal MLP implementation without Dropout.

    Needed to reproduce tests for the ReduceLROnPlateau scheduler
    """

    def __init__(
        self,
        num_classes=10,
        input_size=28 * 28,
        hidden_size=512,
        hidden_layers=1,
    ):
        super().__init__()

        layers = nn.Sequential(*(nn.Linear(input_size, hidden_size), nn.ReLU(inplace=True)))
        for layer_idx in range(hidden_layers - 1):
            layers.add_module(
                f"fc{layer_idx + 1}",
                nn.Sequential(
                    *(
                        nn.Linear(hidden_size, hidden_size),
                        nn.ReLU(inplace=True),
                    )
                ),
            )

        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(hidden_size, num_classes)
        self._input_size = input_size

    def forward(self, x):
        x = x.contiguous()
        x = x.view(x.size(0), self._input_size)
        x = self.features(x)
        x = self.classifier(x)
        return x

    def get_features(self, x):
        x = x.contiguous()
        x = x.view(x.size(0), self._input_size)
        x = self.features(x)
        return x
