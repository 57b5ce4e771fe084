"""Avalanche benchmarks from a :class:`TaskSplit`: task-free online streams and task-level ones.

:func:`online_benchmark` gives the stream GSS learns from: experiences of ``batch_size``
consecutive samples (10 in the paper), every task label 0, and no boundary attributes
(no ``origin_experience``, ``is_first_subexp``/``is_last_subexp``, ``sub_stream_length``).
It is built lazily: an experience (a 10-sample tensor dataset) is made when the stream is
indexed, so construction costs O(tasks) whatever the stream length.

Avalanche 0.6 has no public tensor-dataset builder: :func:`tensor_dataset` wraps the one
in :mod:`avalanche_gss._avalanche`, where every use of an Avalanche internal lives.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from avalanche.benchmarks import (
    CLExperience,
    CLScenario,
    DatasetExperience,
    EagerCLStream,
    NCScenario,
    SequenceCLStream,
    nc_benchmark,
)
from avalanche.benchmarks.utils import AvalancheDataset
from torch import Tensor

from avalanche_gss._avalanche import tensor_dataset as _tensor_dataset

from ._split import TaskSplit

# The package re-exports all of these but sample_fields (its __init__ imports this module on
# first access to one of them).
__all__ = ["OnlineBenchmark", "OnlineTrainStream", "TensorExperience",
           "class_incremental_benchmark_for", "dataset_tensors", "experience_tensors",
           "online_benchmark", "sample_fields", "tensor_dataset"]


def tensor_dataset(x: Tensor, y: Tensor) -> AvalancheDataset:
    """Wrap ``(x, y)`` as an Avalanche classification dataset yielding ``(x_i, y_i, 0)``.

    No copy: the dataset indexes the given tensors. Task label 0 everywhere (shared head).

    :param x: ``(N, ...)`` inputs.
    :param y: ``(N,)`` int64 labels.
    """
    return _tensor_dataset(x, y, 0)


class DatasetCell:
    """A tensor dataset built at its first read, shared by an experience and its copies.

    Avalanche hands plugins copies of an experience (``train()``, ``eval()``,
    ``logging()``); they share this cell, so they share one dataset, as they would share
    an eager one. A buffer registers the cell as the source of the samples it stores, and
    reads it (:meth:`dataset`) only when it is read as a dataset.

    :param x: ``(N, ...)`` inputs.
    :param y: ``(N,)`` int64 labels.
    """

    __slots__ = ("x", "y", "_data")

    def __init__(self, x: Tensor, y: Tensor) -> None:
        self.x, self.y = x, y
        self._data: AvalancheDataset | None = None

    def dataset(self) -> AvalancheDataset:
        """The tensors as :func:`tensor_dataset` wraps them (built once)."""
        if self._data is None:
            self._data = tensor_dataset(self.x, self.y)
        return self._data


class TensorExperience(DatasetExperience):
    """An experience over tensors: task label 0 and nothing that reveals a task boundary.

    Besides ``dataset`` it carries ``task_label`` (0), ``task_labels`` (``[0]``) and
    ``classes_in_this_experience`` (the labels present in its own samples), which
    Avalanche metrics and model adaptation read. ``dataset`` is built at its first read
    (:class:`DatasetCell`): the online template and this library's buffers read the
    tensors, so a run that never reads it does not pay for 400 small datasets.

    :param x: ``(N, ...)`` inputs.
    :param y: ``(N,)`` int64 labels.
    :param current_experience: position in the stream (set by the stream when indexed).
    """

    def __init__(self, x: Tensor, y: Tensor, *, current_experience: int | None = None):
        self._cell = DatasetCell(x, y)  # before DatasetExperience sets _dataset (unused)
        super().__init__(dataset=cast(AvalancheDataset, None),
                         current_experience=current_experience)
        self._tensors = (x, y)
        self.task_label = 0
        self.task_labels = [0]
        self.classes_in_this_experience = sorted(set(y.tolist()))

    @property
    def dataset(self) -> AvalancheDataset:
        """The samples as an Avalanche classification dataset (built at the first read)."""
        return self._cell.dataset()

    @property
    def cell(self) -> DatasetCell:
        """The holder of :attr:`dataset`, shared with the experience's copies."""
        return self._cell

    @property
    def tensors(self) -> tuple[Tensor, Tensor]:
        """The experience's ``(x, y)``: views of the split's tensors; do not modify in place."""
        return self._tensors


