"""The rule for every other parameter: per-sample gradients by ``torch.func``, or one by one.

Parameters without a closed form (LayerNorm, Embedding, custom modules, tied weights, a
layer called in a way the engine's hooks cannot capture) get their per-sample gradients
from :func:`~avalanche_gss.gradients.oracle.per_sample_grad_vmap` (``functional_call`` +
``vmap(grad)``), for those parameters only; if ``vmap`` cannot batch the model
(data-dependent control flow, ``.item()``, Avalanche's ``MultiTaskModule.forward``), from
:func:`~avalanche_gss.gradients.oracle.per_sample_grad_loop`, with a ``RuntimeWarning``.
Their Gram is added to the closed forms'.
"""

from __future__ import annotations

import warnings

from torch import Tensor, nn

from .common import LossFn, add_outer
from .oracle import per_sample_grad_loop, per_sample_grad_vmap


def add_fallback_gram(out: Tensor, model: nn.Module, x: Tensor, y: Tensor, loss_fn: LossFn,
                      params: list[nn.Parameter], task_labels: Tensor | None) -> None:
    """Add the Gram of ``params``' per-sample gradients to ``out``, by ``vmap`` or a loop.

    The ``RuntimeWarning`` of a fall back to the loop points at the caller of
    :func:`~avalanche_gss.gradients.engine.sample_gram`.

    :param out: Gram accumulator, shape ``(N, N)`` (``(M, M)`` while combining).
    :param model: the network.
    :param x: inputs, shape ``(N, ...)``.
    :param y: targets, shape ``(N, ...)``.
    :param loss_fn: per-sample loss.
    :param params: the parameters without a closed form.
    :param task_labels: task labels ``(N,)`` for a multi-head model, or ``None``.
    """
    try:
        grads = per_sample_grad_vmap(
            model, x, y, loss_fn=loss_fn, params=params, task_labels=task_labels
        )  # (N, P)
    except RuntimeError as err:  # vmap cannot batch it: data-dependent control flow, ...
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        warnings.warn(
            f"torch.func.vmap cannot batch {type(model).__name__} ({reason}); its "
            "per-sample gradients are computed one sample at a time",
            RuntimeWarning,
            stacklevel=3,  # sample_gram's caller
        )
        grads = per_sample_grad_loop(
            model, x, y, loss_fn=loss_fn, params=params, task_labels=task_labels
        )
    add_outer(out, grads)
