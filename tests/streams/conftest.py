"""Shared toy data for the benchmark tests: features that encode each sample's identity."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from avalanche_gss.streams import ArrayDataset


def make_toy(
    n_classes: int = 10, train_per_class: int = 30, test_per_class: int = 5, dim: int = 6
) -> ArrayDataset:
    """Features ``x[i, j] = i * dim + j`` (test: negated, minus 1), labels ``i % n_classes``.

    Row ``i`` of any derived tensor can be traced back to its source sample, and labels are
    interleaved so classes are not contiguous blocks.
    """
    n_tr, n_te = n_classes * train_per_class, n_classes * test_per_class
    x_tr = torch.arange(n_tr * dim, dtype=torch.float32).view(n_tr, dim)
    x_te = -torch.arange(n_te * dim, dtype=torch.float32).view(n_te, dim) - 1
    return ArrayDataset(
        name="toy",
        source="synthetic identity features",
        x_train=x_tr,
        y_train=torch.arange(n_tr) % n_classes,
        x_test=x_te,
        y_test=torch.arange(n_te) % n_classes,
        num_classes=n_classes,
    )


@pytest.fixture
def toy() -> ArrayDataset:
    return make_toy()


@pytest.fixture
def toy_factory() -> Callable[..., ArrayDataset]:
    return make_toy
