"""Imbalanced disjoint streams (paper Sec. 5, Table 4).

"5 different sequences where the first sequence has 2000 samples of the first task and
200 from each other task, the second sequence has 2000 samples from the second task and
200 from others, and same strategy applies to the rest" (buffer 300, disjoint MNIST).
The authors' code has the hook (``--samples_per_task a-b-c-...``) but no script.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ._split import TaskSplit
from .datasets import ArrayDataset
from .disjoint import disjoint_tasks

__all__ = ["imbalanced_counts", "imbalanced_tasks"]


def imbalanced_counts(
    sequence: int, *, n_tasks: int = 5, major: int = 2000, minor: int = 200
) -> list[int]:
    """Training samples per task of imbalanced sequence ``sequence`` (1-based).

    :param sequence: which task (1..n_tasks) gets ``major`` samples.
    :param n_tasks: number of tasks.
    :param major: samples of the over-represented task.
    :param minor: samples of every other task.
    :return: list of ``n_tasks`` ints, e.g. ``[200, 2000, 200, 200, 200]`` for sequence 2.
    """
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 1 <= sequence <= n_tasks:
        raise ValueError(f"sequence must be an int in 1..{n_tasks}, got {sequence!r}")
    if minor < 1 or major < 1:
        raise ValueError("major and minor must be >= 1")
    return [major if k == sequence - 1 else minor for k in range(n_tasks)]


def imbalanced_tasks(
    data: ArrayDataset,
    *,
    sequence: int,
    major: int = 2000,
    minor: int = 200,
    n_tasks: int = 5,
    classes_per_task: int = 2,
    seed: int = 0,
    class_order: Sequence[int] | None = None,
) -> TaskSplit:
    """Disjoint tasks where task ``sequence`` has ``major`` samples and the others ``minor``.

    Table 4: ``sequence`` 1..5, ``major=2000``, ``minor=200`` on disjoint MNIST. Sampling,
    order and test sets are those of :func:`~avalanche_gss.streams.disjoint_tasks`.

    :param data: the dataset.
    :param sequence: 1-based index of the over-represented task.
    :param major: training samples of task ``sequence``.
    :param minor: training samples of every other task.
    :param n_tasks: number of tasks.
    :param classes_per_task: classes per task.
    :param seed: seeds the subsets and the within-task order.
    :param class_order: classes in task order (default: sorted labels).
    :return: the split; ``protocol`` adds ``sequence``, ``major``, ``minor``.
    :raises ValueError: if ``sequence`` is out of range or a task lacks samples.
    """
    counts = imbalanced_counts(sequence, n_tasks=n_tasks, major=major, minor=minor)
    split = disjoint_tasks(
        data,
        n_tasks=n_tasks,
        classes_per_task=classes_per_task,
        samples_per_task=counts,
        seed=seed,
        class_order=class_order,
    )
    protocol = {
        **split.protocol,
        "stream": "imbalanced",
        "sequence": sequence,
        "major": major,
        "minor": minor,
    }
    return dataclasses.replace(split, protocol=protocol)
