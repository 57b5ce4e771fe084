"""Cosines and group Grams from the engine's Gram, against the loop oracle."""

from __future__ import annotations

import pytest
import torch
from helpers.gradients import (
    MIXED_TARGETS,
    MIXED_TASKS,
    RTOL,
    SmallCNN,
    cosines,
    mt_simple_mlp,
    reference_grads,
    set_bn_stats,
)
from torch import Tensor
from torch.nn import functional as F

from avalanche_gss.gradients import (
    cosine_from_gram,
    cross_cosine,
    group_gram,
    sample_gram,
)
from avalanche_gss.models import MLP


def test_cross_cosine_matches_loop() -> None:
    torch.manual_seed(8)
    model = SmallCNN()
    set_bn_stats(model)
    xa, ya = torch.randn(3, 3, 8, 8), torch.randint(0, 5, (3,))
    xb, yb = torch.randn(5, 3, 8, 8), torch.randint(0, 5, (5,))
    cos = cross_cosine(model, xa, ya, xb, yb)
    ref = cosines(reference_grads(model, torch.cat([xa, xb]), torch.cat([ya, yb])))[:3, 3:]
    assert cos.shape == (3, 5)
    torch.testing.assert_close(cos.double(), ref, rtol=0, atol=RTOL)


def test_group_gram_matches_loop_group_means() -> None:
    # Given 8 samples in groups {0,1,2}, {3,4}, {5,6}, sample 7 left out, group 3 empty
    torch.manual_seed(9)
    model = MLP(20, (16,), 4)
    x, y = torch.randn(8, 20), torch.randint(0, 4, (8,))
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 2, -1])
    ref = reference_grads(model, x, y)  # (N, P)
    means = torch.stack([ref[ids == g].mean(0) for g in range(3)] + [torch.zeros_like(ref[0])])
    # When grouping the per-sample Gram by ids and by an explicit weight matrix
    gram = sample_gram(model, x, y)
    by_ids = group_gram(gram, ids, num_groups=4)
    weights = torch.zeros(2, 8)
    weights[0, :3] = 1 / 3  # group 0's mean
    weights[1, 7] = 1.0  # sample 7 alone
    by_weights = group_gram(gram, weights)
    # Then they equal the Gram of the loop's group-mean gradients
    scale = (ref @ ref.T).abs().max().item()
    torch.testing.assert_close(by_ids.double(), means @ means.T, rtol=RTOL, atol=RTOL * scale)
    rows = torch.stack([means[0], ref[7]])
    torch.testing.assert_close(by_weights.double(), rows @ rows.T, rtol=RTOL, atol=RTOL * scale)
    with pytest.raises(ValueError):
        group_gram(gram, ids, num_groups=2)


def test_cosine_from_gram_hand_computed_and_zero_norm() -> None:
    # Given gradients (2, 0), (1, 1.7320508) (60 degrees apart) and the zero vector
    g = torch.tensor([[2.0, 0.0], [1.0, 3.0**0.5], [0.0, 0.0]])
    cos = cosine_from_gram(g @ g.T)
    expected = torch.tensor([[1.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(cos, expected)


def test_zero_gradient_sample_has_cosine_zero() -> None:
    # Given a loss that ignores sample 2, whose gradient is therefore exactly zero
    torch.manual_seed(10)
    model = MLP(20, (16,), 4)
    x, y = torch.randn(4, 20), torch.randint(0, 4, (4,))
    weight = torch.tensor([1.0, 1.0, 0.0, 1.0])

    def loss_fn(logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits, target, reduction="none") * weight[: len(target)]

    gram = sample_gram(model, x, y, loss_fn=loss_fn)
    cos = cosine_from_gram(gram)
    assert torch.all(gram[2] == 0) and torch.all(cos[2] == 0) and torch.all(cos[:, 2] == 0)
    keep = [0, 1, 3]
    ref = reference_grads(model, x[keep], y[keep])
    torch.testing.assert_close(cos[keep][:, keep].double(), cosines(ref), rtol=0, atol=RTOL)


def test_cross_cosine_with_task_labels_matches_loop() -> None:
    model = mt_simple_mlp()
    x, y, t = torch.randn(10, 20), MIXED_TARGETS, MIXED_TASKS
    cos = cross_cosine(model, x[:4], y[:4], x[4:], y[4:], task_labels_a=t[:4], task_labels_b=t[4:])
    ref = cosines(reference_grads(model, x, y, task_labels=t))[:4, 4:]
    torch.testing.assert_close(cos.double(), ref, rtol=0, atol=RTOL)
    with pytest.raises(ValueError, match="both"):
        cross_cosine(model, x[:4], y[:4], x[4:], y[4:], task_labels_a=t[:4])
