"""The engine's shared pieces: the default per-sample loss and the validation of task labels."""

from __future__ import annotations

import pytest
import torch
from helpers.gradients import (
    mt_simple_mlp,
)
from torch.nn import functional as F

from avalanche_gss.gradients import (
    cross_entropy_per_sample,
    per_sample_grad_loop,
    sample_gram,
)
from avalanche_gss.models import MLP


def test_default_loss_is_the_public_per_sample_cross_entropy() -> None:
    # Given logits and targets: cross_entropy_per_sample is the unreduced cross-entropy
    torch.manual_seed(15)
    logits, labels = torch.randn(5, 4), torch.randint(0, 4, (5,))
    expected = F.cross_entropy(logits, labels, reduction="none")
    assert torch.equal(cross_entropy_per_sample(logits, labels), expected)
    # and it is the engine's default loss: passing it changes nothing, bit for bit
    model = MLP()
    x, y = torch.randn(6, 784), torch.randint(0, 10, (6,))
    assert torch.equal(sample_gram(model, x, y, loss_fn=cross_entropy_per_sample),
                       sample_gram(model, x, y))


def test_invalid_task_labels_raise() -> None:
    model = mt_simple_mlp()
    x, y = torch.randn(4, 20), torch.tensor([0, 1, 2, 1])
    with pytest.raises(ValueError, match="shape"):
        sample_gram(model, x, y, task_labels=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        sample_gram(model, x, y, task_labels=torch.zeros(4))
    with pytest.raises(ValueError, match="integer"):
        per_sample_grad_loop(model, x, y, task_labels=torch.zeros(4))
