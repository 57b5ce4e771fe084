"""The BatchNorm rule: per-sample gradients of an eval-mode BatchNorm's ``gamma`` and ``beta``.

In eval mode a BatchNorm normalises with its running statistics, so samples stay
independent and, with output gradient ``d_i`` and normalised input ``xhat_i``,

``g_gamma_i = sum(d_i * xhat_i)`` and ``g_beta_i = sum(d_i)``

over the non-channel dimensions. These are only ``O(C)`` per sample, so they are built
explicitly and joined with every other BatchNorm's for one Gram product
(:func:`add_batch_norm_gram`). A BatchNorm without running statistics normalises with batch
statistics, which couples the samples: :func:`require_running_stats` refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules.batchnorm import _BatchNorm


def require_running_stats(module: nn.Module) -> None:
    """Raise if ``module`` is a BatchNorm without running statistics.

    :param module: any module of the model being scored.
    :raises ValueError: its per-sample gradients are not defined.
    """
    if isinstance(module, _BatchNorm) and module.running_mean is None:
        raise ValueError(
            "BatchNorm without running statistics normalises with batch statistics, so "
            "per-sample gradients are not defined; use track_running_stats=True"
        )


def _bn_sample_grads(
    module: _BatchNorm, calls: Sequence[tuple[Tensor, Tensor]], weight: bool, bias: bool
) -> Tensor:
    """Per-sample gradients of an eval-mode BatchNorm's ``gamma`` and/or ``beta``.

    ``g_gamma_i = sum(d_i * xhat_i)`` and ``g_beta_i = sum(d_i)`` over the non-channel
    dimensions, summed over the module's calls; ``xhat`` is normalised with the running
    statistics by the same kernel as the module's own forward.

    :param module: the BatchNorm layer.
    :param calls: per call, its input and output gradient, shape ``(N, C, *)`` each.
    :param weight: include ``gamma``.
    :param bias: include ``beta``.
    :return: per-sample gradients, shape ``(N, C)`` or ``(N, 2C)`` (gamma first).
    """
    total: Tensor | None = None
    for x, d in calls:
        n, c = d.shape[0], d.shape[1]
        parts = []
        if weight:
            xhat = F.batch_norm(x, module.running_mean, module.running_var, eps=module.eps)
            parts.append(torch.einsum("ncs,ncs->nc", d.reshape(n, c, -1), xhat.reshape(n, c, -1)))
        if bias:
            parts.append(d.reshape(n, c, -1).sum(dim=2))  # (N, C)
        grads = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (N, C or 2C)
        total = grads if total is None else total + grads
    assert total is not None
    return total


def add_batch_norm_gram(out: Tensor, module: nn.Module, calls: Sequence[tuple[Tensor, Tensor]],
                        weight: bool, bias: bool, small: list[Tensor]) -> None:
    """Append a BatchNorm's per-sample gradients to ``small``, for one joint Gram product.

    :param out: Gram accumulator, shape ``(N, N)``; the caller adds ``small``'s Gram to it.
    :param module: the BatchNorm (eval mode, running statistics).
    :param calls: per call, its input and output gradient, shape ``(N, C, *)`` each.
    :param weight: include ``gamma``.
    :param bias: include ``beta``.
    :param small: per-sample gradients of ``O(C)`` parameters, ``(N, C_l)`` each.
    """
    assert isinstance(module, _BatchNorm)
    small.append(_bn_sample_grads(module, calls, weight, bias))
