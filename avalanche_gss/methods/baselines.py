"""The paper's baselines, run through Avalanche's own strategies.

``Single`` (plain fine-tuning on the task-free stream), ``iid-online`` / ``iid-offline``
(the shuffled stream, one / several epochs) and the task-aware ``GEM`` and ``iCaRL``
(given the task boundaries, as in the paper).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.training import GEM, ICaRL, Naive
from avalanche.training.templates import SupervisedTemplate
from torch import nn

from avalanche_gss.methods import BASELINES  # their names, known without torch
from avalanche_gss.streams import (
    TaskSplit,
    class_incremental_benchmark_for,
    online_benchmark,
    tensor_dataset,
)
from avalanche_gss.training import RepeatedBatchMixin

__all__ = ["BASELINES", "TASK_AWARE", "BaselinePlan", "baseline_plan"]

TASK_AWARE = ("GEM", "iCaRL")
"""Baselines that are given the task boundaries (task-level experiences)."""


class _GEM(RepeatedBatchMixin, GEM):
    """Avalanche's GEM with ``n_iter`` iterations per mini-batch."""


class _ICaRL(RepeatedBatchMixin, ICaRL):
    """Avalanche's iCaRL with ``n_iter`` iterations per mini-batch."""


class _Features(nn.Module):
    """A model's ``features`` as a module (iCaRL's feature extractor)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(Callable[[torch.Tensor], torch.Tensor], self.model.features)(x)


def _whole_stream(x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> Any:
    """One shuffled experience holding the whole training stream (i.i.d. baselines)."""
    order = torch.randperm(len(y), generator=generator)
    data = tensor_dataset(x[order], y[order])
    return benchmark_from_datasets(train=[data]).train_stream


@dataclass
class BaselinePlan:
    """A baseline's Avalanche strategy and what it learns, one ``train`` call at a time.

    :param strategy: the strategy (``Naive``, GEM or iCaRL).
    :param train_calls: the argument of each ``strategy.train`` call, in order: the whole
        stream for ``Single`` and the i.i.d. baselines, one task-level experience per call
        for the task-aware ones.
    :param test_stream: the stream its accuracy is measured on (iCaRL's comes from its
        class-incremental scenario).
    """

    strategy: SupervisedTemplate
    train_calls: list[Any]
    test_stream: Any


def baseline_plan(settings: Any, split: TaskSplit, model: nn.Module,
                  optimizer: torch.optim.Optimizer, *, evaluator: Any,
                  plugins: Sequence[Any] = ()) -> BaselinePlan:
    """Build a baseline's strategy (``Single``, ``iid-*``, ``GEM``, ``iCaRL``) and its data.

    :param settings: the run's :class:`~avalanche_gss.reproduce.runs.training.RunSettings`.
    :param split: the task sequence.
    :param model: the network (``features`` + ``classifier`` for iCaRL).
    :param optimizer: its optimizer.
    :param evaluator: the strategy's ``EvaluationPlugin``.
    :param plugins: extra plugins.
    """
    s = settings
    bench = online_benchmark(split, batch_size=s.batch_size)
    common: dict[str, Any] = {"device": s.device, "evaluator": evaluator,
                              "plugins": list(plugins)}
    strategy: SupervisedTemplate
    if s.method == "Single":
        strategy = Naive(model=model, optimizer=optimizer, train_mb_size=s.batch_size,
                         train_epochs=s.n_iter, **common)
        return BaselinePlan(strategy, [bench.train_stream], bench.test_stream)
    if s.method in ("iid-online", "iid-offline"):
        epochs = 1 if s.method == "iid-online" else s.iid_epochs
        strategy = Naive(model=model, optimizer=optimizer, train_mb_size=s.batch_size,
                         train_epochs=epochs, **common)
        x, y = split.stream_tensors()
        stream = _whole_stream(x, y, torch.Generator().manual_seed(s.seed))
        return BaselinePlan(strategy, [stream], bench.test_stream)
    if s.method == "GEM":
        strategy = _GEM(model=model, optimizer=optimizer, criterion=nn.CrossEntropyLoss(),
                        patterns_per_exp=max(1, s.buffer_size // split.n_tasks),
                        memory_strength=s.gem_memory_strength, train_mb_size=s.batch_size,
                        **common)
        strategy.n_iter = s.n_iter
        return BaselinePlan(strategy, list(bench.task_stream), bench.test_stream)
    if s.method == "iCaRL":
        if not split.is_class_disjoint:
            raise ValueError("iCaRL needs a class-incremental (disjoint) task sequence")
        nc = class_incremental_benchmark_for(split)
        strategy = _ICaRL(feature_extractor=_Features(model), classifier=model.classifier,
                          optimizer=optimizer, memory_size=s.buffer_size,
                          buffer_transform=None, fixed_memory=True,
                          train_mb_size=s.batch_size, **common)
        strategy.n_iter = s.n_iter
        return BaselinePlan(strategy, list(nc.train_stream), nc.test_stream)
    raise ValueError(f"{s.method!r} is not a baseline; baselines: {', '.join(BASELINES)}")
