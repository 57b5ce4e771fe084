"""OCS (Yoon et al., ICLR 2022): the scores and the top-k against the paper's equations,
recomputed in float64 from the per-sample gradient loop (not the engine the buffer uses)."""


import pytest
import torch
from helpers import loop_grads as _loop_grads
from helpers import small_data as _data
from helpers import small_mlp as _model

from avalanche_gss.gradients import sample_gram
from avalanche_gss.methods.ocs import OCSBuffer
from avalanche_gss.selection.ocs import ocs_scores, ocs_topk


def _cos(a, b):
    return float(a @ b / (a.norm() * b.norm()))


def _paper_scores(grads, b, tau):
    """Eq. of OCS section 3: S + V + tau A, one sample at a time."""
    batch, core = grads[:b], grads[b:]
    mean_b = batch.mean(0)
    out = []
    for n in range(b):
        s = _cos(batch[n], mean_b)
        v = -sum(_cos(batch[n], batch[p]) for p in range(b) if p != n) / (b - 1)
        a = _cos(batch[n], core.mean(0)) if len(core) else 0.0
        out.append(s + v + tau * a)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n_core", [0, 5])
def test_scores_equal_the_papers_equations(seed, n_core):
    model = _model(seed)
    x, y = _data(10 + n_core, seed + 10)
    grads = _loop_grads(model, x, y)
    gram = sample_gram(model, x, y).double()
    got = ocs_scores(gram, 10, tau=0.7)
    want = _paper_scores(grads, 10, 0.7)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    top = ocs_topk(got, 3)
    assert top.tolist() == sorted(torch.argsort(want, descending=True)[:3].tolist())


def test_topk_keeps_the_best_skips_nan_and_breaks_ties_by_order():
    s = torch.tensor([0.5, float("nan"), 2.0, 0.5, 1.0])
    assert ocs_topk(s, 2).tolist() == [2, 4]
    assert ocs_topk(s, 3).tolist() == [0, 2, 4]
    assert ocs_topk(s, 9).tolist() == [0, 2, 3, 4]
    with pytest.raises(ValueError, match="k must be"):
        ocs_topk(s, -1)


def test_a_single_sample_batch_has_no_diversity_and_zero_gradients_score_zero():
    gram = torch.zeros(3, 3, dtype=torch.float64)
    assert ocs_scores(gram, 3).tolist() == [0.0, 0.0, 0.0]
    g = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    assert ocs_scores(g @ g.T, 1).tolist() == [1.0]  # S = 1, V = 0, A = cos = 0


def test_two_sample_scores_of_small_gradients_equal_the_papers_equations_at_tau_one():
    # Given a batch of two gradients and a coreset of three, all of norm far below 1
    g = torch.randn(5, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    grads = 1e-3 * g
    # When they are scored with the default tau
    got = ocs_scores(grads @ grads.T, 2)
    # Then the scores are the paper's (cosines do not see the scale; V_n = -cos(g_1, g_2))
    torch.testing.assert_close(got, _paper_scores(grads, 2, 1.0), rtol=1e-9, atol=1e-12)


def test_bad_grams_and_batch_sizes_are_refused():
    with pytest.raises(ValueError, match=r"gram must be square, got shape \(2, 3\)"):
        ocs_scores(torch.zeros(2, 3), 1)
    for n_batch in (0, 4):
        with pytest.raises(ValueError, match=rf"n_batch must be in 1..3, got {n_batch}"):
            ocs_scores(torch.zeros(3, 3), n_batch)


def test_topk_of_nothing_is_an_empty_index():
    # Given k = 0, or only NaN scores, Then no sample is kept: an empty int64 index
    s = torch.tensor([0.5, 1.0])
    for got in (ocs_topk(s, 0), ocs_topk(torch.full((2,), float("nan")), 2)):
        assert got.dtype == torch.long and got.shape == (0,)
        assert s[got].tolist() == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_buffer_stores_the_batch_top_k_by_the_oracle_scores(seed):
    model = _model(seed)
    buf = OCSBuffer(50, k=3, seed=seed)
    x, y = _data(10, seed + 20)
    slots = buf.add(x, y, model)
    want = _paper_scores(_loop_grads(model, x, y), 10, 1.0)
    best = sorted(torch.argsort(want, descending=True)[:3].tolist())
    assert (slots >= 0).nonzero().flatten().tolist() == best
    assert buf.size == 3 and buf.n_selected == 3
    torch.testing.assert_close(buf.last_scores.double(), want, rtol=1e-4, atol=1e-5)
    x2, y2 = _data(10, seed + 30)  # a second batch: the affinity term now counts
    buf.add(x2, y2, model)
    assert buf.size == 6 and buf.n_selected == 6


def test_a_full_buffer_takes_the_selected_by_reservoir_and_checkpoints_the_count():
    model = _model(0)
    buf = OCSBuffer(4, k=2, n=3)
    for i in range(6):
        buf.add(*_data(10, i), model)
    assert buf.size == 4 and buf.n_selected == 12 and buf.n_seen == 60
    other = OCSBuffer(4, k=2, n=3)
    other.load_state_dict(buf.state_dict())
    assert other.n_selected == 12
    with pytest.raises(ValueError, match="k must be >= 1"):
        OCSBuffer(4, k=0)


def test_samples_with_a_non_finite_gradient_are_not_stored():
    def nan_for_label_3(logits, y):
        loss = torch.nn.functional.cross_entropy(logits, y, reduction="none")
        return loss * torch.where(y == 3, float("nan"), 1.0)  # NaN gradient for label 3 only

    buf = OCSBuffer(20, k=10, loss_fn=nan_for_label_3)
    x, y = _data(10, 5)
    y[:3], y[3:] = 3, y[3:] % 3
    with pytest.warns(RuntimeWarning, match="non-finite gradient"):
        slots = buf.add(x, y, _model(0))
    assert slots[:3].tolist() == [-1, -1, -1] and buf.size == 7 and buf.n_rejected == 3
    # the others are scored among themselves, as if the three had not come
    want = _paper_scores(_loop_grads(_model(0), x[3:], y[3:]), 7, buf.tau)
    torch.testing.assert_close(buf.last_scores[3:].double(), want, rtol=1e-4, atol=1e-5)
    assert bool(torch.isnan(buf.last_scores[:3]).all())
