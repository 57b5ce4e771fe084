"""One run of one method on one task sequence: the unit every table of the paper is made of.

The paper's method names (``"GSS-Greedy"``, ``"Reservoir"``, ...) map to Avalanche
strategies here, in one registry. :func:`run` builds the model, trains it on the
task-free online stream (or, for the task-aware baselines, on task-level experiences),
and measures the final test accuracy of every task with Avalanche's ``EvaluationPlugin``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training import GEM, ICaRL, Naive
from avalanche.training.templates import SupervisedTemplate
from torch import nn

from avalanche_gss.benchmarks import (
    TaskSplit,
    class_incremental_benchmark_for,
    online_benchmark,
    tensor_dataset,
)
from avalanche_gss.models import make_model
from avalanche_gss.plugins import ConstrainedUpdatePlugin
from avalanche_gss.storage import (
    FSSClustBuffer,
    GSSClustBuffer,
    GSSGreedyBuffer,
    GSSIQPBuffer,
    OnlineBuffer,
    RandBuffer,
    ReservoirBuffer,
)
from avalanche_gss.strategies import (
    OnlineRehearsal,
    OnlineTemplate,
    RepeatedBatchMixin,
    quiet_evaluator,
)

__all__ = [
    "BUFFER_METHODS",
    "BASELINES",
    "METHODS",
    "TASK_AWARE",
    "VARIANTS",
    "VARIANT_METHODS",
    "RunSettings",
    "RunResult",
    "make_buffer",
    "BaselinePlan",
    "baseline_plan",
    "resolve_device",
    "run",
    "run_label",
]

logger = logging.getLogger(__name__)


def _greedy(settings: RunSettings) -> OnlineBuffer:
    return GSSGreedyBuffer(
        settings.buffer_size, n=settings.n, variant=settings.variant,  # type: ignore[arg-type]
        seed=settings.seed,
    )


def _iqp(settings: RunSettings) -> OnlineBuffer:
    return GSSIQPBuffer(
        settings.buffer_size, recent_size=settings.recent_size,
        solver=settings.iqp_solver, time_limit=settings.iqp_time_limit,  # type: ignore[arg-type]
        seed=settings.seed,
    )


def _gss_clust(settings: RunSettings) -> OnlineBuffer:
    authors = settings.variant == "authors"
    growth = settings.clust_growth or (1.01 if authors else 2.0)
    return GSSClustBuffer(
        settings.buffer_size, recent_size=settings.recent_size, growth=growth, seed=settings.seed,
    )


def _fss_clust(settings: RunSettings) -> OnlineBuffer:
    authors = settings.variant == "authors"
    features = settings.fss_features or ("logits" if authors else "penultimate")
    squared = authors if settings.fss_squared is None else settings.fss_squared
    return FSSClustBuffer(
        settings.buffer_size, recent_size=settings.recent_size,
        features=features, squared=squared,  # type: ignore[arg-type]
        growth=settings.clust_growth or 2.0, seed=settings.seed,
    )


VARIANTS = ("paper", "authors")
"""``"paper"``: the method as the paper writes it; ``"authors"``: as the authors' code does it."""

VARIANT_METHODS = ("GSS-Greedy", "GSS-Clust", "FSS-Clust")
"""Methods whose authors' code departs from the paper's text (see :class:`RunSettings`)."""


