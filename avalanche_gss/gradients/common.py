"""What every route of the engine shares: the loss, the parameters ``theta``, the task groups.

:func:`sample_gram <avalanche_gss.gradients.engine.sample_gram>` and the oracles of
:mod:`~avalanche_gss.gradients.oracle` take the same arguments (model, inputs, targets,
per-sample loss, parameters, task labels); :func:`resolve` turns the optional ones into
what the routes use, with the same checks for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

LossFn = Callable[[Tensor, Tensor], Tensor]
"""Maps ``(logits (N, ...), targets (N, ...))`` to per-sample losses ``(N,)``."""


def cross_entropy_per_sample(logits: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy of each sample, unreduced: the default loss of every route.

    :param logits: class scores, shape ``(N, C)``.
    :param y: integer targets, shape ``(N,)``.
    :return: per-sample losses, shape ``(N,)``.
    """
    return F.cross_entropy(logits, y, reduction="none")  # (N,)


def _selected(model: nn.Module, params: Sequence[nn.Parameter] | None) -> list[nn.Parameter]:
    """Return the parameters theta, in order and without duplicates."""
    if params is None:
        return [p for p in model.parameters() if p.requires_grad]
    chosen: dict[int, nn.Parameter] = {}
    for p in params:
        if not p.requires_grad:
            raise ValueError("every parameter in `params` must have requires_grad=True")
        chosen.setdefault(id(p), p)
    return list(chosen.values())


def resolve(
    model: nn.Module, loss_fn: LossFn | None, params: Sequence[nn.Parameter] | None
) -> tuple[LossFn, list[nn.Parameter]]:
    """The loss and the parameters ``theta`` a route differentiates, from its arguments.

    :param model: the network.
    :param loss_fn: per-sample loss; ``None``: :func:`cross_entropy_per_sample`.
    :param params: the parameters ``theta`` (each needs ``requires_grad``); ``None``: all
        trainable parameters of ``model``.
    :return: the loss, and ``theta`` in order and without duplicates.
    """
    return cross_entropy_per_sample if loss_fn is None else loss_fn, _selected(model, params)


_TaskGroup = tuple[Tensor | None, Tensor]  # (rows of the batch, or None for all; labels)


def _task_groups(task_labels: Tensor, x: Tensor) -> list[_TaskGroup]:
    """Split a batch by task label, in increasing label order.

    :param task_labels: integer task labels, shape ``(N,)``.
    :param x: the inputs, shape ``(N, ...)``; the rows live on its device.
    :return: per group, the indices of its rows on ``x``'s device (``None`` when one label
        covers the whole batch: no indexing needed) and its labels, shape ``(n_g,)``.
    """
    n = x.shape[0]
    if task_labels.shape != (n,):
        raise ValueError(f"task_labels must have shape ({n},), got {tuple(task_labels.shape)}")
    kind = task_labels.dtype
    if kind.is_floating_point or kind.is_complex or kind == torch.bool:
        raise ValueError(f"task_labels must be an integer tensor, got {kind}")
    if n == 0:
        return []
    _, inverse, counts = torch.unique(task_labels, return_inverse=True, return_counts=True)
    if counts.shape[0] == 1:
        return [(None, task_labels)]
    order = torch.argsort(inverse, stable=True)  # rows grouped by label, in batch order
    return [(rows.to(x.device), task_labels[rows]) for rows in order.split(counts.tolist())]


# The rows of the gradients a Gram is asked for, when they are weighted sums of the samples'
# (``sample_gram(combine=A)``); set by the engine for the duration of one call, read by the
# built-in layer rules through the helpers below (a rule of one's own never sees it).
_COMBINE: ContextVar[Tensor | None] = ContextVar("avalanche_gss_gram_combine", default=None)


@contextmanager
def combining(weights: Tensor | None) -> Iterator[None]:
    """Within the block, the layer rules add the Gram of ``weights @ g`` (``None``: of ``g``)."""
    token = _COMBINE.set(weights)
    try:
        yield
    finally:
        _COMBINE.reset(token)


def combined_rows() -> int | None:
    """``M``, the rows of the combined gradients being accumulated; ``None``: the samples'."""
    weights = _COMBINE.get()
    return None if weights is None else weights.shape[0]


_TRIANGLE_ROWS = 512
_TRIANGLE_WIDTH = 4096
_TRIANGLE_BLOCKS = 8


def _add_symmetric_product(out: Tensor, grads: Tensor) -> None:
    """Add ``grads @ grads.T`` to ``out``, multiplying only the blocks on and above the diagonal.

    From ``_TRIANGLE_ROWS`` rows of at least ``_TRIANGLE_WIDTH`` features (a convolution's
    per-sample gradients over many samples: GSS-Clust's union of buffer and recent samples)
    the rows are cut into ``_TRIANGLE_BLOCKS`` blocks and each block is multiplied with
    itself and the later rows only, the rest copied by symmetry: 9/16 of the products.
    Smaller products take one ``addmm`` as before (and give the same bits as before).
    """
    n, width = grads.shape
    if n < _TRIANGLE_ROWS or width < _TRIANGLE_WIDTH:
        out.addmm_(grads, grads.T)
        return
    rows = -(-n // _TRIANGLE_BLOCKS)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        add_upper_rows(out, s, e, grads[s:e] @ grads[s:].T)  # (b, N-s)


def add_upper_rows(out: Tensor, s: int, e: int, block: Tensor) -> None:
    """Add rows ``s:e`` of a symmetric term, from column ``s`` on, and their mirror image.

    :param out: the symmetric accumulator, shape ``(N, N)``.
    :param s: the block's first row.
    :param e: one past its last row.
    :param block: the term's rows ``s:e``, columns ``s:``, shape ``(e - s, N - s)``; the
        later rows' columns ``s:e`` are its transpose.
    """
    out[s:e, s:] += block
    out[e:, s:e] += block[:, e - s :].T


def add_outer(out: Tensor, grads: Tensor) -> None:
    """Add the Gram of per-sample gradients ``grads (N, P)`` to ``out``.

    ``out`` is ``(N, N)``, or, while :func:`combining` weights ``A (M, N)``, ``(M, M)`` and
    gets the Gram of the combined gradients ``A @ grads``.
    """
    weights = _COMBINE.get()
    if weights is None:
        _add_symmetric_product(out, grads)
    else:
        rows = weights @ grads  # (M, P)
        out.addmm_(rows, rows.T)


def add_pairs(out: Tensor, pairs: Tensor) -> None:
    """Add a per-sample Gram term ``pairs (N, N)`` to ``out`` (``A pairs A^T`` when combining)."""
    weights = _COMBINE.get()
    if weights is None:
        out.add_(pairs)
    else:
        out.add_(weights @ pairs @ weights.T)
