"""Per-sample gradients read off a training step's own forward and backward pass.

:func:`~avalanche_gss.gradients.engine.sample_gram` runs the model once more to score
samples. A training step has already run it: its forward saw each layer's input ``a_i``
and its backward each layer output's gradient ``d_i``, and the closed forms of
:mod:`~avalanche_gss.gradients.registry` need nothing else. :class:`StepRecord` keeps those
two while the step runs (a forward hook on each closed-form layer and a gradient hook on
its output; no extra pass, no copy of a parameter), and :func:`step_gram` turns one or
several records into the Gram of all their samples' gradients, with the same layer rules.

What the Gram is. The step's loss is a *mean* (or any sum) of per-sample losses, so the
output gradient of sample ``i`` is ``w_i d loss_i / d z_i`` with the step's weight ``w_i``
(``1 / B`` for a mean): entry ``(i, j)`` is ``w_i w_j <g_i, g_j>``, the per-sample Gram up
to a positive factor per sample, exact for cosines (GSS's scores). The samples must be
independent in the step: a BatchNorm layer in train mode (batch statistics) mixes the
batch's samples in every output gradient, so it is refused. Samples of different records
are compared at the parameters of their own step: two records taken around one SGD step
compare gradients one step apart.

Every selected parameter must belong to a layer with a closed form (``nn.Linear``,
``nn.Conv1d``/``2d``, eval-mode BatchNorm) that the step calls on whole batches; any other
(a ``LayerNorm``, tied weights, a layer called with keywords) is refused in one line
naming it, since its per-sample gradient needs passes of its own
(:func:`~avalanche_gss.gradients.engine.sample_gram` then).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.hooks import RemovableHandle

from .common import _selected
from .engine import _add_layer_gram, _add_small_grams, _Layer, _plan

__all__ = ["StepRecord", "StepLayers", "step_gram", "step_problem"]


@dataclass
class _Calls:
    """One layer's calls during the recorded forward: inputs and (later) output gradients."""

    inputs: list[Tensor] = field(default_factory=list)
    douts: list[Tensor | None] = field(default_factory=list)


class StepLayers:
    """The layers a :class:`StepRecord` hooks, planned once for a model and its parameters.

    A rehearsal that records every step keeps one and hands it to each record; it stays
    valid while the model's parameters (and their shapes) stay the same (:attr:`key`).

    :param model: the network the steps train.
    :param params: the parameters ``theta`` whose gradients are compared; default all
        trainable ones.
    :raises ValueError: a selected parameter has no closed form (see the module docstring).
    """

    def __init__(self, model: nn.Module, params: Sequence[nn.Parameter] | None = None) -> None:
        selected = _selected(model, params)
        if not selected:
            raise ValueError(f"{type(model).__name__} has no trainable parameter to record")
        layers, fallback = _plan(model, selected)
        if fallback:
            owner = next(type(m).__name__ for m in model.modules()
                         for p in m._parameters.values() if p is not None
                         and any(p is q for q in fallback))
            raise ValueError(
                f"a training step's gradients have no closed form for {owner}'s parameters; "
                "score with the gradient engine's own pass instead")
        self.layers = layers
        self.key = self.key_of(model, params)

    @staticmethod
    def key_of(model: nn.Module, params: Sequence[nn.Parameter] | None = None) -> tuple[Any, ...]:
        """What the plan depends on: the model and its parameters' identities and shapes."""
        chosen = model.parameters() if params is None else params
        # a list, not a generator: see GradientScored._outputs (CPython's tuple free lists)
        return (id(model), tuple([(id(p), p.shape, p.requires_grad) for p in chosen]))


def _mixing(layers: Sequence[_Layer]) -> str | None:
    """Why the planned ``layers`` mix a step's samples (a BatchNorm in train mode), or ``None``."""
    for layer in layers:
        if isinstance(layer.module, _BatchNorm) and layer.module.training:
            return (f"{type(layer.module).__name__} is in train mode: its batch statistics "
                    "mix the samples of a step, so the step's gradients are not per sample")
    return None


def step_problem(model: nn.Module, params: Sequence[nn.Parameter] | None = None) -> str | None:
    """Why a training step of ``model`` cannot be recorded by :class:`StepRecord`, or ``None``.

    What :class:`StepRecord` refuses when it opens, asked without running a step: a
    selected parameter without a closed form, or a BatchNorm layer in train mode, in the
    modes ``model`` is in now (a training step runs in train mode: ``model.train()`` first
    to ask about one).

    :param model: the network the steps would train.
    :param params: the parameters ``theta`` whose gradients are compared; default all
        trainable ones.
    :return: one line naming the layer that cannot be recorded, or ``None``.
    """
    try:
        layers = StepLayers(model, params).layers
    except ValueError as err:
        return " ".join(str(err).split())
    return _mixing(layers)


