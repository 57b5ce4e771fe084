"""GCR (Tiwari et al., CVPR 2022): orthogonal matching pursuit on the Gram against the
algorithm run on explicit float64 gradient vectors from the per-sample gradient loop."""


import pytest
import torch
from helpers import loop_grads as _loop_grads
from helpers import small_data as _data
from helpers import small_mlp as _model

from avalanche_gss.gradients import sample_gram
from avalanche_gss.methods.gcr import GCRBuffer
from avalanche_gss.selection.gcr import omp_select


def _omp_on_vectors(grads, w, k, lam):
    """OMP with vectors: target b = sum w_i g_i, residual r = b - sum_X W_i g_i."""
    b = grads.T @ w
    chosen, weights = [], torch.zeros(0, dtype=torch.float64)
    for _ in range(k):
        r = b - grads[chosen].T @ weights
        corr = grads @ r
        corr[chosen] = -float("inf")
        chosen.append(int(torch.argmax(corr)))
        gx = grads[chosen]
        a = gx @ gx.T + lam * torch.eye(len(chosen), dtype=torch.float64)
        weights = torch.linalg.solve(a, gx @ b)
    residual = float(((grads[chosen].T @ weights - b) ** 2).sum())
    return chosen, weights, residual


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_omp_on_the_gram_equals_omp_on_the_gradients(seed):
    model = _model(seed)
    x, y = _data(16, seed + 10)
    grads = _loop_grads(model, x, y)
    w = torch.rand(16, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.5
    got = omp_select(sample_gram(model, x, y).double(), w, 6, lam=0.3)
    order, weights, residual = _omp_on_vectors(grads, w, 6, 0.3)
    assert got.order.tolist() == order
    assert got.indices.tolist() == sorted(order)
    by_index = dict(zip(order, weights.tolist(), strict=True))
    torch.testing.assert_close(got.weights, torch.tensor([by_index[i] for i in sorted(order)],
                                                         dtype=torch.float64),
                               rtol=1e-4, atol=1e-6)
    assert got.residual == pytest.approx(residual, rel=1e-4, abs=1e-8)


def test_choosing_every_sample_without_ridge_matches_the_target_exactly():
    g = torch.randn(5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0], dtype=torch.float64)
    got = omp_select(g @ g.T, w, 5, lam=0.0)
    torch.testing.assert_close(got.weights, w)
    assert got.residual == pytest.approx(0.0, abs=1e-9)


def test_bad_arguments_are_refused():
    gram = torch.eye(3)
    with pytest.raises(ValueError, match="k must be in 0..3"):
        omp_select(gram, torch.ones(3), 4)
    with pytest.raises(ValueError, match="pool_weights"):
        omp_select(gram, torch.ones(2), 1)
    with pytest.raises(ValueError, match="lam"):
        omp_select(gram, torch.ones(3), 1, lam=-1.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_buffer_keeps_the_omp_coreset_of_buffer_and_recent_with_its_weights(seed):
    model = _model(seed)
    buf = GCRBuffer(8, recent_size=10, lam=0.2, seed=seed)
    x1, y1 = _data(10, seed + 1)
    buf.add(x1[:6], y1[:6], model)  # waits
    assert buf.size == 0
    buf.add(x1[6:], y1[6:], model)  # merge: the union of 10 > 8
    union_x, union_y = x1, y1
    order, weights, _ = _omp_on_vectors(_loop_grads(model, union_x, union_y),
                                        torch.ones(10, dtype=torch.float64), 8, 0.2)
    stored = {tuple(r.tolist()): float(w) for r, w in zip(buf.x[: buf.size],
                                                           buf.weights, strict=True)}
    want = {tuple(union_x[i].tolist()): float(v) for i, v in zip(order, weights, strict=True)}
    assert stored.keys() == want.keys()
    for key, v in want.items():
        assert stored[key] == pytest.approx(v, rel=1e-3, abs=1e-5)
    # the next merge's target weighs the stored samples by their weights
    x2, y2 = _data(10, seed + 2)
    before_x, before_y = buf.x[: buf.size].clone(), buf.y[: buf.size].clone()
    before_w = buf.weights.clone().double()
    buf.add(x2, y2, model)
    ux, uy = torch.cat([before_x, x2]), torch.cat([before_y, y2])
    order, weights, _ = _omp_on_vectors(_loop_grads(model, ux, uy),
                                        torch.cat([before_w, torch.ones(10, dtype=torch.float64)]),
                                        8, 0.2)
    stored = {tuple(r.tolist()): float(w) for r, w in zip(buf.x[: buf.size],
                                                           buf.weights, strict=True)}
    want = {tuple(ux[i].tolist()): float(v) for i, v in zip(order, weights, strict=True)}
    assert stored.keys() == want.keys()
    for key, v in want.items():
        assert stored[key] == pytest.approx(v, rel=1e-3, abs=1e-5)


def test_a_union_that_fits_is_kept_whole_with_weight_one():
    model = _model(0)
    buf = GCRBuffer(30, recent_size=10)
    for i in range(2):
        buf.add(*_data(10, i), model)
    assert buf.size == 20 and buf.weights.tolist() == [1.0] * 20
    assert buf.last_result is None


def _nan_for_label_3(logits, y):
    loss = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    return loss * torch.where(y == 3, float("nan"), 1.0)  # NaN gradient for label 3 only


def test_waiting_samples_with_a_non_finite_gradient_are_dropped_at_the_merge():
    model = _model(0)
    buf = GCRBuffer(6, recent_size=10, loss_fn=_nan_for_label_3)
    x, y = _data(10, 5)
    y[:3], y[3:] = 3, y[3:] % 3
    with pytest.warns(RuntimeWarning, match="3 waiting sample"):
        buf.add(x, y, model)
    assert buf.size == 6 and buf.n_rejected == 3 and 3 not in buf.y[: buf.size].tolist()
    assert bool(torch.isfinite(buf.weights).all())
