"""GCR (Tiwari et al., CVPR 2022): orthogonal matching pursuit on the Gram against the
algorithm run on explicit float64 gradient vectors from the per-sample gradient loop."""


from fractions import Fraction

import pytest
import torch
from helpers import C, D
from helpers import loop_grads as _loop_grads
from helpers import small_data as _data
from helpers import small_mlp as _model

from avalanche_gss.gradients import sample_gram
from avalanche_gss.methods.gcr import GCRBuffer
from avalanche_gss.selection.gcr import class_budgets, class_groups, omp_select, pursue


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
    got = omp_select(sample_gram(model, x, y).double(), w, 6, lam=0.3, positive=False)
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
    got = omp_select(g @ g.T, w, 5, lam=0.0, positive=False)
    torch.testing.assert_close(got.weights, w)
    assert got.residual == pytest.approx(0.0, abs=1e-9)


def test_a_singular_fit_without_ridge_falls_back_to_least_squares():
    # Sample 3 repeats sample 0: with lam = 0 and both chosen, K_XX is singular and the
    # Cholesky solve fails; the minimum-norm least-squares weights still match the target.
    g = torch.randn(4, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    g[3] = g[0]
    w = torch.tensor([1.0, 2.0, 0.5, 1.0], dtype=torch.float64)
    got = omp_select(g @ g.T, w, 4, lam=0.0, positive=False)
    assert got.indices.tolist() == [0, 1, 2, 3]
    assert torch.isfinite(got.weights).all()
    fitted = g[got.indices].T @ got.weights
    torch.testing.assert_close(fitted, g.T @ w)
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
def test_one_unconstrained_pursuit_keeps_the_omp_coreset_of_buffer_and_recent(seed):
    model = _model(seed)
    buf = GCRBuffer(8, recent_size=10, lam=0.2, seed=seed, per_class=False, positive=False)
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


def _positive_omp_on_vectors(grads, w, k, lam, dropped=None):
    """GRAD-MATCH's nonnegative OMP with vectors: argmax of <g_i, r> over all samples, stop
    when it is already chosen, drop the most negative weight until none is negative (the
    samples dropped are appended to ``dropped``)."""
    b = grads.T @ w
    chosen, weights = [], torch.zeros(0, dtype=torch.float64)
    for _ in range(k):
        r = b - grads[chosen].T @ weights if chosen else b
        j = int(torch.argmax(grads @ r))
        if j in chosen:
            break
        chosen.append(j)
        while True:
            gx = grads[chosen]
            a = gx @ gx.T + lam * torch.eye(len(chosen), dtype=torch.float64)
            weights = torch.linalg.solve(a, gx @ b)
            if not chosen or float(weights.min()) >= 0:
                break
            j = chosen.pop(int(torch.argmin(weights)))
            if dropped is not None:
                dropped.append(j)
    return chosen, weights


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_nonnegative_omp_on_the_gram_equals_it_on_the_gradients(seed):
    model = _model(seed)
    x, y = _data(20, seed + 30)
    grads = _loop_grads(model, x, y)
    w = torch.rand(20, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
    got = omp_select(sample_gram(model, x, y).double(), w, 8)  # lam: the authors' 0.5
    order, weights = _positive_omp_on_vectors(grads, w, 8, 0.5)
    assert got.order.tolist() == order
    assert bool((got.weights >= 0).all())
    by_index = dict(zip(order, weights.tolist(), strict=True))
    torch.testing.assert_close(got.weights, torch.tensor([by_index[i] for i in sorted(order)],
                                                         dtype=torch.float64),
                               rtol=1e-4, atol=1e-6)


def test_nonnegative_omp_keeps_weights_nonnegative_where_ridge_turns_negative():
    negative = 0
    for seed in range(20):
        g = torch.randn(12, 3, generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64)
        w = torch.ones(12, dtype=torch.float64)
        negative += float(omp_select(g @ g.T, w, 8, lam=0.01, positive=False).weights.min()) < 0
        got = omp_select(g @ g.T, w, 8, lam=0.01)
        assert bool((got.weights >= 0).all()) and len(got.indices) <= 8
    assert negative  # the unconstrained pursuit does give negative weights here


def test_a_sample_dropped_for_a_negative_weight_may_be_chosen_again():
    # Given pools of 12 gradients in 6 dimensions, When the nonnegative pursuit runs for
    # every slot, Then it is GRAD-MATCH's: a sample dropped for its negative weight leaves
    # the support, and may be chosen again later (it does not stop the pursuit)
    chosen_again = 0
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        grads = torch.randn(12, 6, generator=gen, dtype=torch.float64)
        w = torch.rand(12, generator=gen, dtype=torch.float64) * 3
        got = omp_select(grads @ grads.T, w, 12, lam=0.01)
        dropped = []
        order, _ = _positive_omp_on_vectors(grads, w, 12, 0.01, dropped)
        assert got.order.tolist() == order
        chosen_again += any(j in order for j in dropped)
    assert chosen_again  # these pools have one such pursuit


def test_a_weight_of_exactly_zero_is_not_negative_and_stays():
    # Given a zero target (every pool weight 0): the first pick's ridge weight is exactly 0
    grads = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = torch.zeros(5, dtype=torch.float64)
    got = omp_select(grads @ grads.T, w, 3)
    order, weights = _positive_omp_on_vectors(grads, w, 3, 0.5)
    # Then it stays (only negative weights leave), and the pursuit stops there: its best
    # candidate is the one already chosen
    assert got.order.tolist() == order == [0]
    assert got.weights.tolist() == weights.tolist() == [0.0]


def test_pursue_runs_the_pursuit_asked_for_and_fills_a_short_one_at_weight_one():
    # Given 12 members (rows 2..13) of a weighted union of 14 gradients in 3 dimensions
    gen = torch.Generator().manual_seed(2)
    grads = torch.randn(14, 3, generator=gen, dtype=torch.float64)
    pool = torch.rand(14, generator=gen, dtype=torch.float64) + 0.5
    members = torch.arange(2, 14)
    for positive, oracle in ((True, _positive_omp_on_vectors), (False, _omp_on_vectors)):
        # When their 8 slots are filled
        keep, weights, result = pursue(grads @ grads.T, pool, members, 8, 0.01,
                                       positive=positive,
                                       generator=torch.Generator().manual_seed(0))
        # Then the pursuit asked for ran on the members against their weighted sum
        order, want = oracle(grads[members], pool[members], 8, 0.01)[:2]
        assert result is not None and result.order.tolist() == order
        by_row = dict(zip(members[order].tolist(), want.tolist(), strict=True))
        n = len(order)
        assert keep[:n].tolist() == sorted(by_row)
        torch.testing.assert_close(weights[:n], torch.tensor([by_row[r] for r in sorted(by_row)],
                                                             dtype=torch.float64),
                                   rtol=1e-6, atol=1e-9)
        # and a short pursuit (the nonnegative one stops early here) is filled with other
        # members at weight 1
        assert (n < 8) == positive
        assert len(set(keep.tolist())) == 8 and set(keep.tolist()) <= set(members.tolist())
        assert weights[n:].tolist() == [1.0] * (8 - n)


def test_class_budgets_are_proportional_capped_and_exact():
    assert class_budgets(torch.tensor([100, 100, 100]), torch.tensor([1.0, 1.0, 1.0]),
                         30).tolist() == [10, 10, 10]
    assert class_budgets(torch.tensor([100, 100]), torch.tensor([3.0, 1.0]), 8).tolist() == [6, 2]
    # a class capped by its candidates gives its surplus to the others
    assert class_budgets(torch.tensor([2, 100, 100]), torch.tensor([1.0, 1.0, 1.0]),
                         30).tolist() == [2, 14, 14]
    assert class_budgets(torch.tensor([2, 3]), torch.tensor([1.0, 1.0]), 30).tolist() == [2, 3]
    assert int(class_budgets(torch.tensor([7, 7, 7]), torch.tensor([1.0, 1.0, 1.0]),
                             10).sum()) == 10
    with pytest.raises(ValueError, match="available and share"):
        class_budgets(torch.tensor([1, 2]), torch.tensor([1.0]), 2)


def _largest_remainders(shares, k):
    """Hamilton's apportionment in exact fractions: floors of the quotas, then one more slot
    to each of the largest remainders (the shares below have no tied remainders)."""
    quotas = [Fraction(s) * k / sum(Fraction(s) for s in shares) for s in shares]
    out = [int(q) for q in quotas]
    by_remainder = sorted(range(len(shares)), key=lambda i: quotas[i] - out[i], reverse=True)
    for i in by_remainder[: k - sum(out)]:
        out[i] += 1
    return out


@pytest.mark.parametrize(("shares", "k"), [([5, 3, 2], 4), ([3, 2], 7), ([6, 1, 4, 2], 10)])
def test_class_budgets_without_caps_are_the_largest_remainders_of_any_scale_of_shares(shares, k):
    # Given classes with more candidates than slots, When k slots are split
    want = _largest_remainders(shares, k)
    avail = torch.full((len(shares),), 100)
    # Then the budgets are the exact largest-remainder apportionment of the shares, and
    # scaling every share by the same factor (here below 1 in all) changes nothing
    for scale in (1.0, 1 / 64):
        share = torch.tensor(shares, dtype=torch.float64) * scale
        assert class_budgets(avail, share, k).tolist() == want


def test_a_class_without_candidates_takes_no_part_and_one_candidate_is_enough():
    # Given a class with no candidates, Then the others split the slots as if it were absent
    with_empty = class_budgets(torch.tensor([0, 5, 5]), torch.tensor([5.0, 1.0, 1.0]), 4)
    assert with_empty.tolist() == [0] + class_budgets(torch.tensor([5, 5]),
                                                      torch.tensor([1.0, 1.0]), 4).tolist()
    # Given a class with a single candidate, Then it gets its proportional slot
    assert class_budgets(torch.tensor([1, 5]), torch.tensor([1.0, 1.0]), 2).tolist() == [1, 1]


def test_zero_shares_split_equally_and_every_slot_is_still_given():
    # Given shares that are all zero, Then the classes split the slots equally
    assert class_budgets(torch.tensor([5, 5]), torch.tensor([0.0, 0.0]), 4).tolist() == [2, 2]
    # Given the only class with a share capped at one candidate, Then the classes left
    # (share 0) take the surplus equally: min(k, sum(available)) slots in all
    got = class_budgets(torch.tensor([1, 5, 5]), torch.tensor([10.0, 0.0, 0.0]), 5)
    assert got.tolist() == [1, 2, 2]


def test_a_label_never_seen_has_no_seen_share():
    # Given candidates of labels 0, 0, 0, 1, 1, 2 and seen counts for labels 0 and 1 only
    usable, labels = torch.arange(10, 16), torch.tensor([0, 0, 0, 1, 1, 2])
    # When the "seen" shares split 5 slots
    groups = class_groups(usable, labels, torch.tensor([3, 1]), "seen", 5)
    # Then label 2 has share 0 (it gets only what the others cannot take)
    want = class_budgets(torch.tensor([3, 2, 1]), torch.tensor([3.0, 1.0, 0.0]), 5)
    assert [b for _, b in groups] == want.tolist()
    assert [m.tolist() for m, _ in groups] == [[10, 11, 12], [13, 14], [15]]


def _stream(n_classes, per_class, seed):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(per_class, D, generator=g) + 2 * c for c in range(n_classes)]
    ys = [torch.full((per_class,), c) for c in range(n_classes)]
    return torch.cat(xs), torch.cat(ys)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_buffer_keeps_class_budgets_along_a_disjoint_stream(seed):
    """The authors' per-class selection: every class seen keeps its share of the slots (the
    single unconstrained pursuit lets classes of the first tasks vanish)."""
    model = _model(seed)
    buf = GCRBuffer(12, recent_size=10, seed=seed)
    x, y = _stream(C, 20, seed)
    for i in range(0, len(y), 10):
        buf.add(x[i : i + 10], y[i : i + 10], model)
    counts = torch.bincount(buf.y[: buf.size], minlength=C)
    assert counts.tolist() == [3, 3, 3, 3]
    assert bool((buf.weights >= 0).all()) and bool(torch.isfinite(buf.weights).all())


@pytest.mark.parametrize("seed", [0, 1])
def test_each_class_keeps_its_nonnegative_omp_coreset(seed):
    """Per class: OMP on that class's candidates (stored at their weights, waiting at 1) for
    its budget, against the per-sample-loop float64 oracle; a short pursuit is filled."""
    model = _model(seed)
    buf = GCRBuffer(8, recent_size=10, seed=seed)
    x1, y1 = _data(10, seed + 1)
    buf.add(x1, y1, model)  # the union of 10 > 8
    classes, available = torch.unique(y1, return_counts=True)
    budgets = class_budgets(available, torch.ones(len(classes)), 8)  # equal shares
    grads = _loop_grads(model, x1, y1)
    stored = {tuple(r.tolist()): float(w) for r, w in zip(buf.x[: buf.size], buf.weights,
                                                           strict=True)}
    assert buf.size == 8
    for c, budget in zip(classes.tolist(), budgets.tolist(), strict=True):
        members = (y1 == c).nonzero().flatten()
        kept = [tuple(x1[i].tolist()) for i in members.tolist()
                if tuple(x1[i].tolist()) in stored]
        assert len(kept) == budget
        if len(members) <= budget:
            continue
        order, weights = _positive_omp_on_vectors(grads[members],
                                                  torch.ones(len(members), dtype=torch.float64),
                                                  budget, 0.5)
        for i, v in zip(order, weights.tolist(), strict=True):
            assert stored[tuple(x1[members[i]].tolist())] == pytest.approx(v, rel=1e-3,
                                                                           abs=1e-5)


def test_seen_shares_follow_the_class_frequencies():
    model = _model(0)
    x, y = _stream(2, 40, 0)
    x, y = torch.cat([x[:40], x[40:50]]), torch.cat([y[:40], y[40:50]])  # 40 of 0, 10 of 1
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    counts = {}
    for share in ("equal", "seen"):
        buf = GCRBuffer(10, recent_size=10, class_share=share)
        for i in range(0, 50, 10):
            buf.add(x[i : i + 10], y[i : i + 10], model)
        counts[share] = torch.bincount(buf.y[: buf.size], minlength=2).tolist()
    assert counts == {"equal": [5, 5], "seen": [8, 2]}
    with pytest.raises(ValueError, match="class_share must be one of equal, seen"):
        GCRBuffer(10, class_share="task")