class StepRecord:
    """Record the layer inputs and output gradients of one training step (a context manager).

    ``with StepRecord(model) as rec: loss = criterion(model(x), y)``, then
    ``loss.backward()`` (inside or after the block): :func:`step_gram` of ``rec`` is the
    Gram of the step's per-sample gradients (see the module docstring). Only the forward
    inside the block is recorded; the hooks are removed when it ends. Inputs are kept
    detached (no graph is held), output gradients as the backward computes them.

    :param model: the network the step trains.
    :param params: the parameters ``theta`` whose gradients are compared; default all
        trainable ones.
    :param layers: the model's :class:`StepLayers`, planned before (default: planned here).
    :raises ValueError: a selected parameter has no closed form, or a BatchNorm layer is in
        train mode (see the module docstring).
    """

    def __init__(self, model: nn.Module, params: Sequence[nn.Parameter] | None = None, *,
                 layers: StepLayers | None = None) -> None:
        self.layers = (layers or StepLayers(model, params)).layers
        self.n = -1  # samples of the recorded forward (the first recorded call's rows)
        self._calls = [_Calls() for _ in self.layers]
        self._handles: list[RemovableHandle] = []

    def __enter__(self) -> StepRecord:
        mixing = _mixing(self.layers)
        if mixing is not None:
            raise ValueError(mixing)
        for layer, calls in zip(self.layers, self._calls, strict=True):
            self._handles.append(layer.module.register_forward_hook(self._hook(calls)))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, calls: _Calls) -> Any:
        def capture(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if not args or not isinstance(args[0], Tensor) or not isinstance(output, Tensor):
                raise ValueError(f"{type(module).__name__} was called with keywords or "
                                 "returned no tensor; its step gradient cannot be recorded")
            rows = args[0].shape[0] if args[0].dim() else -1
            if self.n < 0:
                self.n = rows
            if rows != self.n:
                raise ValueError(f"{type(module).__name__} ran on {rows} rows of a "
                                 f"{self.n}-sample step; its step gradient cannot be recorded")
            if not output.requires_grad:
                return
            k = len(calls.inputs)
            calls.inputs.append(args[0].detach())
            calls.douts.append(None)

            def keep(grad: Tensor) -> None:
                calls.douts[k] = grad.detach()

            output.register_hook(keep)
        return capture

    def calls(self) -> list[list[tuple[Tensor, Tensor]]]:
        """Per layer, per call, ``(input, output gradient)``, once the backward has run.

        :raises RuntimeError: nothing was recorded, or a recorded output got no gradient
            (the backward has not run).
        """
        if self.n < 0:
            raise RuntimeError("nothing was recorded: no forward ran inside the block")
        out: list[list[tuple[Tensor, Tensor]]] = []
        for layer, calls in zip(self.layers, self._calls, strict=True):
            pairs = []
            for a, d in zip(calls.inputs, calls.douts, strict=True):
                if d is None:
                    raise RuntimeError(f"{type(layer.module).__name__}'s output got no "
                                       "gradient: run the step's backward first")
                pairs.append((a, d))
            out.append(pairs)
        return out


def step_gram(records: Sequence[StepRecord]) -> Tensor:
    """The Gram of the recorded steps' per-sample gradients, their samples in order.

    Rows ``0 .. n_1 - 1`` are the first record's samples, the next ``n_2`` the second's,
    and so on; entry ``(i, j)`` is ``w_i w_j <g_i, g_j>`` with each sample's weight in its
    step's loss (module docstring). The records must come from the same model and
    parameters selection, each layer called as often in each.

    :param records: one or more :class:`StepRecord` whose backward has run.
    :return: the ``(N, N)`` Gram, ``N`` the records' samples together, detached.
    :raises ValueError: the records differ in layers or in calls per layer.
    """
    if not records:
        raise ValueError("step_gram needs at least one record")
    first = records[0]
    per_record = [r.calls() for r in records]
    n = sum(r.n for r in records)
    for r in records[1:]:
        if [id(a.module) for a in r.layers] != [id(a.module) for a in first.layers]:
            raise ValueError("the records come from different models or parameters")
    dtype = next(iter(first.layers[0].module.parameters())).dtype
    device = per_record[0][0][0][0].device if per_record[0] and per_record[0][0] else None
    gram = torch.zeros(n, n, dtype=dtype, device=device)
    small: list[Tensor] = []
    with torch.no_grad():
        for i, layer in enumerate(first.layers):
            counts = {len(calls[i]) for calls in per_record}
            if len(counts) != 1:
                raise ValueError(f"{type(layer.module).__name__} ran {sorted(counts)} times in "
                                 "the records' steps; they cannot be compared")
            calls_of_layer = range(counts.pop())
            inputs = [torch.cat([calls[i][k][0] for calls in per_record]) for k in calls_of_layer]
            douts = [torch.cat([calls[i][k][1] for calls in per_record]) for k in calls_of_layer]
            _add_layer_gram(gram, layer, inputs, douts, small)
        _add_small_grams(gram, small)
    return gram
