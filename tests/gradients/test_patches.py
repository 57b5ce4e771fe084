"""The two convolution routes (patch Gram and chunked per-sample gradients) agree."""

from __future__ import annotations

import pytest
import torch

from avalanche_gss.gradients import (
    patches,
)


@pytest.mark.parametrize("chunk", [patches._CHUNK_ELEMENTS, 7])
def test_both_conv_routes_agree_with_explicit_per_sample_grads(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # Given patches U_i (K, T) and output gradients D_i (C, T) of 4 samples
    monkeypatch.setattr(patches, "_CHUNK_ELEMENTS", chunk)  # 7 forces many small chunks
    torch.manual_seed(5)
    cols, dout = torch.randn(4, 6, 5, dtype=torch.float64), torch.randn(4, 3, 5).double()
    explicit = torch.bmm(dout, cols.transpose(1, 2)).reshape(4, -1)  # (N, C*K)
    expected = explicit @ explicit.T  # (N, N)
    # When each route adds the weight Gram
    pair, materialised = torch.zeros(4, 4).double(), torch.zeros(4, 4).double()
    patches._add_pair_sum_gram(pair, cols, dout)
    patches._add_materialised_gram(materialised, cols[:, None], dout[:, None])
    # Then both equal the Gram of the explicit per-sample gradients D_i U_i^T
    torch.testing.assert_close(pair, expected)
    torch.testing.assert_close(materialised, expected)
