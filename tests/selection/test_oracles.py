"""Oracles for the buffers' decisions: each paper claim recomputed independently.

GSS-Greedy's scores are recomputed from the float64 per-sample gradient loop (not the
engine the buffer uses); the buffer samples it was compared with are read through a spy
on the buffer's own draw (the real method runs, the test only records its result).
"""

import copy

import pytest
import torch
from helpers import C, D
from helpers import small_mlp as _model

import avalanche_gss.methods.gss_greedy as gss_greedy
from avalanche_gss.buffers import Rows, model_features
from avalanche_gss.gradients import per_sample_grad_loop
from avalanche_gss.methods.clust import FSSClustBuffer
from avalanche_gss.methods.gss_greedy import GSSGreedyBuffer
from avalanche_gss.methods.reservoir import ReservoirBuffer
from avalanche_gss.selection.reservoir import reservoir_slots


def _batch(b, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, D, generator=g), torch.randint(0, C, (b,), generator=g)


def _loop_grads(model, x, y):
    """(N, P) float64 per-sample gradients by the autograd loop."""
    ref = copy.deepcopy(model).double()
    return per_sample_grad_loop(ref, x.double(), y)


def _cos(a, b):
    """(A, B) cosines between the rows of a and b (a zero row has cosine 0)."""
    an = a / a.norm(dim=1, keepdim=True).clamp_min(1e-12)
    bn = b / b.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return an @ bn.T


class _DrawSpy:
    """Records the slots each call of the buffer's real ``sample_slots`` returns."""

    def __init__(self, buf):
        self.calls = []
        self._real = buf.sample_slots
        buf.sample_slots = self

    def __call__(self, k, generator=None):
        slots = self._real(k, generator)
        self.calls.append(slots.clone())
        return slots


class _GreedySlotsSpy:
    """Records the arguments of each call of the real ``greedy_slots``."""

    def __init__(self, monkeypatch):
        self.calls = []
        self._real = gss_greedy.greedy_slots
        monkeypatch.setattr(gss_greedy, "greedy_slots", self)

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self._real(*args, **kwargs)


# --------------------------------------------------------------------------- GSS-Greedy


@pytest.mark.parametrize("n", [4, 9, 15])  # below, equal to and above the buffer size 9
def test_paper_greedy_scores_are_max_cosine_plus_one_from_the_loop(n):
    # Given Algorithm 2 as written (per-sample gradients, per-sample gate) and a buffer
    # of 9 slots filled and then overflowed by batches of 5,
    model = _model()
    buf = GSSGreedyBuffer(9, n=n, variant="paper", seed=3)
    spy = _DrawSpy(buf)
    for step in range(6):
        x, y = _batch(5, seed=step)
        size_before = len(buf)
        stored_x, stored_y = (buf.tensors() if size_before else (None, None))
        stored_x = None if stored_x is None else stored_x.clone()
        stored_y = None if stored_y is None else stored_y.clone()
        draws_before = len(spy.calls)
        slots = buf.add(x, y, model)
        new_scores = buf.last_scores
        if size_before == 0:
            # When the buffer is empty there is nothing to compare with: score 1.
            assert len(spy.calls) == draws_before
            assert new_scores.tolist() == [1.0] * 5
        else:
            # When the buffer holds samples: one draw of min(n, size) distinct slots,
            assert len(spy.calls) == draws_before + 1
            drawn = spy.calls[-1]
            assert len(drawn) == min(n, size_before)
            assert len(torch.unique(drawn)) == len(drawn)
            assert int(drawn.min()) >= 0 and int(drawn.max()) < size_before
            # Then each new score is max_j cos(g_i, g_j) + 1 over the drawn samples,
            # the gradients from the float64 per-sample loop.
            g_new = _loop_grads(model, x, y)
            g_mem = _loop_grads(model, stored_x[drawn], stored_y[drawn])
            expected = _cos(g_new, g_mem).max(dim=1).values + 1.0  # (5,)
            torch.testing.assert_close(new_scores.double(), expected, atol=1e-4, rtol=0)
        # And the score a stored sample keeps is the score it arrived with.
        for i, s in enumerate(slots.tolist()):
            if s >= 0:
                assert float(buf.scores[s]) == pytest.approx(float(new_scores[i]), abs=1e-6)
    assert len(buf) == 9


