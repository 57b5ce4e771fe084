"""Models that grow: a checkpoint's grown heads rebuilt on a fresh model, and its optimizer.

Avalanche's ``IncrementalClassifier`` widens its ``classifier`` (and its ``active_units``
mask) when new classes arrive, and ``MultiHeadClassifier`` (e.g. in ``MTSimpleMLP``) adds
one head per new task label, each an ``IncrementalClassifier`` with its own
``active_units_T<task>`` mask. A fresh model has the initial shapes, so before a saved
state is loaded (and before its configuration is compared) :func:`grow_model` gives the
model the shapes of the saved tensors; the growth is part of the saved state, not a
difference of configuration. The optimizer then holds the grown parameters in the order
the run's optimizer held them (:func:`optimizer_layout`, :func:`restore_optimizer_params`),
as Avalanche's ``make_optimizer`` had arranged them, so the optimizer's state maps to the
same parameters.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
from avalanche.models import IncrementalClassifier, MultiHeadClassifier, MultiTaskModule
from torch import Tensor, nn

__all__ = ["grow_model", "model_layout", "optimizer_layout", "restore_model_layout",
           "restore_optimizer_params"]


def _prefix(name: str) -> str:
    return f"{name}." if name else ""


def grow_model(model: nn.Module, saved: Mapping[str, Tensor]) -> Callable[[], None]:
    """Grow the model's Avalanche heads to the shapes of a saved ``state_dict``.

    ``MultiHeadClassifier``: a head (and its ``active_units_T<task>`` mask) for every task
    the saved state has and the model lacks, built as Avalanche builds it, in the saved
    order. ``IncrementalClassifier``: ``classifier`` widened to the saved number of
    outputs, ``active_units`` to the saved length. Only growth is done (same input size,
    more outputs); anything else is left for the configuration check to report. The new
    tensors are placeholders on the module's device, to be overwritten by
    ``load_state_dict``; the global generators are left as they were.

    :param model: the fresh model (changed in place).
    :param saved: the saved model ``state_dict`` (or its tensors' shapes' source).
    :return: a function that undoes the growth (the model's previous modules and buffers
        back in place), for a checkpoint that is then refused. A growth that raises is
        undone before the error propagates.
    """
    undo: list[Callable[[], object]] = []

    def revert() -> None:
        for step in reversed(undo):
            step()

    try:
        with torch.random.fork_rng(devices=[]):  # new Linear layers draw initial weights
            for name, module in list(model.named_modules()):
                if isinstance(module, MultiHeadClassifier):
                    _add_heads(module, _prefix(name), saved, undo)
            for name, module in list(model.named_modules()):
                if isinstance(module, IncrementalClassifier):
                    _widen_classifier(module, _prefix(name), saved, undo)
                elif isinstance(module, MultiHeadClassifier):
                    for key in list(module._buffers):
                        if key.startswith("active_units_T"):
                            _widen_buffer(module, key, saved.get(_prefix(name) + key), undo)
    except BaseException:  # a saved state it cannot follow: the model as it was
        revert()
        raise
    return revert


def _add_heads(module: MultiHeadClassifier, prefix: str, saved: Mapping[str, Tensor],
               undo: list[Callable[[], object]]) -> None:
    """Add the heads ``saved`` has and ``module`` lacks (as ``MultiHeadClassifier.adaptation``)."""
    head_weight = re.compile(re.escape(prefix) + r"classifiers\.([^.]+)\.classifier\.weight")
    device = next(module.parameters()).device
    for key, tensor in saved.items():
        match = head_weight.fullmatch(key)
        if match is None or match.group(1) in module.classifiers:
            continue
        task = match.group(1)
        if tensor.dim() != 2 or tensor.shape[1] != module.in_features:
            continue  # not a head this module could have grown: the check reports it
        module.classifiers[task] = IncrementalClassifier(
            module.in_features, module.starting_out_features, masking=False, auto_adapt=False,
        ).to(device)
        undo.append(functools.partial(module.classifiers.pop, task))
        mask = saved.get(f"{prefix}active_units_T{task}")
        name = f"active_units_T{task}"
        if mask is not None and name not in module._buffers:
            module.register_buffer(name, torch.zeros(mask.shape, dtype=mask.dtype, device=device))
            undo.append(functools.partial(module._buffers.pop, name))


def _widen_classifier(module: IncrementalClassifier, prefix: str, saved: Mapping[str, Tensor],
                      undo: list[Callable[[], object]]) -> None:
    """Give ``module.classifier`` the saved number of outputs (as its ``adaptation``)."""
    old = module.classifier
    weight = saved.get(prefix + "classifier.weight")
    if (weight is not None and weight.dim() == 2 and weight.shape[1] == old.in_features
            and weight.shape[0] > old.out_features):
        module.classifier = nn.Linear(old.in_features, weight.shape[0],
                                      bias=old.bias is not None).to(old.weight.device,
                                                                    old.weight.dtype)
        undo.append(lambda: setattr(module, "classifier", old))
    _widen_buffer(module, "active_units", saved.get(prefix + "active_units"), undo)


def _widen_buffer(module: nn.Module, name: str, saved: Tensor | None,
                  undo: list[Callable[[], object]]) -> None:
    """Replace a 1-d mask buffer by zeros of the saved, longer, length."""
    old = module._buffers.get(name)
    if saved is None or old is None or saved.dim() != 1 or old.dim() != 1 \
            or saved.shape[0] <= old.shape[0]:
        return
    module._buffers[name] = torch.zeros(saved.shape, dtype=saved.dtype, device=old.device)
    undo.append(lambda: module._buffers.__setitem__(name, old))


def model_layout(model: nn.Module) -> dict[str, Any]:
    """What a model that grows holds outside its ``state_dict``: its task modules' counters.

    :return: ``{module name: {"max_class_label", "known_train_tasks_labels"}}`` for every
        Avalanche ``MultiTaskModule`` (the width of its outputs and the tasks it has seen).
    """
    return {name: {"max_class_label": int(module.max_class_label),
                   "known_train_tasks_labels": sorted(int(t) for t in
                                                      module.known_train_tasks_labels)}
            for name, module in model.named_modules() if isinstance(module, MultiTaskModule)}


def restore_model_layout(model: nn.Module, layout: Mapping[str, Any]) -> None:
    """Restore :func:`model_layout`'s output (modules it does not name are left alone)."""
    modules = dict(model.named_modules())
    for name, values in layout.items():
        module = modules.get(name)
        if isinstance(module, MultiTaskModule):
            module.max_class_label = int(values["max_class_label"])
            module.known_train_tasks_labels = {int(t) for t in values["known_train_tasks_labels"]}


