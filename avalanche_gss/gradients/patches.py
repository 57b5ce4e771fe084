"""The Gram of a weight ``(C, K)`` applied to ``T`` patches per sample, shared by Linear and conv.

A layer that multiplies a weight ``W (C, K)`` with each of a sample's patches (the columns
of ``U_i (K, T)``: an ``nn.Linear`` applied over ``T`` positions, or an unfolded
convolution) and gets output gradients ``D_i (C, T)`` has the per-sample weight gradient
``gW_i = D_i U_i^T`` and bias gradient ``gb_i = D_i 1``. Their Gram takes one of two exact
routes, whichever a cost estimate (:func:`_weight_route`) says is cheaper:

* ``"pair"``: ``<gW_i, gW_j> = sum_pq (U_i^T U_j)_pq (D_i^T D_j)_pq``, never holding a
  per-sample gradient (with ``T = 1``, the Linear identity ``(a_i.a_j)(d_i.d_j)``);
* ``"materialise"`` (large feature maps, or convolution groups): the per-sample gradients
  ``D_i U_i^T`` are built in bounded chunks and multiplied.

Every temporary is at most ``_CHUNK_ELEMENTS`` floats; the convolution rule's own routes
read the same limit from this module.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .common import add_outer, add_pairs, add_upper_rows, combined_rows

# Largest temporary (in elements) the conv routes build at once: 2**24 floats = 64 MiB.
_CHUNK_ELEMENTS = 1 << 24


def _add_pair_sum_gram(out: Tensor, cols: Tensor, dout: Tensor) -> None:
    """Add ``sum_pq (U_i^T U_j)_pq (D_i^T D_j)_pq`` to ``out``, never forming ``D_i U_i^T``.

    The Gram is symmetric: a block of rows is multiplied with its own and the later samples
    only, and the earlier columns are copied from the blocks before it, which halves the
    products when the pairs do not fit in one block (one block: one full product, as ever).

    :param out: Gram accumulator, shape ``(N, N)`` (``(M, M)`` while combining).
    :param cols: input patches ``U``, shape ``(N, K, T)``.
    :param dout: output gradients ``D``, shape ``(N, C, T)``.
    """
    n, k, t = cols.shape
    u = cols.transpose(1, 2).reshape(n * t, k)  # (N*T, K)
    d = dout.transpose(1, 2).reshape(n * t, dout.shape[1])  # (N*T, C)
    rows = max(1, _CHUNK_ELEMENTS // (n * t * t))  # samples per block of rows
    pairs = out if combined_rows() is None else out.new_zeros(n, n)  # (N, N)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        prod = u[s * t : e * t] @ u[s * t :].T  # (b*T, (N-s)*T)
        prod.mul_(d[s * t : e * t] @ d[s * t :].T)  # (b*T, (N-s)*T)
        add_upper_rows(pairs, s, e, prod.view(e - s, t, n - s, t).sum(dim=(1, 3)))  # (b, N-s)
    if pairs is not out:
        add_pairs(out, pairs)


def _add_materialised_gram(out: Tensor, cols: Tensor, dout: Tensor) -> None:
    """Add the Gram of the per-sample weight gradients ``D_i U_i^T``, built in chunks of ``K``.

    :param out: Gram accumulator, shape ``(N, N)``.
    :param cols: input patches, shape ``(N, G, K, T)`` (``G`` convolution groups).
    :param dout: output gradients, shape ``(N, G, C, T)``.
    """
    n, g, k, _ = cols.shape
    step = max(1, _CHUNK_ELEMENTS // (n * g * dout.shape[2]))  # patch features per chunk
    for s in range(0, k, step):
        grads = dout @ cols[:, :, s : s + step].transpose(2, 3)  # (N, G, C, k_chunk)
        add_outer(out, grads.reshape(n, -1))  # (N, G*C*k_chunk)


def _weight_route(n: int, t: int, k: int, c: int, groups: int, m: int | None = None) -> str:
    """Pick the cheaper exact route for a weight ``(C, K)`` seen at ``T`` positions per sample.

    ``"pair"`` costs ``(N T)^2 (K + C)`` multiply-adds (pairwise patch products, memory
    ``O(N^2 T^2)`` in chunks); ``"materialise"`` costs ``N T C K + N^2 C K`` (per-sample
    gradients ``D_i U_i^T``, then their Gram), whose Gram term, a product with a short side of
    ``N``, is bound by memory traffic and so counted twice. With groups only the latter is
    implemented. When the Gram asked for is of ``M`` weighted sums of the samples' gradients
    (``m``), materialising costs ``N T C K + M N C K + 2 M^2 C K`` instead (the sums, then
    their Gram), and the pairs route the same as without them.
    """
    if t == 1 and groups == 1:
        return "pair"  # the Linear identity (a_i.a_j)(d_i.d_j): cheapest whatever N
    kg = k // groups
    pair_cost = (n * t) ** 2 * (kg + c // groups + 1)
    if m is None:
        materialise_cost = n * t * c * kg + 2 * n * n * c * kg
    else:
        materialise_cost = n * t * c * kg + m * n * c * kg + 2 * m * m * c * kg
    return "pair" if groups == 1 and pair_cost <= materialise_cost else "materialise"


def _add_patch_gram(
    out: Tensor, cols: Tensor, dout: Tensor, groups: int, weight: bool, bias: bool
) -> None:
    """Add the Gram of a weight ``(C, K)`` applied to patches (and of its bias) to ``out``.

    :param out: Gram accumulator, shape ``(N, N)``.
    :param cols: input patches, shape ``(N, K, T)``; channel-major ``K`` for convolutions.
    :param dout: output gradients, shape ``(N, C, T)``.
    :param groups: convolution groups (1 for ``nn.Linear``).
    :param weight: include the weight's term.
    :param bias: include the bias's term.
    """
    n, k, t = cols.shape
    c = dout.shape[1]
    if bias:
        add_outer(out, dout.sum(dim=2))  # (N, C)
    if not weight:
        return
    if _weight_route(n, t, k, c, groups, combined_rows()) == "pair":
        _add_pair_sum_gram(out, cols, dout)
    else:
        kg, cg = k // groups, c // groups
        _add_materialised_gram(out, cols.reshape(n, groups, kg, t), dout.reshape(n, groups, cg, t))


def add_calls_patch_gram(
    out: Tensor, cols: list[Tensor], douts: list[Tensor], groups: int, weight: bool, bias: bool
) -> None:
    """Add the patch Gram of a layer's calls, their patches side by side, to ``out``.

    A layer called several times has, per sample, the sum of its calls' gradients, i.e. the
    gradient of one call over all of their patches.

    :param out: Gram accumulator, shape ``(N, N)``.
    :param cols: per call, input patches, shape ``(N, K, T_call)``.
    :param douts: per call, output gradients, shape ``(N, C, T_call)``.
    :param groups: convolution groups (1 for ``nn.Linear``).
    :param weight: include the weight's term.
    :param bias: include the bias's term.
    """
    patches = cols[0] if len(cols) == 1 else torch.cat(cols, dim=2)  # (N, K, T)
    grads = douts[0] if len(douts) == 1 else torch.cat(douts, dim=2)  # (N, C, T)
    _add_patch_gram(out, patches, grads, groups, weight, bias)
