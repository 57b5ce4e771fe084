"""Cosines and group Grams from the engine's per-sample Gram.

GSS compares samples by the cosine of their loss gradients (paper Eq. 7): a Gram matrix
``<g_i, g_j>`` gives them all at once (:func:`cosine_from_gram`, :func:`sample_cosine`,
:func:`cross_cosine` between two sets), and the Gram of mini-batch (mean) gradients follows
from it too (:func:`group_gram`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .common import LossFn
from .engine import sample_gram


def cosine_from_gram(gram: Tensor, eps: float = 1e-12) -> Tensor:
    """Cosine similarities ``<g_i, g_j> / (|g_i| |g_j|)`` from a Gram matrix (paper Eq. 7).

    A gradient whose norm is at most ``eps`` (e.g. a sample the model already fits
    perfectly) has no direction: its cosine with every gradient, itself included, is 0.
    Results are clamped to ``[-1, 1]``.

    :param gram: Gram matrix, shape ``(N, N)``.
    :param eps: norms at or below this count as zero.
    :return: cosine matrix, shape ``(N, N)``.
    """
    sq_norms = gram.diagonal()  # (N,)
    inv = sq_norms.rsqrt().masked_fill_(sq_norms <= eps * eps, 0.0)  # (N,) 1/|g_i| or 0
    return (gram * inv[:, None] * inv[None, :]).clamp_(-1.0, 1.0)  # (N, N)


def sample_cosine(model: nn.Module, x: Tensor, y: Tensor, *, loss_fn: LossFn | None = None,
                  params: Sequence[nn.Parameter] | None = None, eps: float = 1e-12,
                  task_labels: Tensor | None = None) -> Tensor:
    """Pairwise gradient cosines of the samples (paper Eq. 7, Alg. 1 line 3).

    :param model: the network.
    :param x: inputs, shape ``(N, ...)``.
    :param y: targets, shape ``(N, ...)``.
    :param loss_fn: per-sample loss, see :func:`sample_gram`.
    :param params: the parameters ``theta``, see :func:`sample_gram`.
    :param eps: zero-norm threshold, see :func:`cosine_from_gram`.
    :param task_labels: task labels ``(N,)`` for a multi-head model, see :func:`sample_gram`.
    :return: cosine matrix, shape ``(N, N)``.
    """
    gram = sample_gram(
        model, x, y, loss_fn=loss_fn, params=params, task_labels=task_labels
    )  # (N, N)
    return cosine_from_gram(gram, eps)


def cross_cosine(model: nn.Module, x_a: Tensor, y_a: Tensor, x_b: Tensor, y_b: Tensor, *,
                 loss_fn: LossFn | None = None, params: Sequence[nn.Parameter] | None = None,
                 eps: float = 1e-12, task_labels_a: Tensor | None = None,
                 task_labels_b: Tensor | None = None) -> Tensor:
    """Gradient cosines between two sets of samples, from one joint pass (Alg. 2 line 7).

    :param model: the network.
    :param x_a: first inputs, shape ``(Na, ...)``.
    :param y_a: first targets, shape ``(Na, ...)``.
    :param x_b: second inputs, shape ``(Nb, ...)``.
    :param y_b: second targets, shape ``(Nb, ...)``.
    :param loss_fn: per-sample loss, see :func:`sample_gram`.
    :param params: the parameters ``theta``, see :func:`sample_gram`.
    :param eps: zero-norm threshold, see :func:`cosine_from_gram`.
    :param task_labels_a: task labels of the first set, shape ``(Na,)``, for a multi-head
        model (see :func:`sample_gram`); give both sets' labels or neither.
    :param task_labels_b: task labels of the second set, shape ``(Nb,)``.
    :return: cosine matrix, shape ``(Na, Nb)``.
    """
    if (task_labels_a is None) != (task_labels_b is None):
        raise ValueError("give task labels for both sets of samples or for neither")
    x = torch.cat([x_a, x_b])  # (Na+Nb, ...)
    y = torch.cat([y_a, y_b])  # (Na+Nb, ...)
    task_labels = (
        None
        if task_labels_a is None or task_labels_b is None
        else torch.cat([task_labels_a, task_labels_b])  # (Na+Nb,)
    )
    cos = sample_cosine(
        model, x, y, loss_fn=loss_fn, params=params, eps=eps, task_labels=task_labels
    )  # (Na+Nb, Na+Nb)
    return cos[: x_a.shape[0], x_a.shape[0] :]  # (Na, Nb)


def group_gram(gram: Tensor, groups: Tensor, *, num_groups: int | None = None) -> Tensor:
    """Gram of group gradients ``h_g = sum_i W_gi g_i`` from the per-sample Gram.

    GSS-Greedy compares a sample with ``n`` mini-batch gradients of buffer samples
    (Alg. 2 lines 6-7); a mini-batch gradient is the mean of its samples' gradients, so its
    inner products follow from the per-sample Gram: ``H = W K W^T``.

    :param gram: per-sample Gram ``K``, shape ``(N, N)``.
    :param groups: either integer group ids, shape ``(N,)``, with ids in
        ``[0, num_groups)`` (each group's gradient is the mean over its members; an empty
        group gets the zero gradient; a negative id leaves the sample out), or a weight
        matrix ``W`` of shape ``(G, N)`` (a row of ``1/|g|`` on the members is a mean, a
        one-hot row keeps a single sample).
    :param num_groups: number of groups for integer ids; default ``groups.max() + 1``.
    :return: the group Gram ``H``, shape ``(G, G)``.
    """
    if groups.dim() == 2:
        weights = groups.to(device=gram.device, dtype=gram.dtype)  # (G, N)
    elif groups.dim() == 1 and not groups.is_floating_point():
        top = int(groups.max()) + 1 if groups.numel() else 0
        g = top if num_groups is None else num_groups
        if top > g:
            raise ValueError(f"group id {top - 1} is not below num_groups={g}")
        ids = torch.arange(g, device=gram.device)  # (G,)
        onehot = (groups.to(gram.device)[None, :] == ids[:, None]).to(gram.dtype)  # (G, N)
        weights = onehot / onehot.sum(dim=1, keepdim=True).clamp_min(1)  # (G, N)
    else:
        raise ValueError("groups must be integer ids (N,) or a weight matrix (G, N)")
    if weights.shape[1] != gram.shape[0]:
        raise ValueError(f"groups cover {weights.shape[1]} samples, gram has {gram.shape[0]}")
    return weights @ gram @ weights.T  # (G, G)
