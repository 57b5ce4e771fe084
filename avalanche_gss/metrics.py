r"""Avalanche ``PluginMetric``\ s that watch the replay buffer during an online run.

* :class:`BufferCompositionMetric`: how many stored samples each class (and, given a side
  mapping, each task) holds, and the buffer's fill. The learner never sees task ids; the
  metric reads them from a label -> task map or a per-sample task tensor given at
  construction. :func:`count_by_task` is the per-task count itself, shared with
  :class:`~avalanche_gss.diagnostics.BufferTrace`.
* :class:`BufferSurrogateMetric`: the paper's surrogate (Eq. 5) of the stored samples,
  ``sum_{i,j} cos(g_i, g_j)`` of their loss gradients under the current model: the
  quantity GSS-IQP minimises and GSS-Greedy approximately keeps low.

Online streams have thousands of 10-sample experiences, so both emit every ``every``
training experiences (after the buffer saw the experience), after the experience in which
the buffer's ``n_seen`` reaches each of ``at_samples`` (e.g. the task ends), and once more
at the end of each ``train`` call, as ``MetricValue``\ s that any Avalanche logger accepts
(scalars, at ``x = strategy.clock.train_iterations`` like Avalanche's own training
metrics). Use them through :func:`buffer_metrics` in an ``EvaluationPlugin``.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from avalanche.evaluation import PluginMetric
from avalanche.evaluation.metric_results import MetricResult, MetricValue
from avalanche.evaluation.metric_utils import get_metric_name
from torch import Tensor, nn

from avalanche_gss.buffers import OnlineBuffer, task_labels_for
from avalanche_gss.gradients import LossFn, preserved_state, sample_cosine
from avalanche_gss.streams.online import experience_tensors

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = [
    "BufferMetric",
    "BufferCompositionMetric",
    "BufferSurrogateMetric",
    "buffer_metrics",
    "class_task_map",
    "count_by_task",
    "find_buffer",
]

_K = TypeVar("_K", bound=Hashable)


def class_task_map(task_classes: Sequence[Iterable[int]]) -> dict[int, int]:
    """Return the label -> task map of a class-disjoint split.

    :param task_classes: per task its classes (``TaskSplit.task_classes``); a class listed
        under several tasks maps to the last of them.
    :return: ``{label: task}``.
    """
    return {int(c): task for task, classes in enumerate(task_classes) for c in classes}


def count_by_task(keys: Iterable[_K], task_of: Mapping[_K, int]) -> dict[int, int]:
    """Count samples per task, mapping each sample's key to its task.

    The per-task buffer composition of :class:`BufferCompositionMetric` and
    :class:`~avalanche_gss.diagnostics.BufferTrace`.

    :param keys: one key per sample: its label (with :func:`class_task_map`) or any other
        key ``task_of`` maps (e.g. a sample fingerprint).
    :param task_of: key -> task; keys it lacks count under task ``-1`` (unknown).
    :return: ``{task: count}``, only non-zero counts.
    """
    return dict(Counter(task_of.get(key, -1) for key in keys))


def find_buffer(strategy: SupervisedTemplate) -> OnlineBuffer:
    """Return the strategy's :class:`OnlineBuffer`: ``strategy.storage_policy`` or a plugin's.

    :param strategy: a strategy holding the buffer itself (``OnlineRehearsal``) or through a
        plugin with a ``storage_policy`` attribute (``OnlineRehearsalPlugin``,
        Avalanche's ``ReplayPlugin``).
    """
    candidates = [getattr(strategy, "storage_policy", None)]
    candidates += [getattr(p, "storage_policy", None) for p in getattr(strategy, "plugins", [])]
    for policy in candidates:
        if isinstance(policy, OnlineBuffer):
            return policy
    raise ValueError(
        "no OnlineBuffer found on the strategy or its plugins; pass buffer= to the metric"
    )


class BufferMetric(PluginMetric[dict[str, float]]):
    """Base of the buffer metrics: emits :meth:`_values` every ``every`` experiences.

    :param buffer: the buffer to watch; found on the strategy (:func:`find_buffer`) when
        ``None``.
    :param every: emit after every ``every``-th training experience (counted over the
        whole life of the metric), and at the end of each ``train`` call.
    :param at_samples: also emit after the experience in which the buffer's ``n_seen``
        (the stream samples it was offered) reaches each of these counts, e.g. the
        stream's task ends.
    """

    name = "Buffer"

    def __init__(self, buffer: OnlineBuffer | None = None, *, every: int = 100,
                 at_samples: Sequence[int] = ()) -> None:
        super().__init__()
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive int, got {every!r}")
        self.buffer = buffer
        self.every = every
        self.at_samples = sorted(int(n) for n in at_samples)
        self._n_seen = 0  # the buffer's n_seen after the last experience
        self.n_experiences = 0
        self._last: dict[str, float] = {}
        self._emitted_at = -1  # n_experiences at the last emission

    def __str__(self) -> str:
        return self.name

    def result(self) -> dict[str, float]:
        """Return the last emitted values, keyed by full metric name."""
        return dict(self._last)

    def reset(self) -> None:
        """Forget the last emitted values (the experience count is kept)."""
        self._last = {}

    def _values(self, strategy: SupervisedTemplate, buffer: OnlineBuffer) -> dict[str, float]:
        """Map each value's name (a metric name plus optional ``/suffix``) to its value."""
        raise NotImplementedError

    def _observe(self, strategy: SupervisedTemplate) -> None:
        """See every training experience (after the buffer did), emitted or not."""

    def _emit(self, strategy: SupervisedTemplate) -> MetricResult:
        buffer = self.buffer if self.buffer is not None else find_buffer(strategy)
        self._last = self._values(strategy, buffer)
        self._emitted_at = self.n_experiences
        x = strategy.clock.train_iterations
        return [MetricValue(self, name, value, x) for name, value in self._last.items()]

    def _name(self, metric: str, strategy: SupervisedTemplate, suffix: str = "") -> str:
        """``metric/train_phase/train_stream[/suffix]``, Avalanche's naming scheme."""
        return get_metric_name(metric, strategy, add_experience=False, add_task=False) + suffix

    def after_training_exp(self, strategy: SupervisedTemplate) -> MetricResult:
        """Count the experience; emit on every ``every``-th, and where ``at_samples`` say."""
        self.n_experiences += 1
        self._observe(strategy)
        if self.n_experiences % self.every == 0 or self._reached_a_mark(strategy):
            return self._emit(strategy)
        return None

    def _reached_a_mark(self, strategy: SupervisedTemplate) -> bool:
        """Whether the buffer's ``n_seen`` reached one of ``at_samples`` in this experience."""
        if not self.at_samples:
            return False
        before = self._n_seen
        buffer = self.buffer if self.buffer is not None else find_buffer(strategy)
        self._n_seen = buffer.n_seen
        return any(before < n <= self._n_seen for n in self.at_samples)

    def after_training(self, strategy: SupervisedTemplate) -> MetricResult:
        """Emit the final state of a ``train`` call, unless it was just emitted."""
        if self.n_experiences == self._emitted_at or strategy.experience is None:
            return None
        return self._emit(strategy)


class BufferCompositionMetric(BufferMetric):
    """Samples per class and per task in the buffer, and its fill.

    Emits ``BufferSize`` (stored samples), ``BufferClassCount/.../ClassCCC`` for every class
    that has been in the buffer (0 once it left), and with a task mapping
    ``BufferTaskCount/.../TaskTTT`` for every task that has been in the buffer. Names
    follow Avalanche's ``metric/train_phase/train_stream`` scheme.

    Task ids come from the caller, never from the stream (which carries none):

    * ``task_of_class``: a label -> task map (disjoint streams: each class in one task);
    * ``sample_tasks``: the task of every training sample in stream order (any stream,
      e.g. blurry or permuted ones). The metric must then see every training experience
      from the first: it fingerprints each incoming sample (its label and input bytes) and
      looks the stored samples up by fingerprint. A sample repeated in several tasks
      counts for the latest.

    :param buffer: the buffer; found on the strategy when ``None``.
    :param every: emit every ``every`` training experiences (and at the end of ``train``).
    :param task_of_class: label -> task map.
    :param sample_tasks: ``(n_stream,)`` task of each training sample, in stream order.
    :param at_samples: also emit when the buffer has been offered these many samples.
    """

    name = "BufferComposition"

    def __init__(
        self,
        buffer: OnlineBuffer | None = None,
        *,
        every: int = 100,
        task_of_class: Mapping[int, int] | None = None,
        sample_tasks: Tensor | Sequence[int] | None = None,
        at_samples: Sequence[int] = (),
    ) -> None:
        super().__init__(buffer, every=every, at_samples=at_samples)
        if task_of_class is not None and sample_tasks is not None:
            raise ValueError("give task_of_class or sample_tasks, not both")
        self.task_of_class = None if task_of_class is None else dict(task_of_class)
        self.sample_tasks = (
            None if sample_tasks is None else torch.as_tensor(sample_tasks, dtype=torch.long)
        )
        self._task_of_sample: dict[tuple[int, bytes], int] = {}
        self._n_stream = 0
        self._classes: set[int] = set()
        self._tasks: set[int] = set()
        self._warned = False

    @staticmethod
    def _fingerprint(x: Tensor, y: Tensor) -> list[tuple[int, bytes]]:
        """``(label, digest of the input bytes)`` per sample."""
        rows = x.detach().cpu().contiguous().reshape(len(y), -1).numpy()
        labels = y.tolist()
        return [
            (int(label), hashlib.blake2b(row.tobytes(), digest_size=16).digest())
            for label, row in zip(labels, rows, strict=True)
        ]

    def _observe(self, strategy: SupervisedTemplate) -> None:
        if self.sample_tasks is None or strategy.experience is None:
            return
        x, y = experience_tensors(strategy.experience)
        end = self._n_stream + len(y)
        if end > len(self.sample_tasks):
            raise ValueError(
                f"sample_tasks covers {len(self.sample_tasks)} stream samples but "
                f"{end} have arrived"
            )
        tasks = self.sample_tasks[self._n_stream : end].tolist()
        for key, task in zip(self._fingerprint(x, y), tasks, strict=True):
            self._task_of_sample[key] = int(task)
        self._n_stream = end

    def counts(self, buffer: OnlineBuffer) -> tuple[dict[int, int], dict[int, int] | None]:
        """Count the stored samples per class and (with a task mapping) per task.

        Tasks of stored samples the metric has not seen arrive count under task ``-1``.

        :param buffer: the buffer.
        :return: ``({class: count}, {task: count} or None)``, only non-zero counts.
        """
        has_tasks = self.task_of_class is not None or self.sample_tasks is not None
        if len(buffer) == 0:
            return {}, ({} if has_tasks else None)
        x, y = buffer.tensors()
        labels = y.tolist()
        per_class = dict(Counter(int(c) for c in labels))
        if self.task_of_class is not None:
            return per_class, count_by_task((int(c) for c in labels), self.task_of_class)
        if self.sample_tasks is not None:
            return per_class, count_by_task(self._fingerprint(x, y), self._task_of_sample)
        return per_class, None

    def _values(self, strategy: SupervisedTemplate, buffer: OnlineBuffer) -> dict[str, float]:
        per_class, per_task = self.counts(buffer)
        values = {self._name("BufferSize", strategy): float(len(buffer))}
        self._classes.update(per_class)
        for c in sorted(self._classes):
            values[self._name("BufferClassCount", strategy, f"/Class{c:03}")] = float(
                per_class.get(c, 0)
            )
        if per_task is not None:
            self._tasks.update(t for t in per_task if t >= 0)
            if per_task.get(-1, 0) and not self._warned:
                warnings.warn(
                    "some stored samples have no known task (label missing from "
                    "task_of_class, or a sample the metric did not see arrive); they count "
                    "under BufferTaskCount/.../Unknown",
                    stacklevel=2,
                )
                self._warned = True
            for t in sorted(self._tasks):
                values[self._name("BufferTaskCount", strategy, f"/Task{t:03}")] = float(
                    per_task.get(t, 0)
                )
            if per_task.get(-1, 0):
                values[self._name("BufferTaskCount", strategy, "/Unknown")] = float(per_task[-1])
        return values


class BufferSurrogateMetric(BufferMetric):
    """The surrogate ``sum_{i,j} cos(g_i, g_j)`` of the stored samples (paper Eq. 5).

    ``g_i`` is the loss gradient of stored sample ``i`` under the strategy's current model,
    from :func:`~avalanche_gss.gradients.sample_cosine` (eval mode, as the selectors score);
    the computation runs inside :func:`~avalanche_gss.gradients.preserved_state`, so
    training is not affected. Emits ``BufferSurrogate/train_phase/train_stream`` (0 for an
    empty buffer); divided by ``len(buffer)^2`` it is ``1 - Var[g/|g|]`` (Eq. 6). Costs one
    forward and backward pass over the buffer per emission.

    :param buffer: the buffer; found on the strategy when ``None``.
    :param every: emit every ``every`` training experiences (and at the end of ``train``).
    :param loss_fn: per-sample loss ``(logits, y) -> (N,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param at_samples: also emit when the buffer has been offered these many samples.
    """

    name = "BufferSurrogate"

    def __init__(
        self,
        buffer: OnlineBuffer | None = None,
        *,
        every: int = 100,
        loss_fn: LossFn | None = None,
        params: Sequence[nn.Parameter] | None = None,
        at_samples: Sequence[int] = (),
    ) -> None:
        super().__init__(buffer, every=every, at_samples=at_samples)
        self.loss_fn = loss_fn
        self.params = params

    def surrogate(self, model: nn.Module, buffer: OnlineBuffer, device: Any = None) -> float:
        """Compute the surrogate of the buffer's samples under ``model``.

        :param model: the network.
        :param buffer: the buffer.
        :param device: where to compute; the buffer's device by default.
        """
        if len(buffer) == 0:
            return 0.0
        x, y = buffer.tensors()
        t = task_labels_for(model, buffer.task_labels)
        if device is not None:
            x, y = x.to(device), y.to(device)
        if t is not None:
            t = t.to(x.device)
        with preserved_state(model):
            cos = sample_cosine(model, x, y, loss_fn=self.loss_fn, params=self.params,
                                task_labels=t)  # (M, M)
        return float(cos.detach().sum())

    def _values(self, strategy: SupervisedTemplate, buffer: OnlineBuffer) -> dict[str, float]:
        value = self.surrogate(strategy.model, buffer, strategy.device)
        return {self._name(self.name, strategy): value}


def buffer_metrics(
    buffer: OnlineBuffer | None = None,
    *,
    every: int = 100,
    composition: bool = True,
    surrogate: bool = True,
    task_of_class: Mapping[int, int] | None = None,
    sample_tasks: Tensor | Sequence[int] | None = None,
    loss_fn: LossFn | None = None,
    params: Sequence[nn.Parameter] | None = None,
    at_samples: Sequence[int] = (),
) -> list[BufferMetric]:
    """Build the buffer metrics, for ``EvaluationPlugin(*buffer_metrics(...), loggers=...)``.

    :param buffer: the buffer; found on the strategy when ``None``.
    :param every: emit every ``every`` training experiences (and at the end of ``train``).
    :param composition: include :class:`BufferCompositionMetric`.
    :param surrogate: include :class:`BufferSurrogateMetric`.
    :param task_of_class: label -> task map for per-task counts.
    :param sample_tasks: task of each training sample in stream order, for per-task counts.
    :param loss_fn: per-sample loss of the surrogate.
    :param params: parameters of the surrogate's gradients.
    :param at_samples: also emit when the buffer has been offered these many samples (e.g.
        the task ends).
    """
    metrics: list[BufferMetric] = []
    if composition:
        metrics.append(
            BufferCompositionMetric(
                buffer, every=every, task_of_class=task_of_class, sample_tasks=sample_tasks,
                at_samples=at_samples,
            )
        )
    if surrogate:
        metrics.append(BufferSurrogateMetric(buffer, every=every, loss_fn=loss_fn, params=params,
                                             at_samples=at_samples))
    return metrics
