"""Streams by name (avalanche_gss.streams.REGISTRY): the built-in definitions build what
their generators build, transforms compose, and one's own stream registers by name."""

from __future__ import annotations

import pytest
import torch

from avalanche_gss.streams import (
    BLURRY_KEEP,
    REGISTRY,
    StreamDefinition,
    TaskSplit,
    blurred,
    blurry_tasks,
    disjoint_tasks,
    gradual_drift,
    gradual_tasks,
    imbalanced_tasks,
    permuted_tasks,
    register_stream,
)

DIM = 6
SEEDS = (0, 1, 7)


def assert_same(a: TaskSplit, b: TaskSplit) -> None:
    """Every tensor, class set and protocol entry of ``a`` equals ``b``'s."""
    assert a.task_classes == b.task_classes and a.num_classes == b.num_classes
    assert a.protocol == b.protocol and (a.dataset, a.data_source) == (b.dataset, b.data_source)
    for part in ("train", "test"):
        for (xa, ya), (xb, yb) in zip(getattr(a, part), getattr(b, part), strict=True):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.mark.parametrize("seed", SEEDS)
def test_each_builtin_stream_builds_what_its_generator_builds(toy, seed):
    build = {name: REGISTRY[name].build for name in REGISTRY.builtin_names()}
    assert_same(build["disjoint"](toy, seed=seed, samples_per_task=20),
                disjoint_tasks(toy, samples_per_task=20, seed=seed))
    assert_same(build["permuted"](toy, seed=seed, samples_per_task=20),
                permuted_tasks(toy, n_tasks=10, samples_per_task=20, seed=seed))
    assert_same(build["imbalanced"](toy, seed=seed, sequence=2, major=40, minor=4),
                imbalanced_tasks(toy, sequence=2, major=40, minor=4, seed=seed))
    # blurry: the disjoint stream, then blurred with the same seed (the paper's 90%)
    assert_same(build["blurry"](toy, seed=seed, samples_per_task=20),
                blurry_tasks(disjoint_tasks(toy, samples_per_task=20, seed=seed),
                             keep=BLURRY_KEEP, seed=seed))
    assert_same(build["blurry"](toy, seed=seed, samples_per_task=20, keep=0.5),
                blurry_tasks(disjoint_tasks(toy, samples_per_task=20, seed=seed), keep=0.5,
                             seed=seed))


def test_the_builtin_names_describe_themselves():
    assert REGISTRY.builtin_names() == ("disjoint", "permuted", "imbalanced", "blurry")
    for name in REGISTRY.builtin_names():
        definition = REGISTRY[name]
        assert "\n" not in definition.describe() and definition.description
        assert isinstance(definition.facts["class_disjoint"], bool)
    assert REGISTRY["blurry"].facts["blur"] == BLURRY_KEEP == REGISTRY["blurry"].options["keep"]
    assert "blur" not in REGISTRY["disjoint"].facts
    assert set(REGISTRY["blurry"].options) == {*REGISTRY["disjoint"].options, "keep"}


def test_an_unknown_option_or_a_transform_applied_twice_is_refused_in_one_line(toy):
    with pytest.raises(ValueError, match=r"^stream option\(s\) 'keep' unknown to .* it "
                                         r"takes n_tasks, classes_per_task, samples_per_task$"):
        REGISTRY["disjoint"].build(toy, keep=0.5)
    with pytest.raises(ValueError, match="already takes option 'keep'"):
        blurred(REGISTRY["blurry"])
    with pytest.raises(ValueError, match=r"keep must be a number in \(0, 1\], got 1.5"):
        blurred(REGISTRY["disjoint"], keep=1.5)
    with pytest.raises(ValueError, match=r"window must be a number in \(0, 1\], got 0"):
        gradual_drift(REGISTRY["disjoint"], window=0)
    with pytest.raises(ValueError, match="one non-empty line"):
        StreamDefinition(disjoint_tasks, "two\nlines")


@pytest.mark.parametrize("seed", SEEDS)
def test_transforms_compose_each_seeded_by_the_run_seed(toy, seed):
    drifting = gradual_drift(blurred(REGISTRY["disjoint"], keep=0.8), window=0.6)
    assert drifting.options == {**REGISTRY["disjoint"].options, "keep": 0.8, "window": 0.6}
    assert drifting.facts == {"class_disjoint": False, "blur": 0.8, "drift_window": 0.6}
    assert "80%" in drifting.description and "60%" in drifting.description
    base = disjoint_tasks(toy, samples_per_task=20, seed=seed)
    expected = gradual_tasks(blurry_tasks(base, keep=0.8, seed=seed), window=0.6, seed=seed)
    assert_same(drifting.build(toy, seed=seed, samples_per_task=20), expected)


def _sources(x: torch.Tensor) -> list[int]:
    return (x[:, 0] // DIM).long().tolist()


def test_gradual_drift_ramps_from_one_task_to_the_next_and_loses_nothing(toy_factory):
    data = toy_factory(n_classes=4, train_per_class=400)
    base = disjoint_tasks(data, n_tasks=2, samples_per_task=800, seed=3)
    split = gradual_tasks(base, window=1.0, seed=3)
    assert split.train_sizes == base.train_sizes and split.test == base.test
    assert split.task_classes == base.task_classes and not split.is_class_disjoint
    assert sorted(_sources(torch.cat([x for x, _ in split.train]))) == \
        sorted(_sources(torch.cat([x for x, _ in base.train])))
    assert split.protocol["gradual"] == {"window": 1.0, "seed": 3, "blended_per_boundary": [400]}
    # Outside the window nothing moves; inside, the next task's share grows linearly.
    y = torch.cat([y for _, y in split.train])
    assert torch.equal(split.train[0][1][:400], base.train[0][1][:400])
    assert torch.equal(split.train[1][1][400:], base.train[1][1][400:])
    share = (y[400:1200] >= 2).float().view(4, 200).mean(dim=1)  # per quarter of the window
    assert share.tolist() == sorted(share.tolist())
    assert abs(share[0] - 0.125) < 0.08 and abs(share[3] - 0.875) < 0.08  # 1/8, 7/8 expected
    assert_same(gradual_tasks(base, window=1.0, seed=3), split)  # seeded: the same again
    with pytest.raises(ValueError, match="at least two tasks"):
        gradual_tasks(disjoint_tasks(data, n_tasks=1, samples_per_task=8), window=0.5)


def test_a_stream_of_ones_own_registers_by_name_and_the_packages_stay(toy):
    mine = gradual_drift(REGISTRY["disjoint"], window=0.5)
    try:
        assert register_stream("mine-gradual", mine) is mine
        assert REGISTRY["mine-gradual"] is mine and "mine-gradual" not in REGISTRY.builtin_names()
        split = REGISTRY["mine-gradual"].build(toy, seed=1, samples_per_task=20)
        assert split.protocol["gradual"]["window"] == 0.5
        with pytest.raises(ValueError, match="'mine-gradual' is already registered"):
            register_stream("mine-gradual", mine)
        assert register_stream("mine-gradual", REGISTRY["disjoint"], replace=True) \
            is REGISTRY["disjoint"]
    finally:
        REGISTRY.remove("mine-gradual")
    with pytest.raises(ValueError, match="'blurry' is already registered$"):
        register_stream("blurry", mine, replace=True)
    with pytest.raises(TypeError, match="takes a StreamDefinition, got function"):
        register_stream("fn", disjoint_tasks)  # type: ignore[arg-type]