def resolve_device(device: str) -> str:
    """Return the device a run trains on: ``"auto"`` is ``"cuda"`` when CUDA is present.

    :param device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    :raises ValueError: another name, or a CUDA device on a machine without it.
    """
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but this machine has no CUDA "
                             "device; use auto or cpu")
        index = int(device[5:]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
        return device
    raise ValueError(f"unknown device {device!r}; choose auto, cpu, cuda or cuda:N")


BUFFER_METHODS: dict[str, Callable[[RunSettings], OnlineBuffer]] = {
    "Rand": lambda s: RandBuffer(s.buffer_size, seed=s.seed),
    "Reservoir": lambda s: ReservoirBuffer(s.buffer_size, seed=s.seed),
    "GSS-Greedy": _greedy,
    "GSS-IQP": _iqp,
    "GSS-Clust": _gss_clust,
    "FSS-Clust": _fss_clust,
}
"""Task-free buffer policies, trained with the paper's online rehearsal."""

UPDATES = ("rehearsal", "constrained")
"""How a buffer method uses its buffer: replay steps, or GEM-style constraints (appendix C)."""

CONSTRAINED_METHODS = ("GSS-IQP",)
"""Buffer methods that :func:`run` also trains with ``update="constrained"``."""

BASELINES = ("Single", "iid-online", "iid-offline", "GEM", "iCaRL")
"""Baselines run through Avalanche's own strategies."""

TASK_AWARE = ("GEM", "iCaRL")
"""Baselines that are given the task boundaries (task-level experiences)."""


def _methods() -> tuple[str, ...]:
    return tuple(BUFFER_METHODS) + BASELINES


METHODS = _methods()
"""Every method name :func:`run` accepts (the names used in tables, JSON and CLI)."""


@dataclass
class RunSettings:
    """Everything that defines one run (hashable into a cache key by ``asdict``).

    :param method: one of :data:`METHODS`.
    :param buffer_size: replay buffer size ``M`` (GEM: split evenly over the tasks;
        iCaRL: its total memory). Ignored by Single and the i.i.d. baselines.
    :param seed: seeds the model's initialisation, the buffer and the replay draws.
    :param n_iter: iterations per incoming batch (the paper's 1-5; 3 for MNIST).
    :param lr: SGD learning rate (0.05 MNIST, 0.01 CIFAR-10).
    :param batch_size: incoming batch size (10).
    :param replay_batch_size: buffer samples per replay step (10).
    :param model: ``"mlp"`` or ``"resnet18"``.
    :param device: where to train.
    :param n: GSS-Greedy's number of buffer gradients per score.
    :param variant: ``"authors"`` (the authors' code, which gave the paper's published
        numbers; the default, as for the buffers) or ``"paper"`` (the paper's text):
        GSS-Greedy's gate, buffer gradients and candidate draw (see ``GSSGreedyBuffer``);
        GSS-Clust's threshold growth (2, doubling / 1.01); FSS-Clust's features
        (penultimate layer, Euclidean / logits, squared Euclidean).
    :param iid_epochs: epochs of the ``iid-offline`` baseline.
    :param gem_memory_strength: GEM's margin (0.5 in the authors' scripts).
    :param recent_size: recent buffer size ``M_r`` of GSS-IQP, GSS-Clust and FSS-Clust
        (Alg. 1; 100 in the authors' scripts).
    :param iqp_solver: GSS-IQP's ``"fast"`` or ``"exact"`` (SCIP) solver.
    :param iqp_time_limit: the exact solver's time limit per selection, in seconds.
    :param clust_growth: GSS-Clust's and FSS-Clust's threshold factor per merge round;
        ``None``: by ``variant`` (2: the doubling algorithm; the authors' GSS-Clust 1.01).
    :param fss_features: FSS-Clust's ``"penultimate"`` or ``"logits"``; ``None``: by
        ``variant``.
    :param fss_squared: FSS-Clust on squared Euclidean distances; ``None``: by ``variant``.
    :param update: ``"rehearsal"`` (the paper's replay steps) or ``"constrained"``
        (appendix C: each step projected so as not to increase any buffer sample's loss;
        GSS-IQP only).
    :param constraint_margin: the constrained update's GEM ``memory_strength`` (0: the
        plain projection; see ``ConstrainedUpdatePlugin``).
    """

    method: str
    buffer_size: int = 300
    seed: int = 0
    n_iter: int = 3
    lr: float = 0.05
    batch_size: int = 10
    replay_batch_size: int = 10
    model: str = "mlp"
    device: str = "cpu"
    n: int = 10
    variant: str = "authors"
    iid_epochs: int = 5
    gem_memory_strength: float = 0.5
    recent_size: int = 100
    iqp_solver: str = "fast"
    iqp_time_limit: float = 60.0
    clust_growth: float | None = None
    fss_features: str | None = None
    fss_squared: bool | None = None
    update: str = "rehearsal"
    constraint_margin: float = 0.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose from {', '.join(METHODS)}")
        if self.buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {self.buffer_size}")
        if self.n_iter < 1:
            raise ValueError(f"n_iter must be >= 1, got {self.n_iter}")
        if self.batch_size < 1 or self.replay_batch_size < 1:
            raise ValueError("batch sizes must be >= 1")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; choose from {', '.join(VARIANTS)}")
        if self.recent_size < 1:
            raise ValueError(f"recent_size must be >= 1, got {self.recent_size}")
        if self.update not in UPDATES:
            raise ValueError(f"unknown update {self.update!r}; choose from {', '.join(UPDATES)}")
        if self.update == "constrained" and self.method not in CONSTRAINED_METHODS:
            raise ValueError(
                f"update='constrained' is implemented for {', '.join(CONSTRAINED_METHODS)}, "
                f"not {self.method!r}"
            )


@dataclass
class RunResult:
    """Final per-task test accuracy (percent) of one run, and what it cost.

    :param settings: the run's settings.
    :param task_accuracy: final accuracy on each task's test set, in task order.
    :param avg: their unweighted mean (the authors' "Final Accuracy").
    :param train_seconds: wall time of training (evaluation excluded).
    :param extras: method-specific facts (e.g. the buffer's final class counts).
    """

    settings: RunSettings
    task_accuracy: list[float]
    avg: float
    train_seconds: float
    extras: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**asdict(self), "settings": asdict(self.settings)}


