"""The oracle routes (per-sample ``autograd.grad`` loop, ``vmap``) against hand-computed
gradients."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from avalanche_gss.gradients import (
    per_sample_grad_loop,
    per_sample_grad_vmap,
    sample_gram,
)


def test_oracle_matches_hand_computed_gradients() -> None:
    # Given a linear map W (no bias) and the loss 0.5 |W x_i - y_i|^2,
    # whose per-sample gradient is (W x_i - y_i) x_i^T
    torch.manual_seed(14)
    model = nn.Linear(3, 2, bias=False).double()
    x, y = torch.randn(4, 3).double(), torch.randn(4, 2).double()

    def loss_fn(out: Tensor, target: Tensor) -> Tensor:
        return 0.5 * ((out - target) ** 2).sum(dim=1)

    expected = torch.einsum("nc,nk->nck", x @ model.weight.T - y, x).reshape(4, -1)  # (N, P)
    # When: Then the loop oracle, the vmap helper and the engine all agree with it
    torch.testing.assert_close(per_sample_grad_loop(model, x, y, loss_fn=loss_fn), expected)
    torch.testing.assert_close(per_sample_grad_vmap(model, x, y, loss_fn=loss_fn), expected)
    torch.testing.assert_close(sample_gram(model, x, y, loss_fn=loss_fn), expected @ expected.T)