def optimizer_layout(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[list[str]] | None:
    """The names of the parameters each of the optimizer's groups holds, in its order.

    :return: one list of parameter names per group; ``None`` if the optimizer holds a
        parameter that is not the model's.
    """
    names = {id(p): name for name, p in model.named_parameters()}
    if any(id(p) not in names for group in optimizer.param_groups for p in group["params"]):
        return None
    return [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]


def restore_optimizer_params(model: nn.Module, optimizer: torch.optim.Optimizer,
                             layout: list[list[str]] | None) -> None:
    """Make the optimizer's groups hold the model's parameters that ``layout`` names.

    After :func:`grow_model`, the optimizer of a fresh strategy still holds the parameters
    the heads had before they grew; this puts the grown ones in their place, in the order
    the saved optimizer had (its state is indexed by that order). Left as it is when
    ``layout`` is ``None`` or does not fit (the optimizer's ``load_state_dict`` then says
    why).

    :param model: the (grown) model.
    :param optimizer: the strategy's optimizer.
    :param layout: :func:`optimizer_layout`'s output, as saved.
    """
    named = dict(model.named_parameters())
    if layout is None or len(layout) != len(optimizer.param_groups) \
            or any(name not in named for group in layout for name in group):
        return
    for group, names in zip(optimizer.param_groups, layout, strict=True):
        group["params"] = [named[name] for name in names]
