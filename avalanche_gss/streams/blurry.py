"""Blurry task boundaries (paper appendix "Performance under blurry task boundary").

"For each task in a dataset, we keep the majority of the examples while we randomly swap a
small percentage of the examples with other tasks ... We keep 90% of the data for each
task, and introduce 10% of data from the other tasks" (blurry disjoint CIFAR-10, 1k samples
per task, buffer 500).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from ._split import TaskSplit, check_seed

__all__ = ["blurry_tasks"]


def blurry_tasks(split: TaskSplit, *, keep: float = 0.9, seed: int = 0) -> TaskSplit:
    """Blur the boundaries of ``split``: each task keeps ``keep`` of its samples.

    Each task keeps a random ``floor(keep * n_k)`` of its training samples; the rest of
    every task are pooled, shuffled and dealt back so that each task receives as many as
    it gave away, **all from other tasks**. Each task then holds exactly
    ``n_k - floor(keep * n_k)`` foreign samples (10% for ``keep=0.9``), as the paper states,
    and is reshuffled. Task sizes, test sets and ``task_classes`` are unchanged.

    The authors' ``cifar10_blurry.py`` deals the pool without that exclusion, so a task
    can get its own samples back (foreign share ``(1 - keep)(T - 1) / T``, 8% for 5 tasks)
    and drops the pool's remainder; here the paper's 10% is exact.

    :param split: the split to blur (disjoint, imbalanced or permuted).
    :param keep: fraction of each task's samples that stay, in ``(0, 1]``.
    :param seed: seeds which samples move, where they go and the new order.
    :return: the blurred split; ``protocol["blurry"]`` records ``keep``, ``seed`` and the
        foreign samples per task.
    :raises ValueError: if ``keep`` is out of range, there is a single task, or one task
        gives away more than all the others together (no foreign-only deal exists).
    """
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must lie in (0, 1], got {keep}")
    if split.n_tasks < 2:
        raise ValueError("blurring needs at least two tasks")
    gen = check_seed(seed)
    sizes = split.train_sizes
    kept_idx, out_idx = [], []
    for n in sizes:
        n_keep = math.floor(n * keep + 1e-9)
        perm = torch.randperm(n, generator=gen)
        kept_idx.append(perm[:n_keep])
        out_idx.append(perm[n_keep:])
    given = [int(o.numel()) for o in out_idx]
    total = sum(given)
    for k, g in enumerate(given):
        if g > total - g:
            raise ValueError(
                f"task {k} gives away {g} samples but the other tasks only {total - g}: "
                "it cannot receive that many foreign samples (imbalanced tasks cannot be "
                "blurred with a size-preserving swap)"
            )
    # Pool: (origin task, index within the task), shuffled; deal consecutive chunks.
    origin = torch.cat([torch.full((g,), k, dtype=torch.long) for k, g in enumerate(given)])
    within = torch.cat(out_idx) if total else torch.zeros(0, dtype=torch.long)
    order = torch.randperm(total, generator=gen)
    origin, within = origin[order], within[order]  # (P,)
    dest = torch.cat([torch.full((g,), k, dtype=torch.long) for k, g in enumerate(given)])
    dest = _repair_returns(origin, dest, gen)
    train = []
    for k, (x, y) in enumerate(split.train):
        parts_x, parts_y = [x[kept_idx[k]]], [y[kept_idx[k]]]
        for j in range(split.n_tasks):  # incoming samples, grouped by origin task
            sel = within[(dest == k) & (origin == j)]
            if sel.numel():
                xj, yj = split.train[j]
                parts_x.append(xj[sel])
                parts_y.append(yj[sel])
        xk, yk = torch.cat(parts_x), torch.cat(parts_y)
        shuffle = torch.randperm(yk.numel(), generator=gen)
        train.append((xk[shuffle], yk[shuffle]))
    protocol = {
        **split.protocol,
        "blurry": {"keep": keep, "seed": seed, "foreign_per_task": given},
    }
    return dataclasses.replace(split, train=tuple(train), protocol=protocol)


def _repair_returns(origin: Tensor, dest: Tensor, gen: torch.Generator) -> Tensor:
    """Swap destinations until no pooled sample goes back to its own task.

    A sample ``i`` dealt home (``dest[i] == origin[i] == t``) swaps destinations with a
    random sample ``j`` that is neither dealt to ``t`` nor from ``t``; both then sit in
    foreign tasks, and the number of home-dealt samples strictly drops. Such a ``j``
    exists whenever no task gave away more than all others together (checked by the caller).

    :param origin: ``(P,)`` origin task of each pooled sample.
    :param dest: ``(P,)`` destination task of each pooled sample (modified copy returned).
    :param gen: random source for the choice of ``j``.
    """
    dest = dest.clone()
    for i in (origin == dest).nonzero().flatten().tolist():
        t = int(dest[i])
        if int(origin[i]) != t:  # already repaired by an earlier swap
            continue
        candidates = ((dest != t) & (origin != t)).nonzero().flatten()
        j = int(candidates[torch.randint(candidates.numel(), (1,), generator=gen)])
        dest[i], dest[j] = dest[j].clone(), dest[i].clone()
    return dest
