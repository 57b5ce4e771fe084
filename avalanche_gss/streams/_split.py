"""``TaskSplit``: the tensors of a task sequence, before it becomes an Avalanche stream.

Every stream generator (:mod:`.disjoint`, :mod:`.permuted`, :mod:`.imbalanced`,
:mod:`.blurry`) returns one; :func:`avalanche_gss.streams.online_benchmark` turns it into
Avalanche streams. Keeping this step pure tensors makes the protocols testable without
Avalanche and lets any :class:`~avalanche_gss.streams.datasets.ArrayDataset` feed them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = ["TaskSplit"]


@dataclass(frozen=True, eq=False)
class TaskSplit:
    """A sequence of tasks as tensors: train data in stream order, test data per task.

    :param train: per task ``(x, y)``: ``x`` ``(n_k, ...)`` float32, ``y`` ``(n_k,)`` int64,
        already in the order the learner sees them (shuffled within the task).
    :param test: per task ``(x, y)``: the test set that measures that task's accuracy.
    :param task_classes: per task the sorted classes that define it (for disjoint streams
        the task's labels; for permuted streams every class).
    :param num_classes: size of the shared output head (max label + 1 of the dataset).
    :param protocol: every setting used to build the split (JSON-serialisable), recorded
        in each result file.
    :param dataset: dataset name (``"mnist"``, ``"cifar10"``, an ``.npz`` stem).
    :param data_source: where the data came from, recorded in each result file.
    """

    train: tuple[tuple[Tensor, Tensor], ...]
    test: tuple[tuple[Tensor, Tensor], ...]
    task_classes: tuple[tuple[int, ...], ...]
    num_classes: int
    protocol: dict[str, Any] = field(default_factory=dict)
    dataset: str = ""
    data_source: str = ""

    def __post_init__(self) -> None:
        n = len(self.train)
        if n == 0:
            raise ValueError("a TaskSplit needs at least one task")
        if len(self.test) != n or len(self.task_classes) != n:
            raise ValueError(
                f"train ({n}), test ({len(self.test)}) and task_classes "
                f"({len(self.task_classes)}) must have one entry per task"
            )
        for part, pairs in (("train", self.train), ("test", self.test)):
            for k, (x, y) in enumerate(pairs):
                if x.shape[0] != y.shape[0]:
                    raise ValueError(
                        f"{part} task {k}: {x.shape[0]} inputs but {y.shape[0]} labels"
                    )
                if y.dtype != torch.int64 or y.dim() != 1:
                    raise ValueError(f"{part} task {k}: labels must be a 1-D int64 tensor")

    @property
    def n_tasks(self) -> int:
        """Number of tasks."""
        return len(self.train)

    @property
    def train_sizes(self) -> tuple[int, ...]:
        """Training samples per task, in stream order."""
        return tuple(int(y.shape[0]) for _, y in self.train)

    @property
    def test_sizes(self) -> tuple[int, ...]:
        """Test samples per task."""
        return tuple(int(y.shape[0]) for _, y in self.test)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input, e.g. ``(1, 28, 28)`` or ``(D,)``."""
        return tuple(self.train[0][0].shape[1:])

    @property
    def is_class_disjoint(self) -> bool:
        """Whether tasks own disjoint classes and every train label lies in its task's classes.

        True for disjoint and imbalanced streams; False for permuted and blurry ones.
        """
        seen: set[int] = set()
        for classes, (_, y) in zip(self.task_classes, self.train, strict=True):
            if seen.intersection(classes):
                return False
            seen.update(classes)
            if not set(y.unique().tolist()) <= set(classes):
                return False
        return True

    def check_learnable(self) -> None:
        """Refuse a split that a learner cannot train on and measure, in one line.

        Every input is float32 (the models' weights are: a ``float64`` or ``uint8`` input
        is refused, with the conversion to make, not converted here), of one shape across
        the tasks, train and test alike (the model is built for one); every label is in
        ``0 .. num_classes - 1`` (the output head); the stream holds training samples (a
        task may have none, not all of them); every task has test samples (its accuracy
        would count as 0 % in the average otherwise).

        :raises ValueError: the first problem, naming the task (``train task 2``) and what
            is wrong with it.
        """
        shape = self.input_shape
        for part, pairs in (("train", self.train), ("test", self.test)):
            for k, (x, y) in enumerate(pairs):
                if x.dtype != torch.float32:
                    hint = (" / 255 if they are 0-255 pixels" if not x.dtype.is_floating_point
                            else "")
                    raise ValueError(f"{part} task {k}: inputs are {x.dtype}, not "
                                     f"torch.float32; convert them (x.float(){hint})")
                if tuple(x.shape[1:]) != shape:
                    raise ValueError(f"{part} task {k}: inputs of shape {tuple(x.shape[1:])}, "
                                     f"train task 0's are {shape}: every input of a stream "
                                     "has one shape")
                if y.numel() and not 0 <= int(y.min()) <= int(y.max()) < self.num_classes:
                    raise ValueError(f"{part} task {k}: labels {int(y.min())}..{int(y.max())} "
                                     f"outside 0..{self.num_classes - 1} (num_classes "
                                     f"{self.num_classes})")
        if not any(self.train_sizes):
            raise ValueError(f"no training samples in any of its {self.n_tasks} task(s)")
        empty = [k for k, size in enumerate(self.test_sizes) if size == 0]
        if empty:
            raise ValueError(f"test task {empty[0]} has no samples: its accuracy would count "
                             "as 0 % in the average; give every task test samples")

    def stream_tensors(self) -> tuple[Tensor, Tensor]:
        """Concatenate the training stream into one ``(x, y)`` pair, tasks in order (a copy).

        Useful for the i.i.d. baselines, which shuffle it.
        """
        return torch.cat([x for x, _ in self.train]), torch.cat([y for _, y in self.train])


def check_seed(seed: int) -> torch.Generator:
    """Return a fresh CPU generator seeded with ``seed`` (never the global RNG).

    :param seed: a non-negative integer.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return torch.Generator().manual_seed(seed)


def per_task_counts(samples_per_task: int | Sequence[int] | None, n_tasks: int) -> list[int | None]:
    """Expand ``samples_per_task`` (one int, one per task, or ``None`` = all) to a list.

    :param samples_per_task: the requested training samples per task.
    :param n_tasks: number of tasks.
    """
    if samples_per_task is None or isinstance(samples_per_task, int):
        counts: list[int | None] = [samples_per_task] * n_tasks
    else:
        counts = list(samples_per_task)
        if len(counts) != n_tasks:
            raise ValueError(
                f"samples_per_task has {len(counts)} entries but there are {n_tasks} tasks"
            )
    for c in counts:
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ValueError(f"samples_per_task entries must be positive ints or None, got {c!r}")
    return counts
