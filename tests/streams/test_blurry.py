"""blurry_tasks: exact share of foreign samples, nothing lost or duplicated."""

from __future__ import annotations

import pytest
import torch

from avalanche_gss.streams import blurry_tasks, disjoint_tasks, imbalanced_tasks

DIM = 6


def _sources(x: torch.Tensor) -> torch.Tensor:
    return (x[:, 0] // DIM).long()


@pytest.mark.parametrize("keep", [0.9, 0.75])
def test_each_task_gets_exactly_one_minus_keep_foreign_samples(toy, keep: float) -> None:
    base = disjoint_tasks(toy, samples_per_task=60, seed=0)
    split = blurry_tasks(base, keep=keep, seed=0)
    n_foreign = 60 - int(60 * keep)
    assert split.train_sizes == base.train_sizes
    origins_seen = set()
    for k, ((x, y), classes) in enumerate(zip(split.train, split.task_classes, strict=True)):
        own = torch.isin(y, torch.tensor(classes))
        assert int((~own).sum()) == n_foreign  # foreign share = 1 - keep, exactly
        kept = set(_sources(x[own]).tolist())
        assert kept <= set(_sources(base.train[k][0]).tolist())  # kept ones are its own
        origins_seen.add(len({int(c) // 2 for c in y[~own].tolist()}))
        assert torch.equal(x, toy.x_train[_sources(x)]) and torch.equal(y, toy.y_train[_sources(x)])
    assert max(origins_seen) > 1  # foreign samples are mixed from several tasks
    # Nothing lost, nothing duplicated: the stream is a re-dealing of the same samples.
    before = torch.cat([_sources(x) for x, _ in base.train]).sort().values
    after = torch.cat([_sources(x) for x, _ in split.train]).sort().values
    assert torch.equal(before, after)
    for (xt, yt), (bt, byt) in zip(split.test, base.test, strict=True):
        assert torch.equal(xt, bt) and torch.equal(yt, byt)
    assert split.protocol["blurry"] == {
        "keep": keep,
        "seed": 0,
        "foreign_per_task": [n_foreign] * 5,
    }
    assert not split.is_class_disjoint


def test_blurry_is_seeded(toy) -> None:
    base = disjoint_tasks(toy, samples_per_task=60, seed=0)
    a, b, c = (blurry_tasks(base, seed=s) for s in (0, 0, 1))
    assert all(torch.equal(p[0], q[0]) for p, q in zip(a.train, b.train, strict=True))
    assert not all(torch.equal(p[0], q[0]) for p, q in zip(a.train, c.train, strict=True))


def test_keep_one_changes_nothing_but_order(toy) -> None:
    base = disjoint_tasks(toy, samples_per_task=30, seed=0)
    split = blurry_tasks(base, keep=1.0)
    for (x, _), (bx, _) in zip(split.train, base.train, strict=True):
        assert torch.equal(_sources(x).sort().values, _sources(bx).sort().values)


def test_invalid_blurs_raise(toy) -> None:
    base = disjoint_tasks(toy, samples_per_task=30, seed=0)
    for keep in (0.0, 1.5):
        with pytest.raises(ValueError, match="keep"):
            blurry_tasks(base, keep=keep)
    lopsided = imbalanced_tasks(toy, sequence=1, major=60, minor=5)
    with pytest.raises(ValueError, match="gives away"):
        blurry_tasks(lopsided, keep=0.5)
