"""Accuracy curves: test accuracy measured during training, every ``every_samples`` samples.

The paper's Figure 4 plots the test accuracy on disjoint MNIST "evaluated during the
training procedure at an interval of 100 training examples"; iCaRL only at the end of
each task (its nearest-mean classifier needs the class means computed there), the i.i.d.
baselines only at the end. :class:`PeriodicEvalPlugin` does the measuring inside any
Avalanche strategy: it counts the training samples and, at every multiple of
``every_samples``, calls ``strategy.eval`` on the test stream (Avalanche saves and
restores the training state around an eval inside ``train``) and reads each task's
accuracy from the strategy's ``EvaluationPlugin`` (``accuracy_metrics(experience=True)``).
:func:`run_curve` is :func:`~avalanche_gss.reproduce.runs.training.run` with that plugin attached.

Evaluation never changes training: it runs under ``torch.no_grad``, in a forked RNG (so
DataLoader seeds do not shift the run's random draws), and the strategy's mini-batch
state is put back; a run's last point equals what :func:`~avalanche_gss.reproduce.runs.training.run`
reports for the same settings.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TypedDict, cast

import torch
from avalanche.benchmarks import CLStream
from avalanche.core import SupervisedPlugin
from avalanche.evaluation import PluginMetric
from avalanche.evaluation.metric_results import MetricResult, MetricValue
from avalanche.evaluation.metric_utils import get_metric_name
from avalanche.evaluation.metrics.accuracy import Accuracy, ExperienceAccuracy
from avalanche.training.templates import SupervisedTemplate

from avalanche_gss.reproduce.json_types import Json, JsonObject
from avalanche_gss.reproduce.runs.seeding import seeded_model_and_optimizer, seeded_rng
from avalanche_gss.reproduce.runs.training import (
    BUFFER_METHODS,
    RunRecord,
    RunResult,
    RunSettings,
    _evaluator,
    _task_accuracies,
    baseline_plan,
    run,
    run_label,
)
from avalanche_gss.streams import TaskSplit, online_benchmark
from avalanche_gss.training import RepeatedBatchMixin

__all__ = [
    "EvalPoint",
    "PeriodicEvalPlugin",
    "SeenTasksAccuracy",
    "CurveRecord",
    "CurveResult",
    "SCHEDULES",
    "schedule_of",
    "task_end_samples",
    "seen_tasks",
    "mean_curve",
    "run_curve",
]

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class EvalPoint:
    """One measurement: each task's test accuracy after ``samples`` training samples.

    :param samples: training samples seen so far (stream samples, not SGD steps).
    :param task_accuracy: test accuracy of every task, in percent, in task order.
    """

    samples: int
    task_accuracy: list[float]

    @property
    def avg(self) -> float:
        """Mean accuracy over all tasks (the authors' and GEM's curve)."""
        return statistics.fmean(self.task_accuracy)


class PeriodicEvalPlugin(SupervisedPlugin):
    """Evaluate on a test stream every ``every_samples`` training samples.

    How samples are counted depends on the strategy:

    - a :class:`~avalanche_gss.training.RepeatedBatchMixin` strategy
      (:class:`~avalanche_gss.training.OnlineTemplate` and the task-aware GEM and
      iCaRL of :mod:`avalanche_gss.reproduce.runs.training`) learns each mini-batch
      ``n_iter`` times:
      its samples count after the mini-batch's last iteration (``after_training_iteration``,
      after the plugins before this one, e.g. the replay step), so the points fall inside
      task-level experiences too;
    - any other template counts a whole experience at ``after_training_exp`` (Avalanche's
      ``Naive`` on the online stream, where an experience is one incoming batch), and so
      does every template with ``per_experience``: a point then falls after the plugins'
      ``after_training_exp`` before this one (the buffer saw the batch) and Avalanche's
      clock counted the batch's iterations (``--tensorboard``'s points at the task ends
      share their step with the buffer metrics').

    When the count reaches or passes a multiple of ``every_samples``, or one of
    ``at_samples`` (e.g. the task ends but the last, :func:`task_end_samples`), the plugin
    calls :meth:`record`, which reads the accuracies from the strategy's ``EvaluationPlugin``:
    create the strategy with ``evaluator=quiet_evaluator(accuracy_metrics(experience=True))``
    (training refuses to start otherwise). Harnesses call :meth:`record` themselves for
    points outside that schedule (task ends, the end of training); a second call at the
    same count is free.

    :param test_stream: the stream's test experiences, one per task (e.g.
        ``OnlineBenchmark.test_stream``).
    :param every_samples: samples between two points; ``None``: only explicit
        :meth:`record` calls (iCaRL), and ``at_samples``.
    :param at_samples: sample counts at which to record too (``--tensorboard``: the
        task ends but the last, whose point is the run's final evaluation).
    :param per_experience: count whole experiences, after them, on any template.
    """

    supports_distributed = False

    def __init__(self, test_stream: CLStream, *, every_samples: int | None = 100,
                 at_samples: Sequence[int] = (), per_experience: bool = False) -> None:
        super().__init__()
        if every_samples is not None and (isinstance(every_samples, bool) or every_samples < 1):
            raise ValueError(f"every_samples must be a positive int or None, got {every_samples!r}")
        self.test_stream = test_stream
        self.every_samples = every_samples
        self.at_samples = sorted(at_samples)
        self.per_experience = per_experience
        self.samples = 0
        self.points: list[EvalPoint] = []
        self.eval_seconds = 0.0
        self._iterations = 0

    def before_training(self, strategy: SupervisedTemplate, **kwargs: object) -> None:
        """Check that the strategy's evaluator measures per-experience accuracy."""
        metrics = getattr(strategy.evaluator, "metrics", [])
        if not any(isinstance(m, ExperienceAccuracy) for m in metrics):
            raise ValueError(
                "PeriodicEvalPlugin reads the strategy's per-experience accuracy: create the "
                "strategy with evaluator=quiet_evaluator(accuracy_metrics(experience=True)) "
                "(avalanche_gss.training.quiet_evaluator)"
            )

    def before_training_exp(self, strategy: SupervisedTemplate, **kwargs: object) -> None:
        """Start counting the iterations of a new experience."""
        self._iterations = 0

    def after_training_iteration(self, strategy: SupervisedTemplate, **kwargs: object) -> None:
        """Count a mini-batch after its ``n_iter``-th iteration (repeated-batch strategies)."""
        repeats = _repeats(strategy)
        if repeats is None or self.per_experience:
            return
        self._iterations += 1
        if self._iterations % repeats == 0:
            self._advance(strategy, int(strategy.mb_y.shape[0]))

    def after_training_exp(self, strategy: SupervisedTemplate, **kwargs: object) -> None:
        """Count the whole experience (templates without repeated mini-batches)."""
        if _repeats(strategy) is not None and not self.per_experience:
            return
        assert strategy.experience is not None
        self._advance(strategy, len(strategy.experience.dataset))

    def _advance(self, strategy: SupervisedTemplate, n: int) -> None:
        before = self.samples
        self.samples += n
        every = self.every_samples
        if ((every is not None and self.samples // every > before // every)
                or any(before < at <= self.samples for at in self.at_samples)):
            self.record(strategy)

    def record(self, strategy: SupervisedTemplate, *, samples: int | None = None) -> EvalPoint:
        """Evaluate now and store the point (or return the last one if nothing was learnt since).

        :param strategy: the strategy being trained (or done training).
        :param samples: the stream position of this point, when the caller knows it better
            than the count (iCaRL also trains on its exemplars, which the count would
            include); the count is set to it.
        :return: the point at the current sample count.
        """
        if samples is not None:
            self.samples = samples
        if self.points and self.points[-1].samples == self.samples:
            return self.points[-1]
        saved = {name: getattr(strategy, name, None) for name in ("mbatch", "mb_output", "loss")}
        start = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            accs = _task_accuracies(strategy, self.test_stream)
        for name, value in saved.items():
            setattr(strategy, name, value)
        self.eval_seconds += time.perf_counter() - start
        point = EvalPoint(self.samples, accs)
        self.points.append(point)
        logger.debug("%d samples: avg %.2f %s", self.samples, point.avg, accs)
        return point


class SeenTasksAccuracy(PluginMetric[float]):
    """The mean test accuracy over the tasks seen so far, after each evaluation.

    An Avalanche metric: each ``strategy.eval`` on a stream of one test experience per
    task (in task order) emits ``AverageAccuracy/eval_phase/test_stream``, the mean over
    the first ``seen()`` experiences of their accuracy (a fraction, as
    ``Top1_Acc_Exp``), at ``x = strategy.clock.train_iterations``. After the whole stream
    it is the run's ``avg`` (over every task), divided by 100.

    :param seen: how many tasks the learner has seen now (e.g. :func:`seen_tasks` of a
        :class:`PeriodicEvalPlugin`'s sample count).
    """

    name = "AverageAccuracy"

    def __init__(self, seen: Callable[[], int]) -> None:
        super().__init__()
        self.seen = seen
        self._accuracy: dict[int, Accuracy] = {}

    def __str__(self) -> str:
        return self.name

    def reset(self) -> None:
        """Forget the accuracies of the last evaluation."""
        self._accuracy = {}

    def result(self) -> float | None:
        """The mean accuracy over the seen tasks' experiences evaluated (``None``: none)."""
        seen = self.seen()
        accs = [acc.result() for exp, acc in sorted(self._accuracy.items()) if exp < seen]
        return statistics.fmean(accs) if accs else None

    def before_eval(self, strategy: SupervisedTemplate) -> None:
        """Start a new evaluation."""
        self.reset()

    def after_eval_iteration(self, strategy: SupervisedTemplate) -> None:
        """Count the mini-batch's correct predictions under its experience."""
        assert strategy.experience is not None
        exp = strategy.experience.current_experience
        self._accuracy.setdefault(exp, Accuracy()).update(strategy.mb_output, strategy.mb_y)

    def after_eval(self, strategy: SupervisedTemplate) -> MetricResult:
        """Emit the mean over the seen tasks."""
        value = self.result()
        if value is None:
            return None
        name = get_metric_name(self, strategy, add_experience=False, add_task=False)
        return [MetricValue(self, name, value, strategy.clock.train_iterations)]


def _repeats(strategy: SupervisedTemplate) -> int | None:
    """Iterations per mini-batch of a repeated-batch strategy; ``None`` for other templates."""
    if isinstance(strategy, RepeatedBatchMixin):
        return max(1, int(strategy.n_iter))
    return None


SCHEDULES = ("periodic", "task_ends", "end")
"""When a curve has points: every ``every_samples`` samples (and at the end), at the end
of each task (iCaRL), or only at the end of training (the i.i.d. baselines)."""


def schedule_of(method: str) -> str:
    """The evaluation schedule of a method in Figure 4 (one of :data:`SCHEDULES`).

    :param method: a method name of :data:`~avalanche_gss.reproduce.runs.training.METHODS`.
    """
    if method == "iCaRL":
        return "task_ends"
    if method in ("iid-online", "iid-offline"):
        return "end"
    return "periodic"


def task_end_samples(split: TaskSplit) -> list[int]:
    """Cumulative training samples at the end of each task (the stream's task boundaries).

    :param split: the task sequence.
    """
    ends, total = [], 0
    for _, y in split.train:
        total += int(y.shape[0])
        ends.append(total)
    return ends


def seen_tasks(samples: int, task_ends: Sequence[int]) -> int:
    """How many tasks had at least one sample learnt after ``samples`` stream samples.

    :param samples: stream samples seen.
    :param task_ends: cumulative samples at each task's end (:func:`task_end_samples`).
    """
    starts = [0, *task_ends[:-1]]
    return max(1, sum(1 for s in starts if s < samples))


@dataclass
class CurveResult:
    """The test accuracy of one run along its stream, and its final result.

    :param result: the final per-task accuracies (the last point), as
        :func:`~avalanche_gss.reproduce.runs.training.run` reports them.
    :param samples: training samples seen at each point.
    :param task_accuracy: per point, every task's accuracy (percent).
    :param schedule: one of :data:`SCHEDULES`.
    :param task_ends: cumulative samples at each task's end.
    :param eval_seconds: time spent evaluating (not in ``result.train_seconds``).
    """

    result: RunResult
    samples: list[int]
    task_accuracy: list[list[float]]
    schedule: str
    task_ends: list[int]
    eval_seconds: float = 0.0

    @property
    def avg(self) -> list[float]:
        """Per point, the mean accuracy over all tasks (the paper's curve).

        The authors' ``main.py``, like GEM's, evaluates every task at every point.
        """
        return [statistics.fmean(a) for a in self.task_accuracy]

    @property
    def seen_avg(self) -> list[float]:
        """Per point, the mean accuracy over the tasks seen so far."""
        return [statistics.fmean(a[: seen_tasks(s, self.task_ends)])
                for s, a in zip(self.samples, self.task_accuracy, strict=True)]

    def to_dict(self) -> JsonObject:
        """JSON-ready form (:class:`CurveRecord`; :meth:`from_dict` reads it back)."""
        return {**asdict(self), "result": self.result.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Json]) -> CurveResult:
        """Rebuild a result from :meth:`to_dict`'s output (e.g. a cached sweep result).

        :param data: the dict, as :meth:`to_dict` wrote it (:class:`CurveRecord`).
        """
        record = cast(CurveRecord, data)
        res = record["result"]
        result = RunResult(settings=RunSettings(**res["settings"]),
                           task_accuracy=res["task_accuracy"], avg=res["avg"],
                           train_seconds=res["train_seconds"], extras=res["extras"])
        return cls(result=result, samples=record["samples"],
                   task_accuracy=record["task_accuracy"], schedule=record["schedule"],
                   task_ends=record["task_ends"], eval_seconds=record["eval_seconds"])


class CurveRecord(TypedDict):
    """A :class:`CurveResult` as :meth:`CurveResult.to_dict` writes it.

    :param result: the final result (:class:`~avalanche_gss.reproduce.runs.training.RunRecord`).
    :param samples: training samples seen at each point.
    :param task_accuracy: per point, every task's accuracy (percent).
    :param schedule: one of :data:`SCHEDULES`.
    :param task_ends: cumulative samples at each task's end.
    :param eval_seconds: time spent evaluating.
    """

    result: RunRecord
    samples: list[int]
    task_accuracy: list[list[float]]
    schedule: str
    task_ends: list[int]
    eval_seconds: float


def mean_curve(curves: Sequence[CurveResult], *, seen: bool = False
               ) -> tuple[list[int], list[float], list[float]]:
    """Average curves of several seeds point by point.

    :param curves: runs with the same evaluation points (same stream sizes and schedule).
    :param seen: average over the tasks seen so far instead of over all tasks.
    :return: ``(samples, mean, std)``; std is the population std over the curves (0 for one).
    :raises ValueError: if the curves' sample counts differ.
    """
    if not curves:
        raise ValueError("need at least one curve")
    samples = curves[0].samples
    if any(c.samples != samples for c in curves):
        raise ValueError("curves must share their evaluation points")
    values = [c.seen_avg if seen else c.avg for c in curves]
    columns = list(zip(*values, strict=True))
    mean = [statistics.fmean(col) for col in columns]
    std = [statistics.pstdev(col) if len(col) > 1 else 0.0 for col in columns]
    return list(samples), mean, std


def run_curve(settings: RunSettings, split: TaskSplit, *, every_samples: int = 100,
              label: str | None = None) -> CurveResult:
    """Train as :func:`~avalanche_gss.reproduce.runs.training.run` does, measuring accuracy.

    The test accuracy along the stream is the paper's Figure 4.

    Buffer methods and ``Single`` learn the task-free online stream and are evaluated
    every ``every_samples`` samples; ``GEM`` learns task-level experiences and is
    evaluated every ``every_samples`` samples inside them; ``iCaRL`` (nearest-mean
    classifier) only at each task's end; the i.i.d. baselines only at the end. Every
    curve also has a point at the end of training, whose accuracies are the returned
    ``result``.

    :param settings: what to run.
    :param split: the task sequence.
    :param every_samples: training samples between two points (the paper: 100).
    :param label: the run's name in its log lines (``None``:
        :func:`~avalanche_gss.reproduce.runs.training.run_label`).
    :return: the curve and the final result.
    """
    s = settings
    ends = task_end_samples(split)
    schedule = schedule_of(s.method)
    if schedule == "end":
        final = run(s, split, label=label)
        return CurveResult(final, [ends[-1]], [list(final.task_accuracy)], schedule, ends)
    if s.method in BUFFER_METHODS:
        probe = PeriodicEvalPlugin(online_benchmark(split, batch_size=s.batch_size).test_stream,
                                   every_samples=every_samples)
        final = run(s, split, plugins=[probe], label=label)
        if not probe.points or probe.points[-1].samples != probe.samples:
            probe.points.append(EvalPoint(probe.samples, list(final.task_accuracy)))
        final = replace(final, train_seconds=final.train_seconds - probe.eval_seconds)
    else:
        final, probe = _run_baseline_curve(s, split, every_samples, ends)
    logger.info("%s: %d points, final avg %.2f (train %.1fs, eval %.1fs)",
                label or run_label(s), len(probe.points), final.avg,
                final.train_seconds, probe.eval_seconds)
    return CurveResult(final, [p.samples for p in probe.points],
                       [list(p.task_accuracy) for p in probe.points], schedule, ends,
                       probe.eval_seconds)


def _run_baseline_curve(s: RunSettings, split: TaskSplit, every_samples: int,
                        ends: list[int]) -> tuple[RunResult, PeriodicEvalPlugin]:
    """Train ``Single``, ``GEM`` or ``iCaRL`` as ``runs.training.run`` does.

    With a :class:`PeriodicEvalPlugin` attached (``run`` takes plugins for the buffer
    methods only).
    """
    model, optimizer = seeded_model_and_optimizer(s, split)
    if s.method not in ("Single", "GEM", "iCaRL"):
        raise ValueError(f"no curve for method {s.method!r}")
    with seeded_rng(s.seed):
        start = time.perf_counter()
        # iCaRL's nearest-mean classifier is only ready at a task's end.
        probe = PeriodicEvalPlugin(None, every_samples=None if s.method == "iCaRL"
                                   else every_samples)
        plan = baseline_plan(s, split, model, optimizer, evaluator=_evaluator(),
                             plugins=[probe])
        probe.test_stream = plan.test_stream
        strategy = plan.strategy
        for call, end in zip(plan.train_calls, ends, strict=False):
            strategy.train(call, eval_streams=[])
            if s.method == "GEM":  # task-level experiences: a point at each task's end
                probe.record(strategy)
            elif s.method == "iCaRL":  # it also learns its exemplars: count stream samples
                probe.record(strategy, samples=end)
        seconds = time.perf_counter() - start - probe.eval_seconds
        accs = list(probe.record(strategy).task_accuracy)
    return RunResult(s, accs, statistics.fmean(accs), seconds, {}), probe