class OnlineTrainStream(SequenceCLStream[TensorExperience]):
    """The task-ordered training stream cut into experiences of ``batch_size`` samples.

    Sized, indexable and sliceable like any Avalanche ``SequenceCLStream``, but lazy:
    experience ``i`` is built when it is accessed (one small tensor dataset, ~30 us).
    Batches never straddle a task, like the authors' ``Continuum`` (``main.py``): the last
    batch of a task is smaller when the task size is not a multiple of ``batch_size``.

    :param name: stream name (``"train"``).
    :param tasks: per task ``(x, y)`` in stream order.
    :param batch_size: samples per experience.
    :param benchmark: the owning benchmark, if any.
    :param slice_ids: experience ids of a slice (internal, used by slicing).
    """

    def __init__(
        self,
        name: str,
        tasks: Sequence[tuple[Tensor, Tensor]],
        batch_size: int,
        benchmark: CLScenario | None = None,
        slice_ids: Sequence[int] | None = None,
    ):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self._tasks = tuple(tasks)
        self._batch_size = batch_size
        starts = [0]
        for _, y in self._tasks:
            starts.append(starts[-1] + -(-int(y.shape[0]) // batch_size))  # ceil
        self._starts = starts  # first experience id of each task; last entry = length
        super().__init__(name=name, benchmark=benchmark, set_stream_info=True, slice_ids=slice_ids)

    def _full_length(self) -> int:
        return self._starts[-1]

    def _make_experience(self, experience_idx: int) -> TensorExperience:
        task = bisect.bisect_right(self._starts, experience_idx) - 1
        first = (experience_idx - self._starts[task]) * self._batch_size
        x, y = self._tasks[task]
        last = min(first + self._batch_size, int(y.shape[0]))
        return TensorExperience(x[first:last], y[first:last], current_experience=experience_idx)

    @property
    def task_experience_ranges(self) -> tuple[range, ...]:
        """For each task, the ids of its experiences in the full (unsliced) stream."""
        return tuple(range(a, b) for a, b in zip(self._starts[:-1], self._starts[1:], strict=True))


class OnlineBenchmark(CLScenario):
    """Online continual-learning benchmark built from a :class:`TaskSplit`.

    Streams:

    - ``train_stream``: :class:`OnlineTrainStream`, ``batch_size`` samples per experience,
      tasks in order, task labels 0, no boundary signal. What GSS learns from.
    - ``test_stream``: one experience per task (its test set), task labels 0.
    - ``task_stream``: one experience per task holding that task's whole training stream,
      task labels 0 (shared head): for the task-aware baselines (GEM) that need
      task-level experiences.

    Task boundaries are available to the *harness* (``task_experience_ranges``,
    :meth:`train_stream_of_task`) for evaluating at the end of each task; they never reach
    the learner through the experiences.

    :param split: the tasks.
    :param batch_size: samples per online experience (paper: 10).
    """

    train_stream: OnlineTrainStream
    test_stream: EagerCLStream[TensorExperience]
    task_stream: EagerCLStream[TensorExperience]

    def __init__(self, split: TaskSplit, *, batch_size: int = 10):
        train = OnlineTrainStream("train", split.train, batch_size)
        test = EagerCLStream("test", [TensorExperience(x, y) for x, y in split.test])
        task = EagerCLStream("task", [TensorExperience(x, y) for x, y in split.train])
        super().__init__([train, test, task])
        for stream in (train, test, task):
            stream.benchmark = self
        self.split = split
        self.batch_size = batch_size
        self.n_tasks = split.n_tasks
        self.num_classes = split.num_classes
        self.task_classes = split.task_classes
        self.dataset_name = split.dataset
        self.data_source = split.data_source
        self.protocol: dict[str, Any] = {
            **split.protocol,
            "batch_size": batch_size,
            "batches_straddle_tasks": False,
            "task_labels_to_learner": False,
        }

    @property
    def task_experience_ranges(self) -> tuple[range, ...]:
        """For each task, the ids of its experiences in ``train_stream``."""
        return self.train_stream.task_experience_ranges

    def train_stream_of_task(self, task: int) -> OnlineTrainStream:
        """Return the slice of ``train_stream`` holding task ``task`` (still lazy).

        For the evaluation harness: call ``strategy.train`` once per task on it, then
        evaluate, to record the accuracy matrix at task ends as the authors do.

        :param task: 0-based task index.
        """
        r = self.task_experience_ranges[task]
        return self.train_stream[r.start : r.stop]


def online_benchmark(split: TaskSplit, *, batch_size: int = 10) -> OnlineBenchmark:
    """Turn ``split`` into a task-free online Avalanche benchmark (see :class:`OnlineBenchmark`).

    :param split: the tasks, e.g. from :func:`~avalanche_gss.streams.disjoint_tasks`.
    :param batch_size: samples per online experience (paper: 10).
    :return: the benchmark; construction is O(tasks), experiences are made on access.
    """
    return OnlineBenchmark(split, batch_size=batch_size)


def class_incremental_benchmark_for(split: TaskSplit) -> NCScenario:
    """Build an Avalanche ``NCScenario`` with one experience per task, for iCaRL.

    Avalanche's ``ICaRL`` reads ``experience.benchmark.n_classes_per_exp`` and
    ``classes_order``, which only ``NCScenario`` provides. Built with ``nc_benchmark``
    (``fixed_class_order`` = the tasks' classes in order, ``task_labels=False``, original
    labels kept) from the split's train and test tensors, so each experience holds exactly
    its task's samples.

    :param split: a class-disjoint split (disjoint or imbalanced).
    :return: the scenario; its ``train_stream`` is task-level (task-aware baselines only).
    :raises ValueError: if tasks share classes (permuted, blurry).
    """
    if not split.is_class_disjoint:
        raise ValueError(
            "class_incremental_benchmark_for needs class-disjoint tasks (disjoint or "
            "imbalanced splits); permuted and blurry splits share classes across tasks"
        )
    x_tr, y_tr = split.stream_tensors()
    x_te = torch.cat([x for x, _ in split.test])
    y_te = torch.cat([y for _, y in split.test])
    order = [c for classes in split.task_classes for c in classes]
    sizes = [len(c) for c in split.task_classes]
    per_exp = None if len(set(sizes)) == 1 else dict(enumerate(sizes))
    return nc_benchmark(
        tensor_dataset(x_tr, y_tr),
        tensor_dataset(x_te, y_te),
        n_experiences=split.n_tasks,
        task_labels=False,
        shuffle=False,
        fixed_class_order=order,
        per_exp_classes=per_exp,
    )


def experience_tensors(experience: CLExperience | AvalancheDataset) -> tuple[Tensor, Tensor]:
    """Return the ``(x, y)`` of an experience (or an Avalanche dataset) as stacked tensors.

    A :class:`TensorExperience` returns its tensors directly (views, no copy); any other
    classification experience or dataset is read item by item through its current
    transforms (:func:`dataset_tensors`, ~45 us for 10 items).

    :param experience: an experience with a ``dataset``, or a dataset.
    :return: ``x`` ``(N, ...)`` and ``y`` ``(N,)`` int64.
    """
    if isinstance(experience, TensorExperience):
        return experience.tensors
    data = experience.dataset if isinstance(experience, CLExperience) else experience
    if len(data) == 0:
        raise ValueError("the experience's dataset is empty")
    x, y, _ = dataset_tensors(data)
    return x, y


def sample_fields(item: Any) -> tuple[Any, Any, Any]:
    """``(x, y, t)`` of one dataset item; ``t`` is ``None`` when the item has no task field.

    Items are ``(x, y)``, ``(x, y, t, ...)``, or mappings with ``"x"`` and ``"y"`` keys (and
    ``"targets_task_labels"`` or ``"t"``), as Avalanche's dictionary datasets have them.

    :param item: ``dataset[i]``.
    :raises TypeError: the item is none of these.
    """
    if isinstance(item, Mapping):
        if "x" not in item or "y" not in item:
            raise TypeError(f"a buffer reads samples with 'x' and 'y' fields; this dataset's "
                            f"items have keys {sorted(item)}")
        return item["x"], item["y"], item.get("targets_task_labels", item.get("t"))
    if isinstance(item, (tuple, list)) and len(item) >= 2:
        return item[0], item[1], item[2] if len(item) > 2 else None
    raise TypeError(f"a buffer reads (x, y[, t]) samples, but the dataset's items are "
                    f"{type(item).__name__}")


def dataset_tensors(
    data: Any, indices: Sequence[int] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Read samples of a classification dataset through its current transforms.

    Without a task field in the items (:func:`sample_fields`), task labels come from the
    dataset's ``targets_task_labels`` when it has them, else 0.

    :param data: an ``AvalancheDataset`` or any dataset of ``(x, y[, t])`` items.
    :param indices: which samples, in order; all by default.
    :return: ``x`` ``(N, ...)``, ``y`` ``(N,)`` and ``t`` ``(N,)``, int64 labels.
    :raises ValueError: nothing to read.
    """
    rows = range(len(data)) if indices is None else [int(i) for i in indices]
    if len(rows) == 0:
        raise ValueError("the dataset is empty")
    fields = [sample_fields(data[i]) for i in rows]
    x = torch.stack([torch.as_tensor(f[0]) for f in fields])
    y = torch.tensor([int(f[1]) for f in fields], dtype=torch.long)
    if fields[0][2] is not None:
        t = torch.tensor([int(f[2]) for f in fields], dtype=torch.long)
    else:
        labels = getattr(data, "targets_task_labels", None)
        t = (torch.tensor([int(labels[i]) for i in rows], dtype=torch.long)
             if labels is not None else torch.zeros(len(rows), dtype=torch.long))
    return x, y, t
