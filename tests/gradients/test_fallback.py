"""The ``torch.func`` fallback and its per-sample loop, for parameters no rule covers."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers.gradients import (
    MIXED_TARGETS,
    MIXED_TASKS,
    MultiHeadConvNet,
    NeedsFallback,
    RowwiseMultiHead,
    assert_each_parameter_close,
    assert_gram_close,
    reference_grads,
    set_bn_stats,
)
from torch import Tensor

from avalanche_gss.gradients import (
    fallback,
    per_sample_grad_vmap,
    sample_gram,
)


def test_fallback_modules_match_loop() -> None:
    torch.manual_seed(6)
    model = NeedsFallback()
    x, y = torch.randn(7, 6), torch.randint(0, 8, (7,))
    ref = reference_grads(model, x, y)
    assert_gram_close(sample_gram(model, x, y), ref)
    assert_each_parameter_close(model, x, y)
    torch.testing.assert_close(per_sample_grad_vmap(model, x, y).double(), ref, atol=1e-5, rtol=0)


def test_multi_task_module_without_closed_form_falls_back_to_the_loop() -> None:
    # Given a MultiTaskModule with a LayerNorm: its forward writes each task's output into a
    # fresh tensor in place, which vmap cannot batch
    torch.manual_seed(25)
    model = MultiHeadConvNet(layer_norm=True)
    set_bn_stats(model)
    x, y, t = torch.randn(10, 2, 6, 6), MIXED_TARGETS, MIXED_TASKS
    # When scoring: Then the LayerNorm's gradients come from the per-sample loop, with a
    # warning, and the Gram is still exact
    with pytest.warns(RuntimeWarning, match="one sample at a time"):
        gram = sample_gram(model, x, y, task_labels=t)
    assert_gram_close(gram, reference_grads(model, x, y, task_labels=t))


def test_task_groups_on_the_vmap_route_match_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a task-aware model vmap can batch, whose Linear runs on one row at a time
    torch.manual_seed(26)
    model = RowwiseMultiHead()
    x, y, t = torch.randn(10, 6), MIXED_TARGETS, MIXED_TASKS
    ref = reference_grads(model, x, y, task_labels=t)
    vmap, routed = fallback.per_sample_grad_vmap, []

    def spy(*args: object, **kwargs: object) -> Tensor:
        routed.extend(id(p) for p in kwargs["params"])  # type: ignore[attr-defined]
        return vmap(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fallback, "per_sample_grad_vmap", spy)
    # When scoring (any RuntimeWarning, i.e. a fall back to the loop, fails the test)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        gram = sample_gram(model, x, y, task_labels=t)
    # Then the Gram is exact, the LayerNorm and the Linear called on single rows (not whole
    # task groups) went to the torch.func route, and the heads stayed in closed form
    assert_gram_close(gram, ref)
    assert {id(p) for p in [*model.norm.parameters(), *model.rowwise.parameters()]} == set(routed)
    # and per_sample_grad_vmap with task labels gives the loop's per-sample gradients
    grads = vmap(model, x, y, task_labels=t)
    torch.testing.assert_close(grads.double(), ref, atol=1e-5, rtol=0)
