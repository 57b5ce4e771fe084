"""The ``nn.Conv1d`` / ``nn.Conv2d`` rule: the Gram of a convolution's per-sample gradients.

With unfolded patches ``U_i (K, T)`` and output gradients ``D_i (C, T)``, sample ``i``'s
weight gradient is ``D_i U_i^T``, and

``<gW_i, gW_j> = sum_pq (U_i^T U_j)_pq (D_i^T D_j)_pq``,

or, when a cost estimate says that is dearer (large feature maps), the layer's per-sample
weight gradients ``D_i U_i^T`` are materialised in bounded chunks and multiplied (both in
:mod:`~avalanche_gss.gradients.patches`); for stride-1 convolutions without groups they are
built tap by tap from shifted views of the input, without unfolding it
(:func:`_add_shifted_conv_gram`). On an accelerator the per-sample weight gradients of a
convolution come from one weight-gradient convolution with the samples stacked as groups,
which needs a kernel or two instead of dozens (:func:`_add_grouped_conv_gram`). The bias
gradient is ``D_i 1``, whatever the route. Any stride, padding (mode), dilation and groups;
a ``Conv1d`` is treated as a ``1 x L`` ``Conv2d``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.grad import conv2d_weight

from . import patches
from .common import add_outer, combined_rows
from .patches import _weight_route, add_calls_patch_gram

# Largest block of per-sample weight gradients (in elements) a convolution's accelerator
# route builds at once: 2**26 floats = 256 MiB.
_GROUPED_ELEMENTS = 1 << 26


def _grouped_route(device: torch.device, elements: int) -> bool:
    """Whether a convolution's per-sample weight gradients come from grouped convolutions.

    On an accelerator, one weight-gradient convolution with the samples as groups (a kernel
    or two per layer) beats unfolding (CUDA's ``im2col`` loops over samples) and the CPU's
    tap-by-tap route (``kh * kw`` launches), as long as its smallest block, ``elements``
    floats, fits in ``_GROUPED_ELEMENTS``. On the CPU, grouped convolutions are slow for
    small feature maps, so the routes of :func:`_weight_route` run there.
    """
    return device.type != "cpu" and elements <= _GROUPED_ELEMENTS



def _padded_conv_input(
    conv: nn.Conv1d | nn.Conv2d, x: Tensor
) -> tuple[Tensor, tuple[int, int], tuple[int, int], tuple[int, int]]:
    """Return the input as 4-D with the convolution's padding applied, and the 2-D geometry.

    :param conv: the convolution (``Conv1d`` is treated as a ``1 x L`` ``Conv2d``).
    :param x: its input, shape ``(N, Cin, H, W)`` or ``(N, Cin, L)``.
    :return: padded input ``(N, Cin, Hp, Wp)``, kernel, stride and dilation as pairs.
    """
    if isinstance(conv, nn.Conv1d):
        x = x.unsqueeze(2)  # (N, Cin, 1, L)
        kernel, stride, dilation = (1, *conv.kernel_size), (1, *conv.stride), (1, *conv.dilation)
        padding: str | tuple[int, ...] = (
            conv.padding if isinstance(conv.padding, str) else (0, *conv.padding)
        )
    else:
        kernel, stride, dilation = conv.kernel_size, conv.stride, conv.dilation
        padding = conv.padding if isinstance(conv.padding, str) else tuple(conv.padding)
    if isinstance(padding, str):  # "valid" or "same" (stride 1); torch pads extra on the right
        totals = [
            0 if padding == "valid" else d * (k - 1) for d, k in zip(dilation, kernel, strict=True)
        ]
        pads = [(tot // 2, tot - tot // 2) for tot in totals]
    else:
        pads = [(p, p) for p in padding]
    flat = [side for lo_hi in reversed(pads) for side in lo_hi]  # F.pad order: last dim first
    if any(flat):
        mode = "constant" if conv.padding_mode == "zeros" else conv.padding_mode
        x = F.pad(x, flat, mode=mode)  # (N, Cin, Hp, Wp)
    return x, (kernel[0], kernel[1]), (stride[0], stride[1]), (dilation[0], dilation[1])


def _add_shifted_conv_gram(
    out: Tensor,
    calls: Sequence[tuple[Tensor, Tensor]],
    kernel: tuple[int, int],
    dilation: tuple[int, int],
) -> None:
    """Add the Gram of a stride-1 convolution's per-sample weight gradients, without unfolding.

    With the padded input flattened row by row (width ``Wp``) and the output gradient padded
    to the same width with zeros, kernel tap ``(i, j)`` reads a contiguous slice of the input
    at offset ``i*dil_h*Wp + j*dil_w``, so each tap's per-sample gradient ``(C, Cin)`` is one
    batched matmul on views; the zero columns cancel the wrapped-around reads.

    :param out: Gram accumulator, shape ``(N, N)`` (``(M, M)`` while combining).
    :param calls: per call, padded input ``(N, Cin, Hp, Wp)`` and output gradient
        ``(N, C, Ho, Wo)``.
    :param kernel: kernel size ``(kh, kw)``.
    :param dilation: dilation ``(dil_h, dil_w)``.
    """
    n = calls[0][0].shape[0]
    flat = []
    for xp, d in calls:
        wp = xp.shape[3]
        xf = F.pad(xp.flatten(2), (0, dilation[1] * (kernel[1] - 1)))  # (N, Cin, Hp*Wp + pad)
        df = F.pad(d, (0, wp - d.shape[3])).flatten(2)  # (N, C, Ho*Wp)
        flat.append((xf, df, wp))
    c, cin = calls[0][1].shape[1], calls[0][0].shape[1]
    step = max(1, patches._CHUNK_ELEMENTS // (n * cin))  # output channels per chunk
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            for c0 in range(0, c, step):
                grads = None
                for xf, df, wp in flat:
                    off, length = i * dilation[0] * wp + j * dilation[1], df.shape[2]
                    tap = torch.bmm(
                        df[:, c0 : c0 + step], xf[:, :, off : off + length].transpose(1, 2)
                    )  # (N, c_chunk, Cin)
                    grads = tap if grads is None else grads.add_(tap)
                assert grads is not None
                add_outer(out, grads.reshape(n, -1))  # (N, c_chunk*Cin)


def _add_grouped_conv_gram(
    out: Tensor,
    calls: Sequence[tuple[Tensor, Tensor]],
    weight_shape: torch.Size,
    stride: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
) -> None:
    """Add the Gram of a convolution's per-sample weight gradients, built as grouped convs.

    Stacking the ``N`` samples along channels turns the per-sample weight gradients into
    the weight gradient of one convolution with ``N * groups`` groups
    (``torch.nn.grad.conv2d_weight``), of shape ``(N * C, Cin / groups, kh, kw)``. Without
    groups it is built for a block of output channels at a time, at most
    ``_GROUPED_ELEMENTS`` floats, and the blocks' Grams add up.

    :param out: Gram accumulator, shape ``(N, N)`` (``(M, M)`` while combining).
    :param calls: per call, padded input ``(N, Cin, Hp, Wp)`` and output gradient
        ``(N, C, Ho, Wo)``.
    :param weight_shape: the weight's shape ``(C, Cin / groups, kh, kw)`` (or ``kw`` alone
        for ``Conv1d``, treated as a ``1 x L`` convolution).
    :param stride: stride ``(s_h, s_w)``.
    :param dilation: dilation ``(dil_h, dil_w)``.
    :param groups: the convolution's groups.
    """
    n = calls[0][0].shape[0]
    c, cin_g = weight_shape[0], weight_shape[1]
    kernel = tuple(weight_shape[2:]) if len(weight_shape) == 4 else (1, weight_shape[2])
    per_channel = n * cin_g * kernel[0] * kernel[1]  # elements of one output channel's block
    step = c if groups > 1 else max(1, _GROUPED_ELEMENTS // per_channel)
    inputs = [xp.reshape(1, -1, xp.shape[2], xp.shape[3]) for xp, _ in calls]  # (1, N*Cin, ..)
    for c0 in range(0, c, step):
        block = min(c, c0 + step) - c0
        grads: Tensor | None = None
        for x1, (_, d) in zip(inputs, calls, strict=True):
            g = conv2d_weight(
                x1,
                (n * block, cin_g, *kernel),
                d[:, c0 : c0 + block].reshape(1, -1, d.shape[2], d.shape[3]),  # (1, N*b, ..)
                stride=stride,
                dilation=dilation,
                groups=n * groups,
            )  # (N*block, Cin/groups, kh, kw)
            grads = g if grads is None else grads.add_(g)
        assert grads is not None
        add_outer(out, grads.reshape(n, -1))  # (N, block*Cin/groups*kh*kw)


def add_conv_gram(out: Tensor, module: nn.Module, calls: Sequence[tuple[Tensor, Tensor]],
                  weight: bool, bias: bool, small: list[Tensor]) -> None:
    """Add an ``nn.Conv1d``'s or ``nn.Conv2d``'s Gram contribution, from its calls, to ``out``.

    :param out: Gram accumulator, shape ``(N, N)`` (``(M, M)`` while combining).
    :param module: the convolution.
    :param calls: per call, its input ``(N, Cin, *)`` and output gradient ``(N, C, *)``.
    :param weight: include the weight's term.
    :param bias: include the bias's term.
    :param small: unused (no ``O(C)`` per-sample gradients here).
    """
    n = calls[0][0].shape[0]
    assert isinstance(module, (nn.Conv1d, nn.Conv2d))
    groups = module.groups
    padded = []
    for x, d in calls:
        xp, kernel, stride, dilation = _padded_conv_input(module, x)  # (N, Cin, Hp, Wp)
        padded.append((xp, d.reshape(n, d.shape[1], -1, d.shape[-1])))  # (N, C, Ho, Wo)
    if bias:  # the same for every weight route: sum of d over positions and calls
        gb = sum(d.sum(dim=(2, 3)) for _, d in padded)  # (N, C)
        assert isinstance(gb, Tensor)
        add_outer(out, gb)
    if not weight:
        return
    t = sum(d.shape[2] * d.shape[3] for _, d in padded)
    k = module.in_channels * kernel[0] * kernel[1]
    smallest = n * (k // groups) * (1 if groups == 1 else module.out_channels)
    if _grouped_route(out.device, smallest):
        _add_grouped_conv_gram(out, padded, module.weight.shape, stride, dilation, groups)
        return
    shiftable = groups == 1 and stride == (1, 1)
    route = _weight_route(n, t, k, module.out_channels, 1, combined_rows())
    if shiftable and route == "materialise":
        _add_shifted_conv_gram(out, padded, kernel, dilation)
        return
    cols, douts = [], []
    for xp, d in padded:
        cols.append(F.unfold(xp, kernel, dilation=dilation, stride=stride))  # (N, K, T)
        douts.append(d.flatten(2))  # (N, C, T)
    add_calls_patch_gram(out, cols, douts, groups, weight, False)  # the bias was added above
