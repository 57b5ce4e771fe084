"""Per-sample loss-gradient inner products: the one gradient engine every selector uses.

GSS scores samples by the cosine between their loss gradients
``g_i = d loss(f(x_i; theta), y_i) / d theta`` (paper Eq. 2 and the surrogate Eq. 7;
Alg. 1 line 3, Alg. 2 lines 6-7). :func:`sample_gram` returns the exact ``(N, N)`` Gram matrix
``<g_i, g_j>`` from one batched forward pass and one ``torch.autograd.grad`` call, with no
Python loop over samples and, for ``nn.Linear``, without ever holding a per-sample gradient:

* ``nn.Linear`` (input ``a``, output gradient ``d``): ``<gW_i, gW_j> = (a_i.a_j)(d_i.d_j)``
  and ``<gb_i, gb_j> = d_i.d_j``.
* ``nn.Conv1d``/``nn.Conv2d`` (unfolded patches ``U_i (K, T)``, output gradients
  ``D_i (C, T)``): ``<gW_i, gW_j> = sum_pq (U_i^T U_j)_pq (D_i^T D_j)_pq``, or, when a cost
  estimate says that is dearer (large feature maps), the layer's per-sample weight gradients
  ``D_i U_i^T`` are materialised in bounded chunks and multiplied (for stride-1 convolutions
  tap by tap from shifted views of the input, without unfolding it). On an accelerator the
  per-sample weight gradients of a convolution come from one weight-gradient convolution
  with the samples stacked as groups, which needs a kernel or two instead of dozens. Any
  stride, padding (mode), dilation and groups.
* BatchNorm (eval mode, running statistics): ``g_gamma_i = sum(d_i * xhat_i)``,
  ``g_beta_i = sum(d_i)`` over the non-channel dimensions.
* Any other parameter (LayerNorm, Embedding, custom modules, tied weights): ``torch.func``
  (``functional_call`` + ``vmap(grad)``) for those parameters only; if ``vmap`` cannot
  batch the model (data-dependent control flow, ``.item()``), a per-sample loop, with a
  ``RuntimeWarning``.

Scoring runs the model in eval mode (as the authors' code does), which also makes the
samples independent, so the gradient of the summed loss with respect to a layer output is
each sample's own output gradient. A module's parameters are assumed to be used only inside
its own ``forward`` (a module whose ``forward`` never runs but whose parameters get a gradient
is sent to ``torch.func``). Modules called several times are handled (their calls add up).
The engine never touches ``.grad``, parameters, buffers or the optimizer;
:func:`preserved_state` guards callers that do.

Multi-head (task-aware) models: every function that runs the model takes ``task_labels``, an
``(N,)`` integer tensor (:func:`cross_cosine` takes one per set of samples). Without it the
model is called as ``model(x)``; with it, the model is called as ``model(x, task_labels)``,
as Avalanche's ``avalanche_forward`` does for a ``MultiTaskModule``, once per group of
samples that share a task label (``model(x_g, t_g)`` with ``t_g`` that group's labels, all
equal), so every module inside sees whole groups. The Gram stays exact across groups: a head
that sample ``j`` never used has a zero gradient for ``j``, so ``<g_i, g_j>`` for samples of
different tasks comes from the shared parameters only. The closed forms place each call of
a layer back in its rows of the batch (zeros elsewhere); a layer called on only part of a
group goes to ``torch.func``, which runs ``vmap`` within each group with the group's label
unbatched. Which models get task labels is the caller's decision; this module imports
nothing from Avalanche.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.graph import GradientEdge, get_gradient_edge
from torch.nn import functional as F
from torch.nn.grad import conv2d_weight
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = [
    "LossFn",
    "sample_gram",
    "cosine_from_gram",
    "sample_cosine",
    "cross_cosine",
    "group_gram",
    "per_sample_grad_loop",
    "per_sample_grad_vmap",
    "preserved_state",
    "eval_mode",
]

LossFn = Callable[[Tensor, Tensor], Tensor]
"""Maps ``(logits (N, ...), targets (N, ...))`` to per-sample losses ``(N,)``."""

# Largest temporary (in elements) the conv routes build at once: 2**24 floats = 64 MiB.
_CHUNK_ELEMENTS = 1 << 24
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


def _cross_entropy(logits: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(logits, y, reduction="none")  # (N,)


cross_entropy_per_sample = _cross_entropy


@dataclass
class _Layer:
    """A module whose selected parameters have a closed-form Gram contribution."""

    module: nn.Module
    kind: str  # "linear", "conv" or "bn"
    weight: bool  # is module.weight selected
    bias: bool  # is module.bias selected
    params: list[nn.Parameter] = field(default_factory=list)  # the selected ones among them
    inputs: list[Tensor] = field(default_factory=list)  # one per call of the module
    versions: list[int] = field(default_factory=list)  # inputs' version counters at capture
    edges: list[GradientEdge] = field(default_factory=list)  # outputs' autograd edges
    opaque: bool = False  # a call whose input or output could not be captured
    # With task labels only: the rows of the batch that each captured call covers (None: all
    # of them, in order), and the task group being forwarded with its sample count (-1: no
    # task labels, calls are not checked).
    rows: list[Tensor | None] = field(default_factory=list)
    group: Tensor | None = None
    group_size: int = -1

    def capture(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        """Keep this call's input and its output's gradient edge (a forward hook)."""
        if not args or not isinstance(args[0], Tensor) or not isinstance(output, Tensor):
            self.opaque = True  # e.g. called with keywords: leave it to torch.func
        elif self.group_size >= 0 and (args[0].dim() == 0 or args[0].shape[0] != self.group_size):
            self.opaque = True  # a call on part of a task group: rows unknown, torch.func
        elif output.requires_grad:
            self.inputs.append(args[0])
            self.versions.append(args[0]._version)
            self.edges.append(get_gradient_edge(output))
            if self.group_size >= 0:
                self.rows.append(self.group)


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


def _scatter_calls(
    n: int,
    inputs: Sequence[Tensor],
    douts: Sequence[Tensor | None],
    rows: Sequence[Tensor | None],
) -> tuple[list[Tensor], list[Tensor | None]]:
    """Place each captured call of a layer in an ``N``-row batch, zeros for rows it did not see.

    The per-sample gradients of every closed form are bilinear in a sample's input and output
    gradient, so a zero output gradient gives a sample a zero contribution, as it should for a
    call that did not see it. Calls of different task groups cover disjoint rows, so the k-th
    call of each group (with equal shapes) share one ``N``-row call: a shared feature extractor,
    called once per group, becomes one call over the whole batch, and a head used by one group
    a single call whose other rows are zero.

    :param n: the batch size ``N``.
    :param inputs: per call, its input, shape ``(n_g, ...)``.
    :param douts: per call, its output gradient, shape ``(n_g, ...)`` (None: unused output).
    :param rows: per call, the indices of its rows in the batch, shape ``(n_g,)``.
    :return: the merged calls' inputs and output gradients, shape ``(N, ...)`` each.
    """
    slots: dict[tuple[Any, ...], tuple[Tensor, Tensor]] = {}
    seen: dict[int, int] = {}  # calls so far, per task group
    for a, d, r in zip(inputs, douts, rows, strict=True):
        if d is None:
            continue
        assert r is not None
        k = seen.get(id(r), 0)
        seen[id(r)] = k + 1
        key = (k, tuple(a.shape[1:]), tuple(d.shape[1:]), a.dtype, d.dtype)
        if key not in slots:
            slots[key] = (a.new_zeros((n, *a.shape[1:])), d.new_zeros((n, *d.shape[1:])))
        full_a, full_d = slots[key]
        full_a.index_copy_(0, r, a)
        full_d.index_copy_(0, r, d)
    return [a for a, _ in slots.values()], [d for _, d in slots.values()]


def _closed_form_kind(module: nn.Module) -> str | None:
    """Which identity applies to ``module``'s own parameters; None needs the fallback."""
    kind = type(module)  # exact types: a subclass may change ``forward``
    if kind is nn.Linear:
        return "linear"
    if kind is nn.Conv2d or kind is nn.Conv1d:
        return "conv"
    if kind in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
        return "bn"
    return None


