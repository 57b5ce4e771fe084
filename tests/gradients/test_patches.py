"""The two convolution routes (patch Gram and chunked per-sample gradients) agree."""

from __future__ import annotations

import pytest
import torch

from avalanche_gss.gradients import common, patches


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


@pytest.mark.parametrize(("rows", "blocks"), [(7, 8), (7, 3), (8, 8), (2, 1)])
def test_a_large_outer_product_takes_the_triangle_and_equals_the_full_product(
    monkeypatch: pytest.MonkeyPatch, rows: int, blocks: int
) -> None:
    # Given per-sample gradients of `rows` samples, past (lowered) thresholds of the
    # triangle route, and an accumulator that already holds a Gram term
    monkeypatch.setattr(common, "_TRIANGLE_ROWS", 2)
    monkeypatch.setattr(common, "_TRIANGLE_WIDTH", 3)
    monkeypatch.setattr(common, "_TRIANGLE_BLOCKS", blocks)
    torch.manual_seed(rows)
    grads = torch.randn(rows, 5, dtype=torch.float64)
    start = torch.randn(rows, rows, dtype=torch.float64)
    start = start + start.T
    out = start.clone()
    # When the Gram is added
    common.add_outer(out, grads)
    # Then it equals one full product
    torch.testing.assert_close(out, start + grads @ grads.T)


def test_below_the_thresholds_the_outer_product_is_one_full_product() -> None:
    torch.manual_seed(0)
    grads = torch.randn(common._TRIANGLE_ROWS - 1, common._TRIANGLE_WIDTH)
    out = torch.zeros(grads.shape[0], grads.shape[0])
    common.add_outer(out, grads)
    assert torch.equal(out, torch.zeros_like(out).addmm_(grads, grads.T))  # the same bits
