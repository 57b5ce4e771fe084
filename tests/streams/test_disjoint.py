"""disjoint_tasks and imbalanced_tasks: class splits, counts, sampling, seeds."""

from __future__ import annotations

import json

import pytest
import torch

from avalanche_gss.streams import (
    disjoint_tasks,
    imbalanced_counts,
    imbalanced_tasks,
    load_mnist_5k,
)

DIM = 6  # feature width of the toy data (conftest.make_toy)


def _sources(x: torch.Tensor) -> torch.Tensor:
    """Source sample index of each toy train row (x[i, j] = i * DIM + j)."""
    return (x[:, 0] // DIM).long()


def test_each_task_has_exactly_its_consecutive_classes(toy) -> None:
    split = disjoint_tasks(toy, samples_per_task=40, seed=0)
    assert split.task_classes == ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))
    assert split.is_class_disjoint
    for classes, (_x, y), (xt, yt) in zip(split.task_classes, split.train, split.test, strict=True):
        assert set(y.tolist()) == set(classes)  # both classes present, nothing else
        assert len(y) == 40
        # Test set = every test sample of the task's classes, nothing else.
        expected = torch.isin(toy.y_test, torch.tensor(classes))
        assert torch.equal(xt, toy.x_test[expected]) and torch.equal(yt, toy.y_test[expected])


def test_train_samples_are_distinct_real_samples_with_their_labels(toy) -> None:
    split = disjoint_tasks(toy, samples_per_task=50, seed=3)
    all_src = []
    for x, y in split.train:
        src = _sources(x)
        assert torch.equal(x, toy.x_train[src]) and torch.equal(y, toy.y_train[src])
        all_src.append(src)
    src = torch.cat(all_src)
    assert src.unique().numel() == src.numel()  # no sample twice


def test_within_task_order_is_shuffled_and_seeded(toy) -> None:
    a = disjoint_tasks(toy, samples_per_task=60, seed=0)  # all 60 samples of each class pair
    b = disjoint_tasks(toy, samples_per_task=60, seed=0)
    c = disjoint_tasks(toy, samples_per_task=60, seed=1)
    for (xa, ya), (xb, yb), (xc, _) in zip(a.train, b.train, c.train, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert not torch.equal(xa, xc)  # same samples, different order
        assert torch.equal(_sources(xa).sort().values, _sources(xc).sort().values)
        assert not torch.equal(_sources(xa), _sources(xa).sort().values)  # not in file order


def test_subsets_differ_across_seeds(toy) -> None:
    a = disjoint_tasks(toy, samples_per_task=20, seed=0)
    b = disjoint_tasks(toy, samples_per_task=20, seed=1)
    assert set(_sources(a.train[0][0]).tolist()) != set(_sources(b.train[0][0]).tolist())


def test_custom_class_order_and_all_samples(toy) -> None:
    split = disjoint_tasks(
        toy, n_tasks=2, classes_per_task=3, samples_per_task=None, class_order=[9, 0, 4, 1, 2, 3]
    )
    assert split.task_classes == ((0, 4, 9), (1, 2, 3))
    assert split.train_sizes == (90, 90)


def test_asking_for_more_samples_than_exist_says_how_many(toy) -> None:
    with pytest.raises(ValueError, match="only 60"):
        disjoint_tasks(toy, samples_per_task=61)


def test_too_many_tasks_for_the_classes(toy) -> None:
    with pytest.raises(ValueError, match="need 12 classes"):
        disjoint_tasks(toy, n_tasks=6, classes_per_task=2)
    with pytest.raises(ValueError, match="absent"):
        disjoint_tasks(toy, class_order=[0, 1, 2, 3, 4, 5, 6, 7, 8, 11])


def test_protocol_records_the_settings_and_is_json(toy) -> None:
    split = disjoint_tasks(toy, samples_per_task=[10, 20, 30, 40, 50], seed=7)
    assert split.train_sizes == (10, 20, 30, 40, 50)
    p = json.loads(json.dumps(split.protocol))
    assert p["stream"] == "disjoint" and p["seed"] == 7
    assert p["train_sizes"] == [10, 20, 30, 40, 50] and p["task_classes"][4] == [8, 9]
    assert split.data_source == toy.source and split.dataset == "toy"


# --- imbalanced (Table 4) ---------------------------------------------------------------
def test_imbalanced_counts_follow_table_4() -> None:
    assert imbalanced_counts(1) == [2000, 200, 200, 200, 200]
    assert imbalanced_counts(4) == [200, 200, 200, 2000, 200]
    for bad in (0, 6):
        with pytest.raises(ValueError, match="1..5"):
            imbalanced_counts(bad)


@pytest.mark.parametrize("sequence", [1, 2, 3, 4, 5])
def test_imbalanced_sequence_gives_one_major_task(toy, sequence: int) -> None:
    split = imbalanced_tasks(toy, sequence=sequence, major=50, minor=5, seed=0)
    sizes = list(split.train_sizes)
    assert sizes[sequence - 1] == 50 and sizes.count(5) == 4
    assert max(sizes) / min(sizes) == 10  # the paper's order-of-magnitude imbalance
    assert split.is_class_disjoint
    assert split.protocol["stream"] == "imbalanced" and split.protocol["sequence"] == sequence


def test_imbalanced_on_the_offline_digits_needs_explicit_scaling() -> None:
    # 800 training digits per class pair offline: 2000 cannot be drawn.
    with pytest.raises(ValueError, match="only 800"):
        imbalanced_tasks(load_mnist_5k(), sequence=1)