def _plan(
    model: nn.Module, selected: list[nn.Parameter]
) -> tuple[list[_Layer], list[nn.Parameter]]:
    """Split ``selected`` into closed-form layers and parameters for the ``torch.func`` route."""
    wanted = {id(p) for p in selected}
    owners: dict[int, int] = {}
    candidates: list[tuple[nn.Module, dict[str, nn.Parameter]]] = []
    for module in model.modules():
        if isinstance(module, _BatchNorm) and module.running_mean is None:
            raise ValueError(
                "BatchNorm without running statistics normalises with batch statistics, so "
                "per-sample gradients are not defined; use track_running_stats=True"
            )
        own = {name: p for name, p in module._parameters.items() if p is not None}
        for p in own.values():
            owners[id(p)] = owners.get(id(p), 0) + 1
        own = {name: p for name, p in own.items() if id(p) in wanted}
        if own:
            candidates.append((module, own))
    missing = wanted - owners.keys()
    if missing:
        raise ValueError(f"{len(missing)} parameter(s) in `params` do not belong to the model")
    layers: list[_Layer] = []
    fallback: dict[int, nn.Parameter] = {}
    for module, own in candidates:
        kind = _closed_form_kind(module)
        shared = any(owners[id(p)] > 1 for p in own.values())
        if kind is None or shared or not own.keys() <= {"weight", "bias"}:
            fallback.update((id(p), p) for p in own.values())
        else:
            layers.append(_Layer(module, kind, "weight" in own, "bias" in own, list(own.values())))
    return layers, list(fallback.values())


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Put every submodule in eval mode and restore each one's own flag on exit.

    Scoring runs in eval mode, as the authors' code does: BatchNorm uses its running
    statistics (so samples stay independent and the statistics are not updated) and
    dropout is off.

    :param model: the network.
    """
    training = [m for m in model.modules() if m.training]
    if training:
        model.eval()
    try:
        yield
    finally:
        for module in training:  # the others were, and are, in eval mode
            module.training = True


def _add_pair_sum_gram(out: Tensor, cols: Tensor, dout: Tensor) -> None:
    """Add ``sum_pq (U_i^T U_j)_pq (D_i^T D_j)_pq`` to ``out``, never forming ``D_i U_i^T``.

    :param out: Gram accumulator, shape ``(N, N)``.
    :param cols: input patches ``U``, shape ``(N, K, T)``.
    :param dout: output gradients ``D``, shape ``(N, C, T)``.
    """
    n, k, t = cols.shape
    u = cols.transpose(1, 2).reshape(n * t, k)  # (N*T, K)
    d = dout.transpose(1, 2).reshape(n * t, dout.shape[1])  # (N*T, C)
    rows = max(1, _CHUNK_ELEMENTS // (n * t * t))  # samples per block of rows
    for s in range(0, n, rows):
        e = min(n, s + rows)
        prod = u[s * t : e * t] @ u.T  # (b*T, N*T)
        prod.mul_(d[s * t : e * t] @ d.T)  # (b*T, N*T)
        out[s:e] += prod.view(e - s, t, n, t).sum(dim=(1, 3))  # (b, N)


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
        flat = grads.reshape(n, -1)  # (N, G*C*k_chunk)
        out.addmm_(flat, flat.T)


def _weight_route(n: int, t: int, k: int, c: int, groups: int) -> str:
    """Pick the cheaper exact route for a weight ``(C, K)`` seen at ``T`` positions per sample.

    ``"pair"`` costs ``(N T)^2 (K + C)`` multiply-adds (pairwise patch products, memory
    ``O(N^2 T^2)`` in chunks); ``"materialise"`` costs ``N T C K + N^2 C K`` (per-sample
    gradients ``D_i U_i^T``, then their Gram), whose Gram term, a product with a short side of
    ``N``, is bound by memory traffic and so counted twice. With groups only the latter is
    implemented.
    """
    if t == 1 and groups == 1:
        return "pair"  # the Linear identity (a_i.a_j)(d_i.d_j): cheapest whatever N
    kg = k // groups
    pair_cost = (n * t) ** 2 * (kg + c // groups + 1)
    materialise_cost = n * t * c * kg + 2 * n * n * c * kg
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
        gb = dout.sum(dim=2)  # (N, C)
        out.addmm_(gb, gb.T)
    if not weight:
        return
    if _weight_route(n, t, k, c, groups) == "pair":
        _add_pair_sum_gram(out, cols, dout)
    else:
        kg, cg = k // groups, c // groups
        _add_materialised_gram(out, cols.reshape(n, groups, kg, t), dout.reshape(n, groups, cg, t))


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

    :param out: Gram accumulator, shape ``(N, N)``.
    :param calls: per call, padded input ``(N, Cin, Hp, Wp)`` and output gradient
        ``(N, C, Ho, Wo)``.
    :param kernel: kernel size ``(kh, kw)``.
    :param dilation: dilation ``(dil_h, dil_w)``.
    """
    n = out.shape[0]
    flat = []
    for xp, d in calls:
        wp = xp.shape[3]
        xf = F.pad(xp.flatten(2), (0, dilation[1] * (kernel[1] - 1)))  # (N, Cin, Hp*Wp + pad)
        df = F.pad(d, (0, wp - d.shape[3])).flatten(2)  # (N, C, Ho*Wp)
        flat.append((xf, df, wp))
    c, cin = calls[0][1].shape[1], calls[0][0].shape[1]
    step = max(1, _CHUNK_ELEMENTS // (n * cin))  # output channels per chunk
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
                g = grads.reshape(n, -1)  # (N, c_chunk*Cin)
                out.addmm_(g, g.T)


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

    :param out: Gram accumulator, shape ``(N, N)``.
    :param calls: per call, padded input ``(N, Cin, Hp, Wp)`` and output gradient
        ``(N, C, Ho, Wo)``.
    :param weight_shape: the weight's shape ``(C, Cin / groups, kh, kw)`` (or ``kw`` alone
        for ``Conv1d``, treated as a ``1 x L`` convolution).
    :param stride: stride ``(s_h, s_w)``.
    :param dilation: dilation ``(dil_h, dil_w)``.
    :param groups: the convolution's groups.
    """
    n = out.shape[0]
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
        flat = grads.reshape(n, -1)  # (N, block*Cin/groups*kh*kw)
        out.addmm_(flat, flat.T)


def _add_layer_gram(
    out: Tensor,
    layer: _Layer,
    inputs: Sequence[Tensor],
    douts: Sequence[Tensor | None],
    small: list[Tensor],
) -> None:
    """Add one closed-form layer's Gram contribution, from its calls, to ``out``.

    Per-sample gradients that are only ``O(C)`` per sample (BatchNorm's) are appended to
    ``small`` instead, for one joint Gram product over all such layers. ``inputs`` and
    ``douts`` (one per call) cover all ``N`` rows of the batch.
    """
    n = out.shape[0]
    calls = [(a, d) for a, d in zip(inputs, douts, strict=True) if d is not None]
    if not calls:
        return
    module = layer.module
    if layer.kind == "linear" and len(calls) == 1 and calls[0][0].dim() == 2:
        a, d = calls[0]  # (N, K), (N, C): (a_i.a_j)(d_i.d_j) + d_i.d_j
        if layer.weight:
            aa = a @ a.T  # (N, N)
            out.addcmul_(aa.add_(1.0) if layer.bias else aa, d @ d.T)  # bias: (a.a + 1)(d.d)
        else:
            out.addmm_(d, d.T)
        return
    if layer.kind == "bn":
        assert isinstance(module, _BatchNorm)
        small.append(_bn_sample_grads(module, calls, layer.weight, layer.bias))
        return
    cols_list, dout_list = [], []
    if layer.kind == "linear":
        for x, d in calls:
            cols_list.append(x.reshape(n, -1, x.shape[-1]).transpose(1, 2))  # (N, K, T)
            dout_list.append(d.reshape(n, -1, d.shape[-1]).transpose(1, 2))  # (N, C, T)
        groups = 1
    else:
        assert isinstance(module, (nn.Conv1d, nn.Conv2d))
        groups = module.groups
        padded = []
        for x, d in calls:
            xp, kernel, stride, dilation = _padded_conv_input(module, x)  # (N, Cin, Hp, Wp)
            padded.append((xp, d.reshape(n, d.shape[1], -1, d.shape[-1])))  # (N, C, Ho, Wo)
        if layer.bias:  # the same for every weight route: sum of d over positions and calls
            gb = sum(d.sum(dim=(2, 3)) for _, d in padded)  # (N, C)
            assert isinstance(gb, Tensor)
            out.addmm_(gb, gb.T)
        if not layer.weight:
            return
        t = sum(d.shape[2] * d.shape[3] for _, d in padded)
        k = module.in_channels * kernel[0] * kernel[1]
        smallest = n * (k // groups) * (1 if groups == 1 else module.out_channels)
        if _grouped_route(out.device, smallest):
            _add_grouped_conv_gram(out, padded, module.weight.shape, stride, dilation, groups)
            return
        shiftable = groups == 1 and stride == (1, 1)
        if shiftable and _weight_route(n, t, k, module.out_channels, 1) == "materialise":
            _add_shifted_conv_gram(out, padded, kernel, dilation)
            return
        for xp, d in padded:
            cols_list.append(F.unfold(xp, kernel, dilation=dilation, stride=stride))  # (N, K, T)
            dout_list.append(d.flatten(2))  # (N, C, T)
    cols = cols_list[0] if len(calls) == 1 else torch.cat(cols_list, dim=2)  # (N, K, T)
    dout = dout_list[0] if len(calls) == 1 else torch.cat(dout_list, dim=2)  # (N, C, T)
    bias = layer.bias and layer.kind == "linear"  # a convolution's bias was added above
    _add_patch_gram(out, cols, dout, groups, layer.weight, bias)


def _add_closed_form_grams(
    out: Tensor,
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    loss_fn: LossFn,
    layers: list[_Layer],
    task_labels: Tensor | None = None,
) -> list[nn.Parameter]:
    """Add the closed-form layers' Gram to ``out`` from one forward and one ``autograd.grad``.

    With ``task_labels``, one forward per task group (see the module docstring), and the
    calls are placed back in their rows of the batch before the closed forms run.

    :return: parameters that need the ``torch.func`` route after all: those of layers
        called in a way the hooks cannot capture (or, with task labels, on part of a task
        group), and those of layers whose ``forward`` never ran but that still get a
        gradient (used by another module).
    """
    n = x.shape[0]
    with eval_mode(model), torch.enable_grad():
        handles = [layer.module.register_forward_hook(layer.capture) for layer in layers]
        try:
            if task_labels is None:
                losses = loss_fn(model(x), y)  # (N,)
                if losses.shape != (n,):
                    raise ValueError(f"loss_fn must return shape ({n},), got {tuple(losses.shape)}")
                total = losses.sum()
            else:
                total = _grouped_loss(model, x, y, loss_fn, task_labels, layers)
        finally:
            for handle in handles:
                handle.remove()
        fallback = [p for layer in layers if layer.opaque for p in layer.params]
        layers = [layer for layer in layers if not layer.opaque]
        edges = [e for layer in layers for e in layer.edges]
        idle = [p for layer in layers if not layer.edges for p in layer.params]  # never ran
        inputs = edges + [get_gradient_edge(p) for p in idle]
        grads = torch.autograd.grad(total, inputs, allow_unused=True) if inputs else ()
    start = 0
    small: list[Tensor] = []  # per-sample gradients of O(C) parameters, one product at the end
    with torch.no_grad():  # the layer inputs carry the forward graph: record nothing on it
        for layer in layers:
            if any(a._version != v for a, v in zip(layer.inputs, layer.versions, strict=True)):
                raise RuntimeError(
                    f"the input of {type(layer.module).__name__} was modified in place after "
                    "the layer used it; per-sample gradients need the original input"
                )
            if layer.edges:
                calls: Sequence[Tensor] = layer.inputs
                douts: Sequence[Tensor | None] = grads[start : start + len(layer.edges)]
                start += len(layer.edges)
                if any(r is not None for r in layer.rows):  # task groups: back to N rows
                    calls, douts = _scatter_calls(n, calls, douts, layer.rows)
                _add_layer_gram(out, layer, calls, douts, small)
        if small:
            joint = small[0] if len(small) == 1 else torch.cat(small, dim=1)  # (N, sum of C)
            out.addmm_(joint, joint.T)
    return fallback + [p for p, g in zip(idle, grads[start:], strict=True) if g is not None]


def _grouped_loss(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    loss_fn: LossFn,
    task_labels: Tensor,
    layers: Sequence[_Layer],
) -> Tensor:
    """Sum of the per-sample losses, from one ``model(x_g, t_g)`` per task group.

    Tells every layer's hook which rows of the batch the group covers while it runs.
    """
    total: Tensor | None = None
    for rows, t in _task_groups(task_labels, x):
        xg, yg = (x, y) if rows is None else (x[rows], y[rows])
        for layer in layers:
            layer.group, layer.group_size = rows, xg.shape[0]
        losses = loss_fn(model(xg, t), yg)  # (n_g,)
        if losses.shape != (xg.shape[0],):
            raise ValueError(
                f"loss_fn must return shape ({xg.shape[0]},), got {tuple(losses.shape)}"
            )
        total = losses.sum() if total is None else total + losses.sum()
    assert total is not None, "an empty batch has no task groups"
    return total


def sample_gram(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    loss_fn: LossFn | None = None,
    params: Sequence[nn.Parameter] | None = None,
    task_labels: Tensor | None = None,
) -> Tensor:
    """Exact Gram matrix ``<g_i, g_j>`` of per-sample loss gradients (paper Eq. 2).

    ``g_i = d loss_fn(f(x_i), y_i) / d theta`` with ``theta`` the given parameters (default:
    all parameters with ``requires_grad``). One batched forward in eval mode, one
    ``torch.autograd.grad`` to the layer outputs, then the closed forms of the module
    docstring; parameters without one go through :func:`per_sample_grad_vmap` (or
    :func:`per_sample_grad_loop` if ``vmap`` cannot batch the model). Runs on ``x``'s
    device; the model's modes are restored and no ``.grad``, parameter or buffer is
    changed.

    :param model: the network; BatchNorm layers must keep running statistics.
    :param x: inputs, shape ``(N, ...)``.
    :param y: targets, shape ``(N, ...)``.
    :param loss_fn: maps ``(logits, y)`` to per-sample losses ``(N,)``; default
        cross-entropy with ``reduction="none"``.
    :param params: the parameters ``theta`` (each needs ``requires_grad``); default all
        trainable parameters.
    :param task_labels: integer task labels, shape ``(N,)``, for a multi-head (task-aware)
        model. ``None``: the model is called as ``model(x)``. Given: the model is called as
        ``model(x, task_labels)``, as Avalanche's ``avalanche_forward`` does for a
        ``MultiTaskModule``, once per group of samples sharing a label (so every module
        sees whole groups); the Gram stays exact across groups.
    :return: the Gram matrix, shape ``(N, N)``, in the gradients' dtype.
    """
    loss_fn = _cross_entropy if loss_fn is None else loss_fn
    n = x.shape[0]
    if y.shape[0] != n:
        raise ValueError(f"x has {n} samples but y has {y.shape[0]}")
    selected = _selected(model, params)
    layers, fallback = _plan(model, selected)
    dtype = selected[0].dtype if selected else x.dtype
    gram = torch.zeros(n, n, dtype=dtype, device=x.device)  # (N, N)
    if n == 0 or not selected:
        return gram
    if layers:
        fallback += _add_closed_form_grams(gram, model, x, y, loss_fn, layers, task_labels)
    if fallback:
        try:
            grads = per_sample_grad_vmap(
                model, x, y, loss_fn=loss_fn, params=fallback, task_labels=task_labels
            )  # (N, P)
        except RuntimeError as err:  # vmap cannot batch it: data-dependent control flow, ...
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            warnings.warn(
                f"torch.func.vmap cannot batch {type(model).__name__} ({reason}); its "
                "per-sample gradients are computed one sample at a time",
                RuntimeWarning,
                stacklevel=2,
            )
            grads = per_sample_grad_loop(
                model, x, y, loss_fn=loss_fn, params=fallback, task_labels=task_labels
            )
        gram.addmm_(grads, grads.T)
    return gram


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


def sample_cosine(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    loss_fn: LossFn | None = None,
    params: Sequence[nn.Parameter] | None = None,
    eps: float = 1e-12,
    task_labels: Tensor | None = None,
) -> Tensor:
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


def cross_cosine(
    model: nn.Module,
    x_a: Tensor,
    y_a: Tensor,
    x_b: Tensor,
    y_b: Tensor,
    *,
    loss_fn: LossFn | None = None,
    params: Sequence[nn.Parameter] | None = None,
    eps: float = 1e-12,
    task_labels_a: Tensor | None = None,
    task_labels_b: Tensor | None = None,
) -> Tensor:
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


def _flat_grads(grads: Sequence[Tensor | None], params: Sequence[nn.Parameter]) -> Tensor:
    """Concatenate gradients, with zeros for unused parameters, shape ``(P,)``."""
    return torch.cat(
        [
            (torch.zeros_like(p) if g is None else g).reshape(-1)
            for g, p in zip(grads, params, strict=True)
        ]
    )


def per_sample_grad_loop(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    loss_fn: LossFn | None = None,
    params: Sequence[nn.Parameter] | None = None,
    task_labels: Tensor | None = None,
) -> Tensor:
    """Compute per-sample gradients by a Python loop of ``torch.autograd.grad`` (the oracle).

    Each sample gets its own forward pass in eval mode (as :func:`sample_gram`) and its own
    ``autograd.grad``; ``.grad`` is not touched. Slow; kept for tests and benchmarks.

    :param model: the network.
    :param x: inputs, shape ``(N, ...)``.
    :param y: targets, shape ``(N, ...)``.
    :param loss_fn: per-sample loss, see :func:`sample_gram`.
    :param params: the parameters ``theta``, see :func:`sample_gram`.
    :param task_labels: task labels ``(N,)`` for a multi-head model: sample ``i`` is run as
        ``model(x[i:i+1], task_labels[i:i+1])``; ``None``: as ``model(x[i:i+1])``.
    :return: per-sample gradients, shape ``(N, P)``, parameters concatenated in order.
    """
    loss_fn = _cross_entropy if loss_fn is None else loss_fn
    selected = _selected(model, params)
    if task_labels is not None:
        _task_groups(task_labels, x)  # the same checks as the other routes
    rows = []
    with eval_mode(model), torch.enable_grad():
        for i in range(x.shape[0]):
            xi = x[i : i + 1]
            out = model(xi) if task_labels is None else model(xi, task_labels[i : i + 1])
            loss = loss_fn(out, y[i : i + 1]).sum()
            grads = torch.autograd.grad(loss, selected, allow_unused=True)
            rows.append(_flat_grads(grads, selected))  # (P,)
    if not rows:
        total = sum(p.numel() for p in selected)
        return torch.zeros(0, total, dtype=x.dtype, device=x.device)
    return torch.stack(rows)  # (N, P)


def per_sample_grad_vmap(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    loss_fn: LossFn | None = None,
    params: Sequence[nn.Parameter] | None = None,
    task_labels: Tensor | None = None,
) -> Tensor:
    """Per-sample gradients by ``torch.func`` (``functional_call`` + ``vmap(grad)``).

    Exact for any model that ``vmap`` supports; evaluated in eval mode like
    :func:`sample_gram`, whose fallback it is for parameters without a closed form. With
    task labels, ``vmap`` runs within each task group, the group's label passed unbatched
    (shape ``(1,)``, the same for every sample), so the model may use it for control flow
    (``torch.unique``, ``.item()``). Avalanche's ``MultiTaskModule.forward`` writes each
    sample's output into a fresh tensor in place, which ``vmap`` cannot batch (a
    ``RuntimeError``; :func:`sample_gram` then falls back to the loop).

    :param model: the network.
    :param x: inputs, shape ``(N, ...)``.
    :param y: targets, shape ``(N, ...)``.
    :param loss_fn: per-sample loss, see :func:`sample_gram`.
    :param params: the parameters ``theta``, see :func:`sample_gram`.
    :param task_labels: task labels ``(N,)`` for a multi-head model, see :func:`sample_gram`.
    :return: per-sample gradients, shape ``(N, P)``, parameters concatenated in order.
    """
    loss_fn = _cross_entropy if loss_fn is None else loss_fn
    selected = _selected(model, params)
    wanted = {id(p) for p in selected}
    names = {id(p): name for name, p in model.named_parameters() if id(p) in wanted}
    theta = {names[id(p)]: p.detach() for p in selected}

    def one_loss(theta: dict[str, Tensor], xi: Tensor, yi: Tensor, *task: Tensor) -> Tensor:
        logits = torch.func.functional_call(model, theta, (xi.unsqueeze(0), *task))  # (1, ...)
        return loss_fn(logits, yi.unsqueeze(0)).sum()

    if task_labels is None:
        with eval_mode(model):
            grads = torch.func.vmap(torch.func.grad(one_loss), in_dims=(None, 0, 0))(theta, x, y)
        return torch.cat([grads[names[id(p)]].reshape(x.shape[0], -1) for p in selected], dim=1)
    n = x.shape[0]
    total = sum(p.numel() for p in selected)
    dtype = selected[0].dtype if selected else x.dtype
    flat = torch.zeros(n, total, dtype=dtype, device=x.device)  # (N, P)
    batched = torch.func.vmap(torch.func.grad(one_loss), in_dims=(None, 0, 0, None))
    with eval_mode(model):
        for rows, t in _task_groups(task_labels, x):
            xg, yg = (x, y) if rows is None else (x[rows], y[rows])
            grads = batched(theta, xg, yg, t[:1])  # the group's label, unbatched
            block = torch.cat(
                [grads[names[id(p)]].reshape(xg.shape[0], -1) for p in selected], dim=1
            )  # (n_g, P)
            if rows is None:
                return block
            flat[rows] = block
    return flat


@contextmanager
def preserved_state(
    model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> Iterator[None]:
    """Restore parameters, ``.grad``, buffers, train/eval modes and optimizer state on exit.

    For callers that score with their own backward passes, or that must leave a training
    step untouched (the authors' scoring leaves its gradients in ``.grad``). Values are
    copied back in place, so tensors keep their identity; a ``.grad`` that was ``None``
    becomes ``None`` again.

    :param model: the network whose state to keep.
    :param optimizer: an optimizer whose state (e.g. momentum buffers) to keep.
    """
    params = list(model.parameters())
    values = [p.detach().clone() for p in params]
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    modes = [(m, m.training) for m in model.modules()]
    opt_state = None if optimizer is None else copy.deepcopy(optimizer.state_dict())
    try:
        yield
    finally:
        with torch.no_grad():
            for p, value, grad in zip(params, values, grads, strict=True):
                p.copy_(value)
                if grad is None:
                    p.grad = None
                elif p.grad is None or p.grad.shape != grad.shape:
                    p.grad = grad
                else:
                    p.grad.copy_(grad)
            for b, value in buffers:
                b.copy_(value)
        for module, training in modes:
            module.training = training
        if optimizer is not None and opt_state is not None:
            optimizer.load_state_dict(opt_state)
