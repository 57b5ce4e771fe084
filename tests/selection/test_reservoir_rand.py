"""Reservoir (Vitter's Algorithm R) and the paper's Rand, as slot assignments."""

import pytest
import torch

from avalanche_gss.selection.rand import rand_slots
from avalanche_gss.selection.reservoir import reservoir_slots


def _stream(assign, n_items: int, capacity: int, batch: int, seed: int) -> torch.Tensor:
    """Run a stream through a slot policy; return the stream ids left in the buffer."""
    g = torch.Generator().manual_seed(seed)
    buf = torch.full((capacity,), -1, dtype=torch.long)
    size = 0
    for start in range(0, n_items, batch):
        ids = torch.arange(start, min(start + batch, n_items))
        slots = assign(start, size, len(ids), capacity, g)
        kept = slots >= 0
        assert len(torch.unique(slots[kept])) == int(kept.sum())  # distinct slots
        buf[slots[kept]] = ids[kept]
        size = max(size, int(slots.max()) + 1) if kept.any() else size
        assert size <= capacity
        assert (buf[:size] >= 0).all()  # filled contiguously
    return buf[:size]


def _reservoir(n_seen, size, n_new, capacity, g):
    return reservoir_slots(n_seen, n_new, capacity, generator=g)


def _rand(n_seen, size, n_new, capacity, g):
    return rand_slots(size, n_new, capacity, generator=g)


def test_reservoir_fills_then_never_exceeds_capacity():
    kept = _stream(_reservoir, n_items=95, capacity=30, batch=10, seed=0)
    assert len(kept) == 30


def test_reservoir_slots_are_int64_for_any_batch_even_an_empty_one():
    # The documented (n_new,) int64 result, which callers concatenate with other slots:
    # an empty list would otherwise become a float32 tensor
    for n_seen, n_new in ((0, 0), (7, 0), (0, 4), (50, 4)):
        slots = reservoir_slots(n_seen, n_new, 5, generator=torch.Generator().manual_seed(0))
        assert slots.dtype == torch.long and slots.shape == (n_new,)


@pytest.mark.slow
def test_reservoir_is_uniform_over_the_stream():
    # Given a stream of 100 items and M = 20, every item should survive with p = 0.2.
    # When the stream is replayed 3,000 times (batches of 10, as online),
    # Then a chi-square test on the inclusion counts accepts uniformity, and the
    # first and last halves of the stream are equally represented.
    trials, n, m = 3000, 100, 20
    counts = torch.zeros(n)
    for seed in range(trials):
        counts[_stream(_reservoir, n, m, 10, seed)] += 1
    expected = trials * m / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 99.9th percentile of chi-square with 99 degrees of freedom is ~148.2
    assert chi2 < 148.2, chi2
    first, last = counts[: n // 2].sum(), counts[n // 2 :].sum()
    assert abs(float(first - last)) / float(counts.sum()) < 0.02


def test_reservoir_batch_equals_one_at_a_time():
    # A batch is processed as if its samples arrived one by one: same draws, same result.
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    whole = reservoir_slots(50, 10, 20, generator=g1)
    draws = torch.rand(10, generator=g2, dtype=torch.float64)
    expected = []
    for k in range(10):
        j = int(draws[k] * (50 + k + 1))
        expected.append(j if j < 20 else -1)
    for k in range(10):  # later samples overwrite earlier ones with the same slot
        if expected[k] >= 0 and expected[k] in expected[k + 1 :]:
            expected[k] = -1
    assert whole.tolist() == expected


def test_rand_favours_recent_samples():
    # Rand keeps a uniform M of buffer ∪ batch at each step, so old samples decay
    # geometrically: the last quarter of the stream is over-represented.
    counts = torch.zeros(200)
    for seed in range(300):
        counts[_stream(_rand, 200, 40, 10, seed)] += 1
    assert counts[150:].sum() > 3 * counts[:50].sum()
    # And the batch that just arrived survives with probability M / (M + B).
    survive = counts[190:].sum() / (300 * 10)
    assert abs(float(survive) - 40 / 50) < 0.03


def test_rand_fill_phase_appends():
    assert rand_slots(0, 10, 30).tolist() == list(range(10))
    assert rand_slots(25, 5, 30).tolist() == list(range(25, 30))
