"""Per-sample gradients themselves: the loop oracle and the ``torch.func`` route.

:func:`per_sample_grad_loop` runs each sample alone through ``torch.autograd.grad``: slow,
and the reference the tests and benchmarks hold the engine to. :func:`per_sample_grad_vmap`
batches the same computation with ``torch.func`` (``functional_call`` + ``vmap(grad)``);
:func:`~avalanche_gss.gradients.engine.sample_gram` uses it for the parameters that have no
closed form (:mod:`~avalanche_gss.gradients.fallback`). Both take the arguments of
``sample_gram`` and return ``(N, P)`` gradients, the parameters concatenated in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .common import LossFn, _task_groups, resolve
from .state import eval_mode


def _flat_grads(grads: Sequence[Tensor | None], params: Sequence[nn.Parameter]) -> Tensor:
    """Concatenate gradients, with zeros for unused parameters, shape ``(P,)``."""
    return torch.cat(
        [
            (torch.zeros_like(p) if g is None else g).reshape(-1)
            for g, p in zip(grads, params, strict=True)
        ]
    )


def per_sample_grad_loop(model: nn.Module, x: Tensor, y: Tensor, *, loss_fn: LossFn | None = None,
                         params: Sequence[nn.Parameter] | None = None,
                         task_labels: Tensor | None = None) -> Tensor:
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
    loss_fn, selected = resolve(model, loss_fn, params)
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


def per_sample_grad_vmap(model: nn.Module, x: Tensor, y: Tensor, *, loss_fn: LossFn | None = None,
                         params: Sequence[nn.Parameter] | None = None,
                         task_labels: Tensor | None = None) -> Tensor:
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
    loss_fn, selected = resolve(model, loss_fn, params)
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
