"""The engine: one batched forward, one ``autograd.grad``, and the Gram from the layer rules.

:func:`sample_gram` splits the parameters ``theta`` into layers with a closed-form rule
(:mod:`~avalanche_gss.gradients.registry`) and the rest
(:mod:`~avalanche_gss.gradients.fallback`), runs the model once on the whole batch with a
forward hook on each closed-form layer (its input, and its output's autograd edge), takes
the gradient of the summed loss with respect to those outputs, and lets each layer's rule
add its Gram contribution.

Scoring runs the model in eval mode (as the authors' code does), which also makes the
samples independent, so the gradient of the summed loss with respect to a layer output is
each sample's own output gradient. A module's parameters are assumed to be used only inside
its own ``forward`` (a module whose ``forward`` never runs but whose parameters get a gradient
is sent to ``torch.func``). Modules called several times are handled (their calls add up).

With task labels the model runs once per task group (see the package docstring). The Gram
stays exact across groups: a head that sample ``j`` never used has a zero gradient for
``j``, so ``<g_i, g_j>`` for samples of different tasks comes from the shared parameters
only. The closed forms place each call of a layer back in its rows of the batch (zeros
elsewhere); a layer called on only part of a group goes to ``torch.func``, which runs
``vmap`` within each group with the group's label unbatched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.graph import GradientEdge, get_gradient_edge

from .common import LossFn, _task_groups, add_outer, add_pairs, combined_rows, combining, resolve
from .fallback import add_fallback_gram
from .norm import require_running_stats
from .registry import BUILTIN_RULES, LayerRule, rule_for
from .state import eval_mode


@dataclass
class _Layer:
    """A module whose selected parameters have a closed-form Gram contribution."""

    module: nn.Module
    rule: LayerRule  # adds its Gram (registry)
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


def _plan(
    model: nn.Module, selected: list[nn.Parameter]
) -> tuple[list[_Layer], list[nn.Parameter]]:
    """Split ``selected`` into closed-form layers and parameters for the ``torch.func`` route."""
    wanted = {id(p) for p in selected}
    owners: dict[int, int] = {}
    candidates: list[tuple[nn.Module, dict[str, nn.Parameter]]] = []
    for module in model.modules():
        require_running_stats(module)
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
        rule = rule_for(module)
        shared = any(owners[id(p)] > 1 for p in own.values())
        if rule is None or shared or not own.keys() <= {"weight", "bias"}:
            fallback.update((id(p), p) for p in own.values())
        else:
            layers.append(_Layer(module, rule, "weight" in own, "bias" in own, list(own.values())))
    return layers, list(fallback.values())


def _add_layer_gram(out: Tensor, layer: _Layer, inputs: Sequence[Tensor],
                    douts: Sequence[Tensor | None], small: list[Tensor]) -> None:
    """Add one closed-form layer's Gram contribution, from its calls, to ``out``.

    Per-sample gradients that are only ``O(C)`` per sample (BatchNorm's) are appended to
    ``small`` instead, for one joint Gram product over all such layers. ``inputs`` and
    ``douts`` (one per call) cover all ``N`` rows of the batch; a call whose output got no
    gradient (``None``) is left out.
    """
    calls = [(a, d) for a, d in zip(inputs, douts, strict=True) if d is not None]
    if not calls:
        return
    if combined_rows() is None or layer.rule in BUILTIN_RULES:
        layer.rule(out, layer.module, calls, layer.weight, layer.bias, small)
        return
    # A rule of one's own adds to an (N, N) Gram: its term is combined here
    n = calls[0][0].shape[0]
    pairs = out.new_zeros(n, n)  # (N, N)
    own_small: list[Tensor] = []
    with combining(None):  # it adds the samples' own Gram, whatever it calls
        layer.rule(pairs, layer.module, calls, layer.weight, layer.bias, own_small)
    add_pairs(out, pairs)
    small.extend(own_small)


def _add_small_grams(out: Tensor, small: list[Tensor]) -> None:
    """Add the Gram of the ``O(C)`` per-sample gradients the rules set aside, in one product.

    :param out: the ``(N, N)`` Gram accumulator.
    :param small: per layer, ``(N, C_l)`` per-sample gradients (see :func:`_add_layer_gram`).
    """
    if small:
        add_outer(out, small[0] if len(small) == 1 else torch.cat(small, dim=1))  # (N, sum C)


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
        _add_small_grams(out, small)
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


def sample_gram(model: nn.Module, x: Tensor, y: Tensor, *, loss_fn: LossFn | None = None,
                params: Sequence[nn.Parameter] | None = None,
                task_labels: Tensor | None = None, combine: Tensor | None = None) -> Tensor:
    """Exact Gram matrix ``<g_i, g_j>`` of per-sample loss gradients (paper Eq. 2).

    ``g_i = d loss_fn(f(x_i), y_i) / d theta`` with ``theta`` the given parameters (default:
    all parameters with ``requires_grad``). One batched forward in eval mode, one
    ``torch.autograd.grad`` to the layer outputs, then the closed forms of the layer rules
    (:mod:`~avalanche_gss.gradients.registry`); parameters without one go through
    :func:`~avalanche_gss.gradients.oracle.per_sample_grad_vmap` (or
    :func:`~avalanche_gss.gradients.oracle.per_sample_grad_loop` if ``vmap`` cannot batch
    the model). Runs on ``x``'s device; the model's modes are restored and no ``.grad``,
    parameter or buffer is changed.

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
    :param combine: weights ``A``, shape ``(M, N)``: return the Gram of the ``M`` weighted
        sums ``h_m = sum_i A_mi g_i`` (a mean gradient of a group of samples, one sample's
        own...), ``A G A^T``, built from the sums where that is cheaper than the ``(N, N)``
        Gram (GSS-Greedy's group gradients); equal to ``A @ sample_gram(...) @ A.T`` up to
        rounding. ``None``: the samples' own Gram.
    :return: the Gram matrix, shape ``(N, N)`` (``(M, M)`` with ``combine``), in the
        gradients' dtype.
    """
    n = x.shape[0]
    if y.shape[0] != n:
        raise ValueError(f"x has {n} samples but y has {y.shape[0]}")
    loss_fn, selected = resolve(model, loss_fn, params)
    layers, fallback = _plan(model, selected)
    dtype = selected[0].dtype if selected else x.dtype
    if combine is not None:
        if combine.dim() != 2 or combine.shape[1] != n:
            raise ValueError(f"combine must have shape (M, {n}), got {tuple(combine.shape)}")
        combine = combine.to(device=x.device, dtype=dtype, non_blocking=True)  # no sync
    m = n if combine is None else combine.shape[0]
    gram = torch.zeros(m, m, dtype=dtype, device=x.device)  # (N, N) or (M, M)
    if n == 0 or not selected:
        return gram
    with combining(combine):
        if layers:
            fallback += _add_closed_form_grams(gram, model, x, y, loss_fn, layers, task_labels)
        if fallback:
            add_fallback_gram(gram, model, x, y, loss_fn, fallback, task_labels)
    return gram
