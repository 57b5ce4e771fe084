"""Guards of a model's state around scoring: eval mode, and a full restore on exit.

The engine never touches ``.grad``, parameters, buffers or the optimizer; it only switches
the model to eval mode (:func:`eval_mode`) while it runs. :func:`preserved_state` guards
callers that do change them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


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