def run_label(settings: RunSettings) -> str:
    """Name a run in logs and TensorBoard (e.g. ``"GSS-Clust-authors-M300-seed0"``).

    The method, its variant and update where it has them, the buffer size where it has
    a buffer, and the seed.

    :param settings: the run's settings.
    """
    parts = [settings.method]
    if settings.method in VARIANT_METHODS:
        parts.append(settings.variant)
    if settings.method in CONSTRAINED_METHODS:
        parts.append(settings.update)
    if settings.method in BUFFER_METHODS or settings.method in TASK_AWARE:
        parts.append(f"M{settings.buffer_size}")
    parts.append(f"seed{settings.seed}")
    return "-".join(parts)


def make_buffer(settings: RunSettings) -> OnlineBuffer:
    """Return the storage policy of a buffer method (``Rand``, ``GSS-IQP``, ...).

    :param settings: the run's settings; ``settings.method`` must be in :data:`BUFFER_METHODS`.
    """
    if settings.method not in BUFFER_METHODS:
        raise ValueError(f"{settings.method!r} is not a buffer method")
    return BUFFER_METHODS[settings.method](settings)


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
        return self.model.features(x)  # type: ignore[operator]


def _evaluator(metrics: Sequence[Any] = (), loggers: Sequence[Any] = ()) -> Any:
    return quiet_evaluator(accuracy_metrics(experience=True), *metrics, loggers=loggers)


def _task_accuracies(strategy: SupervisedTemplate, test_stream: Any) -> list[float]:
    """Return each task's final accuracy from Avalanche's per-experience accuracy metric."""
    metrics = strategy.eval(test_stream)
    accs = []
    for k in range(len(test_stream)):
        keys = [key for key in metrics if key.startswith("Top1_Acc_Exp/eval_phase/test_stream")
                and key.endswith(f"Exp{k:03d}")]
        if len(keys) != 1:
            raise RuntimeError(f"no accuracy metric for test experience {k}: {sorted(metrics)}")
        accs.append(100.0 * float(metrics[keys[0]]))
    return accs


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


