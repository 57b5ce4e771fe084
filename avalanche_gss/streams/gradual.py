"""Gradual drift between tasks: each task blends into the next over a window.

Not a protocol of the paper: a stream whose boundaries are neither sharp (disjoint) nor
blurred throughout (:mod:`.blurry`), but ramps. Around each boundary the last samples of
one task and the first of the next are interleaved so that the share of the next task's
samples grows linearly across the window, from none to all.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ._split import TaskSplit, check_seed

__all__ = ["gradual_tasks"]


def check_window(window: float) -> float:
    """Return ``window`` if it is a share in ``(0, 1]``; else raise one line naming it.

    :param window: the share of the smaller of two neighbouring tasks that blends.
    """
    if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 < window <= 1:
        raise ValueError(f"window must be a number in (0, 1], got {window!r}")
    return float(window)


def gradual_tasks(split: TaskSplit, *, window: float = 0.5, seed: int = 0) -> TaskSplit:
    """Let each task of ``split`` drift into the next over a window of samples.

    At the boundary of tasks ``k`` and ``k + 1``, ``h = floor(window * min(n_k, n_{k+1}) / 2)``
    samples on each side (the last ``h`` of task ``k``, the first ``h`` of task ``k + 1``)
    are interleaved: placed by random keys whose densities ramp linearly (``1 - sqrt(u)``
    for task ``k``'s, ``sqrt(u)`` for task ``k + 1``'s, ``u`` uniform), so the share of
    the next task's samples grows from 0 to 1 across the ``2h`` positions. The first ``h``
    positions stay in task ``k``, the rest in task ``k + 1``: task sizes, test sets and
    ``task_classes`` are unchanged, and with ``window <= 1`` the two windows of a task
    never overlap. Samples outside the windows keep their places.

    :param split: the split to blend (at least two tasks).
    :param window: share of the smaller neighbouring task that blends, in ``(0, 1]``:
        ``1`` makes the whole stream one ramp from task to task.
    :param seed: seeds the keys (own ``torch.Generator``).
    :return: the drifting split; ``protocol["gradual"]`` records ``window``, ``seed`` and
        ``h`` of each boundary.
    :raises ValueError: ``window`` out of range, or a single task.
    """
    window = check_window(window)
    if split.n_tasks < 2:
        raise ValueError("gradual drift needs at least two tasks")
    gen = check_seed(seed)
    train = list(split.train)
    blended = []
    for k in range(split.n_tasks - 1):
        (xa, ya), (xb, yb) = train[k], train[k + 1]
        h = math.floor(window * min(ya.numel(), yb.numel()) / 2)
        blended.append(h)
        if h == 0:
            continue
        xw, yw = torch.cat([xa[-h:], xb[:h]]), torch.cat([ya[-h:], yb[:h]])  # (2h, ...)
        u = torch.rand(2 * h, generator=gen).sqrt()
        keys = torch.cat([1 - u[:h], u[h:]])  # earlier task's keys dense early, next's late
        order = torch.argsort(keys, stable=True)
        xw, yw = xw[order], yw[order]
        train[k] = (torch.cat([xa[:-h], xw[:h]]), torch.cat([ya[:-h], yw[:h]]))
        train[k + 1] = (torch.cat([xw[h:], xb[h:]]), torch.cat([yw[h:], yb[h:]]))
    protocol = {**split.protocol,
                "gradual": {"window": window, "seed": seed, "blended_per_boundary": blended}}
    return dataclasses.replace(split, train=tuple(train), protocol=protocol)
