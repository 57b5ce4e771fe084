"""Which closed-form rule adds a layer's Gram: one entry per module type.

A rule is called once per layer, after the engine's one forward and one ``autograd.grad``,
as ``rule(out, module, calls, weight, bias, small)``:

* ``out``: the ``(N, N)`` Gram accumulator, to add the layer's contribution to;
* ``module``: the layer;
* ``calls``: per call of the layer, its input and its output's gradient, ``N`` rows each
  (with task labels, calls are already placed back in their rows of the batch);
* ``weight`` / ``bias``: whether ``module.weight`` / ``module.bias`` are among the
  parameters ``theta`` (at least one is);
* ``small``: per-sample gradients ``(N, C_l)`` a rule may append instead of adding to
  ``out``, when they are only ``O(C)`` per sample: the engine adds their Gram in one
  product over all such layers.

Types are matched exactly (a subclass may change ``forward``); a module whose type has no
rule, or whose own parameters are not just ``weight`` and ``bias``, goes to
:mod:`~avalanche_gss.gradients.fallback`. A new layer rule is one file and one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn

from .conv import add_conv_gram
from .linear import add_linear_gram
from .norm import add_batch_norm_gram

LayerRule = Callable[[Tensor, nn.Module, Sequence[tuple[Tensor, Tensor]], bool, bool, list[Tensor]],
                     None]
"""``rule(out, module, calls, weight, bias, small)``, see the module docstring."""

RULES: dict[type[nn.Module], LayerRule] = {
    nn.Linear: add_linear_gram,
    nn.Conv1d: add_conv_gram,
    nn.Conv2d: add_conv_gram,
    nn.BatchNorm1d: add_batch_norm_gram,
    nn.BatchNorm2d: add_batch_norm_gram,
    nn.BatchNorm3d: add_batch_norm_gram,
}
"""The closed-form rule of each module type."""

BUILTIN_RULES = frozenset(RULES.values())
"""The rules above: they also add the Gram of weighted sums of the samples' gradients
(``sample_gram(combine=...)``) themselves; a rule of one's own adds the ``(N, N)`` Gram and
the engine combines it."""


def rule_for(module: nn.Module) -> LayerRule | None:
    """The closed-form rule for ``module``'s own parameters; ``None``: the fallback's.

    :param module: a module of the model being scored.
    :return: its type's entry in :data:`RULES`, matched exactly.
    """
    return RULES.get(type(module))  # exact types: a subclass may change ``forward``
