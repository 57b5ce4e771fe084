"""Permuted streams (paper Sec. 5 "Benchmarks"): one fixed pixel permutation per task.

Permuted MNIST: 10 tasks, each the MNIST images under its own permutation of the pixels;
1,000 training samples per task (following GEM); tested on the whole test set under every
permutation. The authors leave task 0 unpermuted (``mnist_permutations.py``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._split import TaskSplit, check_seed
from .datasets import ArrayDataset

__all__ = ["permuted_tasks", "task_permutations"]


def task_permutations(
    n_tasks: int, dim: int, *, seed: int = 0, identity_first: bool = True
) -> Tensor:
    """Draw the ``n_tasks`` distinct feature permutations used by :func:`permuted_tasks`.

    :param n_tasks: number of permutations.
    :param dim: number of features per sample (``C * H * W`` for images).
    :param seed: seeds the permutations (own ``torch.Generator``).
    :param identity_first: make permutation 0 the identity (the authors' task 0).
    :return: ``(n_tasks, dim)`` int64; row ``k`` maps output feature ``j`` to input
        feature ``perm[k, j]``. Rows are pairwise distinct.
    :raises ValueError: if ``dim!`` < ``n_tasks`` (not enough distinct permutations).
    """
    if n_tasks < 1 or dim < 1:
        raise ValueError("n_tasks and dim must be >= 1")
    if dim < 20 and math.factorial(dim) < n_tasks:
        raise ValueError(f"{dim} features allow only {math.factorial(dim)} permutations")
    gen = check_seed(seed)
    perms: list[Tensor] = []
    seen: set[tuple[int, ...]] = set()
    while len(perms) < n_tasks:
        if identity_first and not perms:
            p = torch.arange(dim)
        else:
            p = torch.randperm(dim, generator=gen)
        key = tuple(p.tolist())
        if key in seen:  # redraw duplicates (only plausible for tiny dim)
            continue
        seen.add(key)
        perms.append(p)
    return torch.stack(perms)  # (n_tasks, dim)


def _permute(x: Tensor, perm: Tensor) -> Tensor:
    """Apply ``perm`` to the flattened features of every sample; keep ``x``'s shape."""
    return x.flatten(1)[:, perm].reshape(x.shape)


def permuted_tasks(
    data: ArrayDataset,
    *,
    n_tasks: int = 10,
    samples_per_task: int | None = 1000,
    seed: int = 0,
    identity_first: bool = True,
    permutation_seed: int | None = None,
) -> TaskSplit:
    """Permuted tasks: task ``k`` applies pixel permutation ``k`` to every sample.

    Permutations act on the flattened ``C * H * W`` features and the result is reshaped
    back, so image models still get images. Each task's training stream is an independent
    random subset of ``samples_per_task`` training samples (tasks may reuse a sample under
    different permutations, as in the authors' code); its test set is the whole test set
    under its permutation. Every task holds every class.

    :param data: the dataset.
    :param n_tasks: number of tasks (permutations).
    :param samples_per_task: training samples per task, or ``None`` for all of them.
    :param seed: seeds the subsets and their order (own ``torch.Generator``).
    :param identity_first: leave task 0 unpermuted, like the authors.
    :param permutation_seed: seeds the permutations; ``None`` uses ``seed``. The authors
        fix it (data seed 0) while the run seed varies.
    :return: the split; see :func:`task_permutations` for the permutations themselves.
    :raises ValueError: if ``samples_per_task`` exceeds the training set.
    """
    n_total = int(data.y_train.numel())
    n = n_total if samples_per_task is None else samples_per_task
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"samples_per_task must be a positive int or None, got {n!r}")
    if n > n_total:
        raise ValueError(
            f"samples_per_task={n} but {data.name} has only {n_total} training samples; "
            f"pass samples_per_task <= {n_total} (or None for all)"
        )
    p_seed = seed if permutation_seed is None else permutation_seed
    dim = math.prod(data.input_shape)
    perms = task_permutations(n_tasks, dim, seed=p_seed, identity_first=identity_first)
    gen = check_seed(seed)
    classes = data.classes
    train, test = [], []
    for k in range(n_tasks):
        pick = torch.randperm(n_total, generator=gen)[:n]  # random subset, random order
        train.append((_permute(data.x_train[pick], perms[k]), data.y_train[pick]))
        test.append((_permute(data.x_test, perms[k]), data.y_test.clone()))
    protocol = {
        "stream": "permuted",
        "n_tasks": n_tasks,
        "samples_per_task": samples_per_task,
        "train_sizes": [n] * n_tasks,
        "test_sizes": [int(data.y_test.numel())] * n_tasks,
        "identity_first": identity_first,
        "permutation_seed": p_seed,
        "seed": seed,
    }
    return TaskSplit(
        train=tuple(train),
        test=tuple(test),
        task_classes=tuple(classes for _ in range(n_tasks)),
        num_classes=data.num_classes,
        protocol=protocol,
        dataset=data.name,
        data_source=data.source,
    )
