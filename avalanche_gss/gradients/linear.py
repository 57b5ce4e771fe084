"""The ``nn.Linear`` rule: the Gram of its per-sample weight and bias gradients, closed form.

With input ``a_i (K,)`` and output gradient ``d_i (C,)``, sample ``i``'s gradients are
``gW_i = d_i a_i^T`` and ``gb_i = d_i``, so

``<gW_i, gW_j> = (a_i.a_j)(d_i.d_j)`` and ``<gb_i, gb_j> = d_i.d_j``:

one ``(N, N)`` product each, without ever holding a per-sample gradient. A Linear applied
to more than one position per sample (input ``(N, ..., K)``), or called several times, is a
weight applied to patches (:mod:`~avalanche_gss.gradients.patches`).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from .common import add_outer, add_pairs, combined_rows
from .patches import add_calls_patch_gram


def add_linear_gram(out: Tensor, module: nn.Module, calls: Sequence[tuple[Tensor, Tensor]],
                    weight: bool, bias: bool, small: list[Tensor]) -> None:
    """Add an ``nn.Linear``'s Gram contribution, from its calls, to ``out``.

    :param out: Gram accumulator, shape ``(N, N)`` (``(M, M)`` while combining).
    :param module: the ``nn.Linear``.
    :param calls: per call, its input ``(N, ..., K)`` and output gradient ``(N, ..., C)``.
    :param weight: include the weight's term.
    :param bias: include the bias's term.
    :param small: unused (no ``O(C)`` per-sample gradients here).
    """
    n = calls[0][0].shape[0]
    if len(calls) == 1 and calls[0][0].dim() == 2:
        a, d = calls[0]  # (N, K), (N, C): (a_i.a_j)(d_i.d_j) + d_i.d_j
        if weight:
            aa = a @ a.T  # (N, N)
            if combined_rows() is None:
                out.addcmul_(aa.add_(1.0) if bias else aa, d @ d.T)  # bias: (a.a + 1)(d.d)
            else:
                add_pairs(out, (aa.add_(1.0) if bias else aa).mul_(d @ d.T))
        else:
            add_outer(out, d)
        return
    cols, douts = [], []
    for x, d in calls:
        cols.append(x.reshape(n, -1, x.shape[-1]).transpose(1, 2))  # (N, K, T)
        douts.append(d.reshape(n, -1, d.shape[-1]).transpose(1, 2))  # (N, C, T)
    add_calls_patch_gram(out, cols, douts, 1, weight, bias)
