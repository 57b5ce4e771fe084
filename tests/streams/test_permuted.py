"""permuted_tasks: distinct permutations applied consistently to train and test."""

from __future__ import annotations

import pytest
import torch

from avalanche_gss.streams import ArrayDataset, permuted_tasks, task_permutations

DIM = 6


def test_permutations_are_distinct_and_identity_first() -> None:
    perms = task_permutations(10, 784, seed=0)
    assert perms.shape == (10, 784)
    assert torch.equal(perms[0], torch.arange(784))
    assert len({tuple(p.tolist()) for p in perms}) == 10
    for p in perms:
        assert torch.equal(p.sort().values, torch.arange(784))  # each is a permutation
    # Tiny feature spaces still get distinct permutations, or a clear error.
    small = task_permutations(6, 3, seed=0)
    assert len({tuple(p.tolist()) for p in small}) == 6
    with pytest.raises(ValueError, match="only 6 permutations"):
        task_permutations(7, 3)
    assert not torch.equal(task_permutations(3, 50, identity_first=False)[0], torch.arange(50))


def test_each_task_applies_its_permutation_to_train_and_test(toy) -> None:
    split = permuted_tasks(toy, n_tasks=4, samples_per_task=25, seed=1)
    perms = task_permutations(4, DIM, seed=1)
    for k in range(4):
        x, y = split.train[k]
        src = (x.min(dim=1).values // DIM).long()  # rows are permutations of source rows
        assert torch.equal(x, toy.x_train[src][:, perms[k]])
        assert torch.equal(y, toy.y_train[src])
        xt, yt = split.test[k]
        assert torch.equal(xt, toy.x_test[:, perms[k]]) and torch.equal(yt, toy.y_test)
        assert split.task_classes[k] == tuple(range(10))
    assert torch.equal(split.train[0][0], toy.x_train[(split.train[0][0][:, 0] // DIM).long()])
    assert split.train_sizes == (25,) * 4 and split.test_sizes == (50,) * 4


def test_image_shape_is_kept() -> None:
    x = torch.rand(20, 1, 4, 4)
    data = ArrayDataset("img", "t", x, torch.arange(20) % 2, x[:4], torch.arange(4) % 2, 2)
    split = permuted_tasks(data, n_tasks=3, samples_per_task=None, seed=0)
    perm = task_permutations(3, 16, seed=0)[2]
    assert split.train[2][0].shape == (20, 1, 4, 4)
    assert torch.equal(split.test[2][0], x[:4].flatten(1)[:, perm].view(4, 1, 4, 4))


def test_seeds_make_it_deterministic_and_permutation_seed_fixes_permutations(toy) -> None:
    a = permuted_tasks(toy, n_tasks=3, samples_per_task=30, seed=0)
    b = permuted_tasks(toy, n_tasks=3, samples_per_task=30, seed=0)
    c = permuted_tasks(toy, n_tasks=3, samples_per_task=30, seed=1)
    assert all(torch.equal(p[0], q[0]) for p, q in zip(a.train, b.train, strict=True))
    assert not torch.equal(a.train[1][0], c.train[1][0])
    assert not torch.equal(a.test[1][0], c.test[1][0])  # permutations follow seed by default
    d = permuted_tasks(toy, n_tasks=3, samples_per_task=30, seed=1, permutation_seed=0)
    assert all(torch.equal(p[0], q[0]) for p, q in zip(a.test, d.test, strict=True))
    assert d.protocol["permutation_seed"] == 0 and d.protocol["seed"] == 1


def test_more_samples_than_exist(toy) -> None:
    with pytest.raises(ValueError, match="only 300"):
        permuted_tasks(toy, samples_per_task=301)
