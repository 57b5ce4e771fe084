"""BatchNorm's Gram rule (eval mode, running statistics) against the loop oracle."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.gradients import (
    SmallCNN,
    assert_each_parameter_close,
    assert_gram_close,
    reference_grads,
    set_bn_stats,
)
from torch import nn

from avalanche_gss.gradients import (
    sample_gram,
)


def test_cnn_with_batchnorm_matches_loop_and_uses_running_stats() -> None:
    # Given a CNN in training mode whose BatchNorms have non-trivial running statistics
    torch.manual_seed(1)
    model = SmallCNN()
    set_bn_stats(model)
    model.train()
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))
    # When scoring: Then the engine matches the loop run in eval mode (running statistics)
    assert_gram_close(sample_gram(model, x, y), reference_grads(model, x, y))
    assert_each_parameter_close(model, x, y)
    # and the batch-statistics alternative would have been far off (the test can fail)
    batch_stats = copy.deepcopy(model).double()
    for m in batch_stats.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.track_running_stats, m.running_mean, m.running_var = False, None, None
    with pytest.raises(ValueError, match="batch statistics"):
        sample_gram(batch_stats, x.double(), y)