def test_paper_greedy_full_buffer_admits_only_negative_cosines():
    # Given a full buffer (paper variant), When batches arrive, Then a sample stored after
    # the buffer filled has a loop-computed score below 1 (line 9: c < 1).
    model = _model(1)
    buf = GSSGreedyBuffer(6, n=6, variant="paper", seed=0)
    spy = _DrawSpy(buf)
    admitted = 0
    for step in range(30):
        x, y = _batch(4, seed=100 + step)
        full = len(buf) == buf.max_size
        stored_x, stored_y = (t.clone() for t in buf.tensors()) if len(buf) else (None, None)
        slots = buf.add(x, y, model)
        if not full:
            continue
        drawn = spy.calls[-1]
        expected = _cos(_loop_grads(model, x, y),
                        _loop_grads(model, stored_x[drawn], stored_y[drawn])).max(1).values + 1
        for i, s in enumerate(slots.tolist()):
            if s >= 0:
                admitted += 1
                assert float(expected[i]) < 1.0 + 1e-5
    assert admitted > 0  # the test saw the gate let samples in


@pytest.mark.parametrize("filled", [7, 25, 40])  # fewer rows than one group, a remainder, n*10
def test_authors_greedy_scores_use_group_mean_gradients_and_batch_mean_gate(
    monkeypatch, filled
):
    # Given the authors' variant (n = 3 buffer gradients, each the mean gradient of 10
    # buffer samples) and a buffer holding `filled` samples,
    model = _model(2)
    buf = GSSGreedyBuffer(40, n=3, variant="authors", seed=5)
    assert (buf.memory_grads, buf.gate, buf.group_size) == ("groups", "batch", 10)
    x0, y0 = _batch(filled, seed=7)
    for start in range(0, filled, 10):
        buf.add(x0[start:start + 10], y0[start:start + 10], model)
    assert len(buf) == filled
    stored_x, stored_y = (t.clone() for t in buf.tensors())
    draws = _DrawSpy(buf)
    gate = _GreedySlotsSpy(monkeypatch)
    # When a batch arrives,
    x, y = _batch(6, seed=8)
    buf.add(x, y, model)
    # Then min(size, n * group_size) distinct buffer rows were drawn,
    drawn = draws.calls[-1]
    k = min(filled, 3 * 10)
    assert len(drawn) == k and len(torch.unique(drawn)) == k
    # cut into consecutive groups of 10 (the last one taking the remainder; at least one),
    g_mem = _loop_grads(model, stored_x[drawn], stored_y[drawn])  # (k, P)
    n_groups = max(1, k // 10)
    bounds = [i * 10 for i in range(n_groups)] + [k]
    means = torch.stack([g_mem[a:b].mean(0) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    g_new = _loop_grads(model, x, y)
    # each new score is the largest cosine to a group mean, plus one,
    expected = _cos(g_new, means).max(1).values + 1
    torch.testing.assert_close(buf.last_scores.double(), expected, atol=1e-4, rtol=0)
    # and the gate score is that of the batch's mean gradient (not of any one sample).
    (_, kwargs), = gate.calls
    assert kwargs["gate"] == "batch"
    batch_expected = float(_cos(g_new.mean(0, keepdim=True), means).max() + 1)
    assert kwargs["batch_score"] == pytest.approx(batch_expected, abs=1e-4)
    assert kwargs["batch_score"] != pytest.approx(float(expected[0]), abs=1e-3)


def test_authors_batch_gate_decides_for_the_whole_batch():
    # Given a full authors-variant buffer, When batches arrive, Then each batch is either
    # refused whole (batch-mean score >= 1) or faces no per-sample gate: samples whose
    # own score is >= 1 do enter with the batch.
    model = _model(3)
    buf = GSSGreedyBuffer(20, n=2, variant="authors", seed=1)
    for step in range(2):
        buf.add(*_batch(10, seed=200 + step), model)
    assert len(buf) == 20
    entered_with_high_score = 0
    for step in range(40):
        x, y = _batch(10, seed=300 + step)
        slots = buf.add(x, y, model)
        scores = buf.last_scores
        entered_with_high_score += int(((slots >= 0) & (scores >= 1)).sum())
    assert entered_with_high_score > 0


# --------------------------------------------------------------------------- Reservoir


def test_reservoir_inclusion_per_item_is_binomial_with_p_m_over_n():
    # Given M = 3 slots and a stream of N = 12 items in batches of 5 (the last one short),
    # When the stream is run R = 4000 times with different seeds, Then each item is in
    # the final buffer a Binomial(R, M/N) number of times: every item's count within
    # 4.5 standard deviations, and the chi-square with the binomial variance below the
    # 99.9th percentile of chi2(12) (32.9). (A draw on 0..t-1 instead of 0..t keeps the
    # first M items with probability (M-1)/(N-1): 10 standard deviations off.)
    m, n, runs = 3, 12, 4000
    p = m / n
    counts = torch.zeros(n)
    for r in range(runs):
        g = torch.Generator().manual_seed(r)
        held = torch.full((m,), -1, dtype=torch.long)
        seen = 0
        for start in range(0, n, 5):
            b = min(5, n - start)
            slots = reservoir_slots(seen, b, m, generator=g)
            for i, s in enumerate(slots.tolist()):
                if s >= 0:
                    held[s] = start + i
            seen += b
        assert len(torch.unique(held)) == m  # the buffer holds M distinct items
        counts[held] += 1
    mean, var = runs * p, runs * p * (1 - p)
    z = (counts - mean) / var ** 0.5
    assert float(z.abs().max()) < 4.5, z
    assert float((z ** 2).sum()) < 32.9


@pytest.mark.parametrize(("m", "t"), [(1, 1), (3, 3), (3, 8), (10, 39)])
def test_reservoir_admits_item_t_with_probability_m_over_t_plus_one_in_a_uniform_slot(m, t):
    # Algorithm R: item number t (0-based, t >= M) draws j uniformly on 0..t and takes
    # slot j when j < M. Over 4000 seeded draws the admissions are Binomial(4000,
    # M/(t+1)) (within 4.5 standard deviations), and the slots taken uniform on 0..M-1
    # (chi-square below the 99.9th percentile for M-1 degrees of freedom).
    trials, p = 4000, m / (t + 1)
    slots = torch.stack([reservoir_slots(t, 1, m, generator=torch.Generator().manual_seed(r))
                         for r in range(trials)]).flatten()
    admitted = slots[slots >= 0]
    assert bool((slots >= -1).all()) and bool((slots < m).all())
    z = (len(admitted) - trials * p) / (trials * p * (1 - p)) ** 0.5
    assert abs(z) < 4.5, (len(admitted), trials * p)
    if m > 1:
        counts = torch.bincount(admitted, minlength=m).double()
        expected = len(admitted) / m
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < {3: 13.8, 10: 27.9}[m], counts


def test_reservoir_buffer_inclusion_matches_the_binomial_through_add():
    # The same law through the buffer (tensors in, slots out): items are labelled by
    # their stream position, and the final buffer is read back.
    m, n, runs = 8, 40, 1000
    p = m / n
    counts = torch.zeros(n)
    x = torch.zeros(n, 2)
    for r in range(runs):
        buf = ReservoirBuffer(m, seed=r)
        for start in range(0, n, 10):
            buf.add(x[start:start + 10], torch.arange(start, start + 10))
        counts[buf.tensors()[1]] += 1
    z = (counts - runs * p) / (runs * p * (1 - p)) ** 0.5
    assert float(z.abs().max()) < 4.5, z
    assert float((z ** 2).sum()) < 73.4  # chi2(40), 99.9th percentile


# --------------------------------------------------------------------------- FSS-Clust


class _TwoStage(torch.nn.Module):
    """Features are 3-D; the classifier maps them to 2 logits (so the two differ)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(5, 3)
        self.classifier = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.classifier(torch.tanh(self.body(x)))


def test_fss_paper_distances_are_euclidean_between_penultimate_features():
    # Given FSS-Clust as the paper writes it, When a merge runs, Then the distances it
    # clusters are Euclidean distances between the classifier's inputs (not the logits).
    model = _TwoStage()
    buf = FSSClustBuffer(4, variant="paper", recent_size=6, seed=0)
    assert (buf.features, buf.squared) == ("penultimate", False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=g)
    union = Rows(x, torch.zeros(6, dtype=torch.long), torch.zeros(6, dtype=torch.long),
                 torch.full((6,), -1), torch.zeros(6, dtype=torch.long),
                 torch.ones(6, dtype=torch.bool))
    dist, valid = buf._distances(union, model)
    with torch.no_grad():
        feats = torch.tanh(model.body(x))
    torch.testing.assert_close(dist, torch.cdist(feats, feats), atol=1e-5, rtol=0)
    assert bool(valid.all())
    # and the authors' variant: squared distances between logits.
    authors = FSSClustBuffer(4, variant="authors", recent_size=6, seed=0)
    dist_a, _ = authors._distances(union, model)
    with torch.no_grad():
        logits = model(x)
    torch.testing.assert_close(dist_a, torch.cdist(logits, logits) ** 2, atol=1e-5, rtol=0)


def test_fss_features_are_the_classifier_input_of_any_model():
    # model_features on a model whose classifier is its last Linear: the hook's capture
    # equals the body's output computed by hand.
    model = _TwoStage()
    x = torch.randn(7, 5)
    with torch.no_grad():
        expected = torch.tanh(model.body(x))
    torch.testing.assert_close(model_features(model, x), expected)
    torch.testing.assert_close(model_features(model, x, penultimate=False),
                               model(x).detach())


@pytest.mark.slow
def test_grown_reservoir_fills_the_free_slots_first_then_samples_by_algorithm_r():
    # Given a 5-slot reservoir that saw 20 samples, grown to 10 slots, When a batch of 7
    # arrives, Then samples 0-4 take the free slots 5-9 and samples 5 and 6 go through
    # Algorithm R at stream positions 25 and 26 (j uniform on 0..25, 0..26; slot j if
    # j < 10). A later sample drawing a slot just filled replaces it (the earlier one is
    # reported -1). Final presence over 3000 seeds (each within 4.5 binomial standard
    # deviations): fill samples 25/27 (no later draw hit their slot), samples 5 and 6
    # 10/27 (admitted 10/26 then not overwritten 26/27, and 10/27).
    trials = 3000
    present = torch.zeros(7)
    x = torch.arange(27.0)[:, None]
    for seed in range(trials):
        buf = ReservoirBuffer(5, seed=seed)
        buf.add(x[:20], torch.arange(20))
        buf.resize(None, 10)
        slots = buf.add(x[20:], torch.arange(20, 27))
        assert len(buf) == 10 and buf.n_seen == 27
        kept = slots[slots >= 0]
        assert len(kept) == len(torch.unique(kept)) and bool((slots < 10).all())
        for k in range(5):
            assert int(slots[k]) in (5 + k, -1)
        stored = set(buf.tensors()[1].tolist())
        for k in range(7):
            assert (int(slots[k]) >= 0) == (20 + k in stored)
            present[k] += int(20 + k in stored)
    p = torch.tensor([25 / 27] * 5 + [10 / 27] * 2)
    z = (present - trials * p) / (trials * p * (1 - p)).sqrt()
    assert float(z.abs().max()) < 4.5, present


@pytest.mark.parametrize(("memory_grads", "gate"), [("groups", "sample"), ("samples", "batch")])
def test_mixed_greedy_options_score_by_their_own_oracle(monkeypatch, memory_grads, gate):
    # Each option also works alone: group-mean buffer gradients with the paper's
    # per-sample gate, or per-sample buffer gradients with the authors' batch gate.
    model = _model(4)
    buf = GSSGreedyBuffer(30, n=2, variant="paper", memory_grads=memory_grads, gate=gate,
                          group_size=5, seed=2)
    x0, y0 = _batch(30, seed=9)
    for start in range(0, 30, 10):
        buf.add(x0[start:start + 10], y0[start:start + 10], model)
    stored_x, stored_y = (t.clone() for t in buf.tensors())
    draws = _DrawSpy(buf)
    spy = _GreedySlotsSpy(monkeypatch)
    x, y = _batch(4, seed=10)
    buf.add(x, y, model)
    drawn = draws.calls[-1]
    g_mem = _loop_grads(model, stored_x[drawn], stored_y[drawn])
    if memory_grads == "groups":
        assert len(drawn) == 10
        g_mem = torch.stack([g_mem[:5].mean(0), g_mem[5:].mean(0)])
    else:
        assert len(drawn) == 2
    g_new = _loop_grads(model, x, y)
    expected = _cos(g_new, g_mem).max(1).values + 1
    torch.testing.assert_close(buf.last_scores.double(), expected, atol=1e-4, rtol=0)
    (_, kwargs), = spy.calls
    assert kwargs["gate"] == gate
    if gate == "batch":
        batch_expected = float(_cos(g_new.mean(0, keepdim=True), g_mem).max() + 1)
        assert kwargs["batch_score"] == pytest.approx(batch_expected, abs=1e-4)


def test_greedy_scores_compare_only_the_given_parameters_in_float64():
    # params= restricts the gradients compared (here the classifier's weight), and a
    # float64 model is scored in float64.
    model = _model(5).double()
    params = [model.classifier.weight]
    buf = GSSGreedyBuffer(10, n=10, variant="paper", params=params, seed=0)
    x0, y0 = _batch(10, seed=11)
    buf.add(x0.double(), y0, model)
    stored_x, stored_y = (t.clone() for t in buf.tensors())
    assert stored_x.dtype == torch.float64
    draws = _DrawSpy(buf)
    x, y = _batch(5, seed=12)
    buf.add(x.double(), y, model)
    drawn = draws.calls[-1]

    def grads(xs, ys):
        return per_sample_grad_loop(model, xs, ys, params=params)

    expected = _cos(grads(x.double(), y), grads(stored_x[drawn], stored_y[drawn])).max(1).values
    torch.testing.assert_close(buf.last_scores.double(), expected + 1, atol=1e-6, rtol=0)


def test_authors_greedy_scores_a_float64_model_in_float64():
    # One group of 10 (n = 1): each new score is the cosine to the mean gradient of the
    # 10 drawn buffer samples, plus one, computed in float64 like the model.
    model = _model(6).double()
    buf = GSSGreedyBuffer(10, n=1, variant="authors", seed=0)
    x0, y0 = _batch(10, seed=13)
    buf.add(x0.double(), y0, model)
    stored_x, stored_y = (t.clone() for t in buf.tensors())
    draws = _DrawSpy(buf)
    x, y = _batch(5, seed=14)
    buf.add(x.double(), y, model)
    drawn = draws.calls[-1]
    assert len(drawn) == 10
    g_mem = per_sample_grad_loop(model, stored_x[drawn], stored_y[drawn]).mean(0, keepdim=True)
    expected = _cos(per_sample_grad_loop(model, x.double(), y), g_mem).max(1).values + 1
    torch.testing.assert_close(buf.last_scores.double(), expected, atol=1e-6, rtol=0)
