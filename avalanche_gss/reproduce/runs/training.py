"""One run of one method on one task sequence: the unit every table of the paper is made of.

The paper's method names (``"GSS-Greedy"``, ``"Reservoir"``, ...) map to Avalanche
strategies here, in one registry. :func:`run` builds the model, trains it on the
task-free online stream (or, for the task-aware baselines, on task-level experiences),
and measures the final test accuracy of every task with Avalanche's ``EvaluationPlugin``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TypedDict, cast

import torch
from avalanche.benchmarks import CLStream
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metric_definitions import PluginMetric
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.logging import BaseLogger
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.templates import SupervisedTemplate
from torch import nn

from avalanche_gss import methods
from avalanche_gss.buffers import VARIANTS, OnlineBuffer
from avalanche_gss.methods.baselines import BASELINES, TASK_AWARE, baseline_plan
from avalanche_gss.reproduce.json_types import JsonObject
from avalanche_gss.reproduce.runs.seeding import (
    resolve_device,
    seeded_model_and_optimizer,
    seeded_rng,
)
from avalanche_gss.reproduce.runs.settings import (
    BUFFER_METHODS,
    CONSTRAINED_METHODS,
    METHODS,
    UPDATES,
    VARIANT_METHODS,
    RunSettings,
    SettingsRecord,
    default_retrieval,
    make_settings,
    settings_dict,
)
from avalanche_gss.streams import TaskSplit, online_benchmark
from avalanche_gss.training import (
    AsymmetricCrossEntropy,
    LogitAdjustedLoss,
    MIRRetrieval,
    MKDPlugin,
    quiet_evaluator,
)
from avalanche_gss.training.retrieval import RETRIEVALS
from avalanche_gss.training.step_feed import feed_problem

__all__ = ["BUFFER_METHODS", "BASELINES", "CONSTRAINED_METHODS", "METHODS", "RETRIEVALS",
           "UPDATES", "default_retrieval", "TASK_AWARE", "VARIANTS", "VARIANT_METHODS",
           "RunSettings", "RunRecord", "RunResult", "StrategyKeywords",
           "build_strategy", "make_buffer", "make_settings", "resolve_device", "run", "run_label",
           "settings_dict", "training_problem"]

logger = logging.getLogger(__name__)

@dataclass
class RunResult:
    """Final per-task test accuracy (percent) of one run, and what it cost.

    :param settings: the run's settings.
    :param task_accuracy: final accuracy on each task's test set, in task order.
    :param avg: their unweighted mean (the authors' "Final Accuracy").
    :param train_seconds: wall time of training (evaluation excluded).
    :param extras: method-specific facts (e.g. the buffer's final class counts), as JSON:
        each method reports its own.
    """

    settings: RunSettings
    task_accuracy: list[float]
    avg: float
    train_seconds: float
    extras: JsonObject = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        """JSON-ready form (:class:`RunRecord`): ``settings`` as :func:`settings_dict` has them."""
        # A SettingsRecord holds JSON values only; mypy sees no TypedDict as a JSON object.
        settings = cast(JsonObject, settings_dict(self.settings))
        return {**asdict(self), "settings": settings}

    @property
    def skipped_steps(self) -> int:
        """Training steps skipped for a non-finite loss: ``extras["skipped_steps"]``, or 0.

        A run that did not count them (a method without a buffer) has 0.

        :raises TypeError: the extras hold something else than a count there.
        """
        value = self.extras.get("skipped_steps", 0)
        if not isinstance(value, int | float):
            raise TypeError(f"extras['skipped_steps'] is not a count: {value!r}")
        return int(value)


class RunRecord(TypedDict):
    """A :class:`RunResult` as :meth:`RunResult.to_dict` writes it (and a cache holds it).

    :param settings: the run's settings (:func:`settings_dict`).
    :param task_accuracy: final accuracy on each task's test set, in task order.
    :param avg: their unweighted mean.
    :param train_seconds: wall time of training.
    :param extras: method-specific facts.
    """

    settings: SettingsRecord
    task_accuracy: list[float]
    avg: float
    train_seconds: float
    extras: JsonObject


def run_label(settings: RunSettings) -> str:
    """Name a run in logs and TensorBoard (e.g. ``"GSS-Clust-authors-M300-seed0"``).

    The method, its variant and update where it has them, its retrieval when it is not
    the method's own (``"Reservoir-mir-M300-seed0"``; :func:`default_retrieval`), the
    logit adjustment's ``tau`` where there is one (``"CBRS-other-classes-la1-M300-seed0"``),
    a criterion other than the cross-entropy (``ace``), ``joint``, MKD's weight
    (``mkd8``), a replay batch other than 10 (``replay64``), the buffer size where it has a
    buffer, and the seed.

    :param settings: the run's settings.
    """
    parts = [settings.method]
    if settings.method in VARIANT_METHODS:
        options = {**methods.get(settings.method).defaults(), **settings.options}
        parts.append(str(options["variant"]))
    if settings.method in CONSTRAINED_METHODS:
        parts.append(settings.update)
    if settings.retrieval != default_retrieval(settings.method, settings.update):
        parts.append(str(settings.retrieval))
    if settings.logit_adjustment:
        parts.append(f"la{settings.logit_adjustment:g}")
    if settings.criterion != "cross-entropy":
        parts.append(settings.criterion)
    if settings.joint:
        parts.append("joint")
    if settings.mkd_weight:
        parts.append(f"mkd{settings.mkd_weight:g}")
    if settings.replay_batch_size != RunSettings.replay_batch_size:
        parts.append(f"replay{settings.replay_batch_size}")
    if settings.method in BUFFER_METHODS or settings.method in TASK_AWARE:
        parts.append(f"M{settings.buffer_size}")
    parts.append(f"seed{settings.seed}")
    return "-".join(parts)


def make_buffer(settings: RunSettings) -> OnlineBuffer:
    """Return the storage policy of a buffer method (``Rand``, ``GSS-IQP``, ...).

    :param settings: the run's settings; ``settings.method`` must be in :data:`BUFFER_METHODS`.
    """
    method = methods.get(settings.method)
    own = method.buffer_defaults()  # the strategy's own options (replay_loss...) stay out
    options = {k: v for k, v in settings.options.items() if k in own}
    return method.buffer(settings.buffer_size, seed=settings.seed, **options)


def training_problem(settings: RunSettings, model: nn.Module) -> str | None:
    """What keeps :func:`run` of ``settings`` from training ``model``, known before it starts.

    A buffer that reads its gradients off the training step (``wants_step_gram``: CB-GSS
    with ``score_from="step"``) needs a model whose steps can be recorded, in train mode:
    every trainable layer with a closed form and no BatchNorm in train mode (a ResNet's
    BatchNorm is, so a ResNet cannot;
    :func:`~avalanche_gss.training.step_feed.feed_problem`).

    :param settings: the run's settings.
    :param model: the network it would train, as :func:`run` builds it for
        ``settings.model`` (asked in train mode; its modes are restored).
    :return: one line naming the method and the layer, or ``None`` (also for a method
        without a buffer).
    """
    if settings.method not in BUFFER_METHODS:
        return None
    return feed_problem(make_buffer(settings), model)


class _StrategyKeywords(TypedDict):
    model: nn.Module
    optimizer: torch.optim.Optimizer
    n_iter: int
    train_mb_size: int
    device: str
    evaluator: EvaluationPlugin | None
    plugins: list[SupervisedPlugin]
    mem_size: int
    seed: int


class StrategyKeywords(_StrategyKeywords, total=False):
    """What :func:`build_strategy` gives every buffer method's strategy, beside its options.

    :param model: the network.
    :param optimizer: its optimizer.
    :param n_iter: iterations per batch.
    :param train_mb_size: the stream's batch size.
    :param device: where it trains.
    :param evaluator: the strategy's ``EvaluationPlugin``.
    :param plugins: extra plugins.
    :param mem_size: the buffer size.
    :param seed: the run's seed.
    :param criterion: the loss, where it is not the strategy's own (logit adjustment,
        ER-ACE's).
    """

    criterion: nn.Module


def build_strategy(settings: RunSettings, model: nn.Module, optimizer: torch.optim.Optimizer,
                   *, evaluator: EvaluationPlugin | None = None,
                   plugins: Sequence[SupervisedPlugin] = ()) -> SupervisedTemplate:
    """The ready strategy of a buffer method, as :func:`run` trains it.

    The method's strategy from the registry (its constrained one with
    ``update="constrained"``), given the run's options as its buffer's, its loss
    (:class:`~avalanche_gss.training.LogitAdjustedLoss`,
    :class:`~avalanche_gss.training.AsymmetricCrossEntropy`), ``joint`` and, with
    ``mkd_weight`` above 0, an :class:`~avalanche_gss.training.MKDPlugin` after ``plugins``.

    :param settings: the run's settings; ``settings.method`` must be in :data:`BUFFER_METHODS`.
    :param model: the network.
    :param optimizer: its optimizer.
    :param evaluator: the strategy's ``EvaluationPlugin`` (an empty one by default).
    :param plugins: extra plugins.
    """
    s = settings
    method = methods.get(s.method)
    common = StrategyKeywords(
        model=model, optimizer=optimizer, n_iter=s.n_iter, train_mb_size=s.batch_size,
        device=s.device, evaluator=evaluator, plugins=list(plugins), mem_size=s.buffer_size,
        seed=s.seed)
    if s.update == "constrained":
        assert method.constrained is not None  # RunSettings checked it
        strategy: SupervisedTemplate = method.constrained(margin=s.constraint_margin, **common,
                                                          **s.options)
        return strategy
    retrieval = MIRRetrieval(s.mir_candidates) if s.retrieval == "mir" else s.retrieval
    if s.logit_adjustment:
        common["criterion"] = LogitAdjustedLoss(s.logit_adjustment, s.prior_window)
    if s.criterion == "ace":
        common["criterion"] = AsymmetricCrossEntropy()
    if s.mkd_weight:
        common["plugins"].append(MKDPlugin(s.mkd_momentum, s.mkd_temperature, s.mkd_weight))
    joint = {"joint": True} if s.joint else {}  # a strategy of one's own need not take it
    strategy = method.strategy(replay_batch_size=s.replay_batch_size, retrieval=retrieval,
                               **joint, **common, **s.options)
    return strategy


def _evaluator(metrics: Sequence[PluginMetric] = (),
               loggers: Sequence[BaseLogger] = ()) -> EvaluationPlugin:
    return quiet_evaluator(accuracy_metrics(experience=True), *metrics, loggers=loggers)


def _task_accuracies(strategy: SupervisedTemplate, test_stream: CLStream) -> list[float]:
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


def _buffer_extras(strategy: SupervisedTemplate, split: TaskSplit) -> JsonObject:
    """What a buffer method's run reports beyond accuracy (class counts, skipped steps)."""
    buffer = strategy.storage_policy
    extras: JsonObject = {}
    # A buffer may end empty: one whose samples wait in a recent buffer until it fills
    # (GSS-IQP, the clusterings, GCR) stores nothing from a shorter stream.
    by = buffer.tensors()[1].cpu() if len(buffer) else torch.zeros(0, dtype=torch.long)
    class_counts = torch.bincount(by, minlength=split.num_classes)
    extras["buffer_class_counts"] = class_counts.tolist()
    if split.is_class_disjoint:
        extras["buffer_task_counts"] = [
            int(class_counts[list(classes)].sum()) for classes in split.task_classes
        ]
    extras.update(buffer.report())
    rejected = int(getattr(buffer, "n_rejected", 0))
    if rejected and "warnings" not in extras:  # else the buffer's report said why
        extras["warnings"] = [f"{type(buffer).__name__} refused {rejected} sample(s) with "
                              f"a non-finite input or score and holds {len(buffer)} of "
                              f"{buffer.max_size}"]
    constrained = getattr(strategy, "constrained", None)
    if constrained is not None:
        extras["projected_steps"] = constrained.projections
        extras["constrained_steps"] = constrained.steps
    # Steps skipped for a non-finite loss (learning and replay steps), and the
    # iterations they are out of: a run that skipped many has diverged.
    rehearsal = getattr(strategy, "rehearsal", None)
    extras["skipped_steps"] = int(getattr(strategy, "skipped_steps", 0)) + int(
        getattr(rehearsal, "skipped_steps", 0))
    extras["train_iterations"] = int(strategy.clock.train_iterations)
    return extras


def run(settings: RunSettings, split: TaskSplit, *, plugins: Sequence[SupervisedPlugin] = (),
        metrics: Sequence[PluginMetric] = (), loggers: Sequence[BaseLogger] = (),
        label: str | None = None) -> RunResult:
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
    :param label: the run's name in its log line (``None``: :func:`run_label`); an
        experiment names a run by what tells it from its others (its stream, its row).
    :return: the per-task accuracies and training time.
    """
    s = settings
    model, optimizer = seeded_model_and_optimizer(s, split)
    bench = online_benchmark(split, batch_size=s.batch_size)
    evaluator = _evaluator(metrics, loggers)
    test_stream = bench.test_stream
    extras: JsonObject = {}
    strategy: SupervisedTemplate
    with seeded_rng(s.seed):
        start = time.perf_counter()
        if s.method in BUFFER_METHODS:
            strategy = build_strategy(s, model, optimizer, evaluator=evaluator, plugins=plugins)
            strategy.train(bench.train_stream)
            extras = _buffer_extras(strategy, split)
        else:
            plan = baseline_plan(s, split, model, optimizer, evaluator=evaluator,
                                 plugins=plugins)
            strategy, test_stream = plan.strategy, plan.test_stream
            for call in plan.train_calls:
                strategy.train(call, eval_streams=[])
        seconds = time.perf_counter() - start
        accs = _task_accuracies(strategy, test_stream)
    logger.info("%s: avg %.2f in %.1fs", label or run_label(s), sum(accs) / len(accs), seconds)
    return RunResult(s, accs, sum(accs) / len(accs), seconds, extras)
