"""``sample_gram(combine=A)``: the Gram of weighted sums of the samples' gradients, ``A G A^T``.

Checked against the float64 loop oracle's gradients combined by ``A`` (the same tolerance as
every Gram of the engine), on every layer rule and route, with task labels, with a rule of
one's own, and GSS-Greedy's scores from it against those from the per-sample Gram.
"""

from __future__ import annotations

import pytest
import torch
from helpers.gradients import (
    MIXED_TARGETS,
    MIXED_TASKS,
    RTOL,
    MultiHeadConvNet,
    NeedsFallback,
    OddConvs,
    SmallCNN,
    reference_grads,
    set_bn_stats,
)
from torch import Tensor, nn

from avalanche_gss.gradients import registry, sample_gram
from avalanche_gss.gradients.patches import _weight_route
from avalanche_gss.models import MLP, make_model
from avalanche_gss.selection.greedy import group_scores, memory_scores, memory_weights


def _assert_combined_close(gram: Tensor, ref_grads: Tensor, weights: Tensor) -> None:
    rows = weights.double() @ ref_grads  # (M, P)
    ref = rows @ rows.T  # (M, M)
    assert gram.shape == ref.shape
    scale = ref.abs().max().item()
    assert scale > 0
    torch.testing.assert_close(gram.double(), ref, rtol=RTOL, atol=RTOL * scale)


def _resnet() -> nn.Module:
    torch.manual_seed(3)
    model = make_model("resnet18", (3, 32, 32), 10)
    set_bn_stats(model)
    return model


CASES = {
    "mlp": (MLP, (784,)),
    "small-cnn": (SmallCNN, (3, 8, 8)),
    "odd-convs": (OddConvs, (2, 6, 6)),
    "fallback": (NeedsFallback, (6,)),
    # the reduced ResNet-18 on 32 x 32: every conv route of the CPU (pairs on the 4 x 4 maps,
    # materialised and tap by tap on the larger ones) and BatchNorm
    "resnet18": (_resnet, (3, 32, 32)),
}


@pytest.mark.parametrize("name", CASES)
def test_the_gram_of_combined_gradients_is_the_combination_of_the_loops(name: str) -> None:
    # Given a model, 12 samples, and 5 weighted sums of them (a mean of a group, a sample
    # alone, signed weights, a row of zeros)
    make, shape = CASES[name]
    torch.manual_seed(7)
    model = make()
    set_bn_stats(model)
    x, y = torch.randn(12, *shape), torch.randint(0, 3, (12,))
    weights = torch.zeros(5, 12)
    weights[0, :4] = 0.25
    weights[1, 5] = 1.0
    weights[2] = torch.linspace(-1.0, 1.0, 12)
    weights[4, 6:] = 1.0 / 6
    # When the engine builds their Gram: Then it is the oracle's gradients, combined
    gram = sample_gram(model, x, y, combine=weights)
    _assert_combined_close(gram, reference_grads(model, x, y), weights)
    assert torch.all(gram[3] == 0) and torch.all(gram[:, 3] == 0)  # no weight: nothing


def test_combined_gradients_across_task_groups_match_the_loop() -> None:
    torch.manual_seed(21)
    model = MultiHeadConvNet()
    set_bn_stats(model)
    x, y, t = torch.randn(10, 2, 6, 6), MIXED_TARGETS, MIXED_TASKS
    weights = torch.rand(4, 10)
    gram = sample_gram(model, x, y, task_labels=t, combine=weights)
    _assert_combined_close(gram, reference_grads(model, x, y, task_labels=t), weights)


def test_a_rule_of_ones_own_is_combined_by_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the Linear rule replaced by a rule of one's own, which adds to an (N, N) Gram
    seen: list[tuple[int, ...]] = []
    rule = registry.RULES[nn.Linear]

    def own(out: Tensor, module: nn.Module, *rest: object) -> None:
        seen.append(tuple(out.shape))
        rule(out, module, *rest)  # type: ignore[arg-type]

    monkeypatch.setitem(registry.RULES, nn.Linear, own)
    torch.manual_seed(16)
    model = MLP()
    x, y = torch.randn(6, 784), torch.randint(0, 10, (6,))
    weights = torch.rand(2, 6)
    # When combining: Then the rule saw (N, N) Grams, and the result is still A G A^T
    gram = sample_gram(model, x, y, combine=weights)
    assert seen and set(seen) == {(6, 6)}
    _assert_combined_close(gram, reference_grads(model, x, y), weights)


def test_a_combine_of_the_wrong_shape_is_refused() -> None:
    model = MLP()
    x, y = torch.randn(4, 784), torch.randint(0, 10, (4,))
    with pytest.raises(ValueError, match=r"combine must have shape \(M, 4\), got \(2, 5\)"):
        sample_gram(model, x, y, combine=torch.ones(2, 5))


def test_with_few_sums_of_many_samples_the_small_maps_are_materialised() -> None:
    # The ResNet's 4 x 4 stage, 10 new samples and 100 drawn ones in 10 groups: the pairs
    # route holds (N T)^2 products; 21 sums of them are cheaper built and multiplied
    n, t, k, c = 110, 16, 1440, 160
    assert _weight_route(n, t, k, c, 1) == "pair"
    assert _weight_route(n, t, k, c, 1, m=21) == "materialise"
    assert _weight_route(20, t, k, c, 1, m=21) == "pair"  # few samples: pairs stay cheaper


def test_gss_greedy_group_scores_from_the_sums_equal_those_from_the_per_sample_gram() -> None:
    # Given 5 new samples and 40 drawn ones, in the authors' groups of 10
    model = _resnet()
    x, y = torch.randn(45, 3, 32, 32), torch.randint(0, 10, (45,))
    weights = memory_weights(5, 40, 10)
    # When scoring from the combined Gram and from the per-sample one
    fast, fast_batch = group_scores(sample_gram(model, x, y, combine=weights), 5)
    slow, slow_batch = memory_scores(sample_gram(model, x, y), 5, group_size=10)
    # Then the scores agree to float32 round-off
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-4)
    assert slow_batch is not None and abs(fast_batch - slow_batch) < 1e-4
