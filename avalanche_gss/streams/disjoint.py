"""Disjoint streams (paper Sec. 5 "Benchmarks"): tasks own disjoint sets of classes.

Disjoint MNIST / CIFAR-10: 5 tasks of 2 consecutive labels; per task a random subset of
the training samples (1,000 for MNIST, 2,000 for CIFAR-10 in the paper), shuffled within
the task, tasks in order. Each task is tested on all test samples of its classes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._split import TaskSplit, check_seed, per_task_counts
from .datasets import ArrayDataset

__all__ = ["disjoint_tasks"]


def disjoint_tasks(
    data: ArrayDataset,
    *,
    n_tasks: int = 5,
    classes_per_task: int = 2,
    samples_per_task: int | Sequence[int] | None = 1000,
    seed: int = 0,
    class_order: Sequence[int] | None = None,
) -> TaskSplit:
    """Split ``data`` into class-disjoint tasks (disjoint MNIST / CIFAR-10).

    Task ``k`` owns classes ``class_order[k * classes_per_task : (k + 1) * classes_per_task]``;
    its training stream is a uniformly random subset of ``samples_per_task`` of that
    class pair's training samples, in random order (the authors' ``main.py`` Continuum:
    a ``randperm`` subset per task). Its test set is every test sample of its classes.

    :param data: the dataset.
    :param n_tasks: number of tasks.
    :param classes_per_task: classes per task.
    :param samples_per_task: training samples per task: one int for all tasks, one int
        per task (the authors' ``--samples_per_task a-b-c`` hook, used by
        :func:`~avalanche_gss.streams.imbalanced_tasks`), or ``None`` for all of them.
    :param seed: seeds the subset and the within-task order (own ``torch.Generator``).
    :param class_order: classes in task order; default: the sorted labels of ``data``
        (consecutive labels, like the authors).
    :return: the split; ``protocol`` records every setting.
    :raises ValueError: if there are not enough classes, a class in ``class_order`` is
        absent or repeated, or a task has fewer training samples than requested (the
        message says how many exist; scale ``samples_per_task`` explicitly).
    """
    if n_tasks < 1 or classes_per_task < 1:
        raise ValueError("n_tasks and classes_per_task must be >= 1")
    counts = per_task_counts(samples_per_task, n_tasks)
    available = data.classes
    order = [int(c) for c in (class_order if class_order is not None else available)]
    if len(set(order)) != len(order):
        raise ValueError(f"class_order repeats a class: {order}")
    absent = sorted(set(order) - set(available))
    if absent:
        raise ValueError(f"class_order names classes absent from the training set: {absent}")
    needed = n_tasks * classes_per_task
    if len(order) < needed:
        raise ValueError(
            f"{n_tasks} tasks x {classes_per_task} classes need {needed} classes but "
            f"{data.name} has {len(order)}: {order}"
        )
    gen = check_seed(seed)
    train, test, task_classes, sizes = [], [], [], []
    for k in range(n_tasks):
        classes = tuple(sorted(order[k * classes_per_task : (k + 1) * classes_per_task]))
        cls = torch.tensor(classes)
        idx = torch.isin(data.y_train, cls).nonzero().flatten()  # (n_avail,)
        asked = counts[k]
        n = int(idx.numel()) if asked is None else asked
        if n > idx.numel():
            raise ValueError(
                f"task {k} (classes {list(classes)}) asks for {n} training samples but "
                f"{data.name} has only {idx.numel()} of those classes; pass "
                f"samples_per_task <= {idx.numel()} (or None for all)"
            )
        pick = idx[torch.randperm(idx.numel(), generator=gen)[:n]]  # random subset, random order
        train.append((data.x_train[pick], data.y_train[pick]))
        te = torch.isin(data.y_test, cls).nonzero().flatten()
        if te.numel() == 0:
            raise ValueError(f"task {k} (classes {list(classes)}) has no test samples")
        test.append((data.x_test[te], data.y_test[te]))
        task_classes.append(classes)
        sizes.append(n)
    protocol = {
        "stream": "disjoint",
        "n_tasks": n_tasks,
        "classes_per_task": classes_per_task,
        "samples_per_task": samples_per_task
        if samples_per_task is None or isinstance(samples_per_task, int)
        else list(samples_per_task),
        "train_sizes": sizes,
        "test_sizes": [int(y.numel()) for _, y in test],
        "task_classes": [list(c) for c in task_classes],
        "seed": seed,
    }
    return TaskSplit(
        train=tuple(train),
        test=tuple(test),
        task_classes=tuple(task_classes),
        num_classes=data.num_classes,
        protocol=protocol,
        dataset=data.name,
        data_source=data.source,
    )