def baseline_plan(settings: RunSettings, split: TaskSplit, model: nn.Module,
                  optimizer: torch.optim.Optimizer, *, evaluator: Any,
                  plugins: Sequence[Any] = ()) -> BaselinePlan:
    """Build a baseline's strategy (``Single``, ``iid-*``, ``GEM``, ``iCaRL``) and its data.

    :param settings: the run's settings.
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


def run(settings: RunSettings, split: TaskSplit, *, plugins: Sequence[Any] = (),
        metrics: Sequence[Any] = (), loggers: Sequence[Any] = ()) -> RunResult:
    """Train ``settings.method`` on ``split`` and measure each task's final test accuracy.

    Buffer methods learn the task-free online stream (batches of ``batch_size``, no task
    label, no boundary) with the paper's rehearsal, or with ``update="constrained"`` with
    appendix C's constrained update (GSS-IQP); ``Single`` is Avalanche's ``Naive`` on
    the same stream; ``iid-online`` / ``iid-offline`` learn the shuffled stream for one /
    ``iid_epochs`` epochs; ``GEM`` and ``iCaRL`` get task-level experiences (they need the
    boundaries, as in the paper).

    :param settings: what to run.
    :param split: the task sequence (train stream and per-task test sets).
    :param plugins: extra Avalanche plugins for the strategy (e.g. a
        :class:`~avalanche_gss.diagnostics.BufferTrace` for a buffer method).
    :param metrics: extra Avalanche metrics for the strategy's ``EvaluationPlugin`` (e.g.
        :func:`~avalanche_gss.metrics.buffer_metrics`).
    :param loggers: Avalanche loggers for it (e.g. ``TensorboardLogger(dir)``).
    :return: the per-task accuracies and training time.
    """
    s = settings
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(s.seed)
        model = make_model(s.model, split.input_shape, split.num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=s.lr)
    bench = online_benchmark(split, batch_size=s.batch_size)
    extras: dict[str, Any] = {}
    common: dict[str, Any] = {"device": s.device, "evaluator": _evaluator(metrics, loggers)}
    test_stream = bench.test_stream
    strategy: SupervisedTemplate
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(s.seed)
        start = time.perf_counter()
        if s.method in BUFFER_METHODS:
            buffer = make_buffer(s)
            constrained = None
            if s.update == "constrained":
                constrained = ConstrainedUpdatePlugin(buffer, margin=s.constraint_margin)
                strategy = OnlineTemplate(
                    model=model, optimizer=optimizer, n_iter=s.n_iter,
                    train_mb_size=s.batch_size, plugins=[constrained, *plugins], **common,
                )
            else:
                strategy = OnlineRehearsal(
                    model=model, optimizer=optimizer, storage_policy=buffer, n_iter=s.n_iter,
                    train_mb_size=s.batch_size, replay_batch_size=s.replay_batch_size,
                    seed=s.seed, plugins=plugins, **common,
                )
            strategy.train(bench.train_stream)
            _, by = buffer.tensors()
            class_counts = torch.bincount(by.cpu(), minlength=split.num_classes)
            extras["buffer_class_counts"] = class_counts.tolist()
            if split.is_class_disjoint:
                extras["buffer_task_counts"] = [
                    int(class_counts[list(classes)].sum()) for classes in split.task_classes
                ]
            if isinstance(buffer, GSSIQPBuffer) and buffer.last_surrogate is not None:
                extras["last_surrogate"] = buffer.last_surrogate
            if constrained is not None:
                extras["projected_steps"] = constrained.projections
                extras["constrained_steps"] = constrained.steps
            # Steps skipped for a non-finite loss (learning and replay steps), and the
            # iterations they are out of: a run that skipped many has diverged.
            rehearsal = getattr(strategy, "rehearsal", None)
            extras["skipped_steps"] = int(getattr(strategy, "skipped_steps", 0)) + int(
                getattr(rehearsal, "skipped_steps", 0))
            extras["train_iterations"] = int(strategy.clock.train_iterations)
        else:
            plan = baseline_plan(s, split, model, optimizer, evaluator=common["evaluator"],
                                 plugins=plugins)
            strategy, test_stream = plan.strategy, plan.test_stream
            for call in plan.train_calls:
                strategy.train(call, eval_streams=[])
        seconds = time.perf_counter() - start
        accs = _task_accuracies(strategy, test_stream)
    logger.info("%s: avg %.2f in %.1fs", run_label(s), sum(accs) / len(accs), seconds)
    return RunResult(s, accs, sum(accs) / len(accs), seconds, extras)
