"""Avalanche 0.6.0's ``tests/training/test_replay.py`` with the buffers of avalanche-gss.

Adapted from Avalanche (https://github.com/ContinualAI/avalanche, tag v0.6.0, MIT License,
Copyright (c) 2020 ContinualAI). Each test is Avalanche's, with its storage policies
(``ExperienceBalancedBuffer``, ``ClassBalancedBuffer``, ``ReservoirSamplingBuffer``,
``ParametricBuffer``) replaced by ours and parametrised over every buffer its expectation
applies to; the ``unittest`` classes became pytest functions, prints were dropped.

Not adapted:

* ``ReplayTest.test_replay_flattening``, its first two checks: they flatten subsets of
  Avalanche's own datasets, with no storage policy (its third check is adapted below).
* ``ReplayTest.test_class_balanced_replay_flattening``: the same check as the third one of
  ``test_replay_flattening``, on Avalanche's ``ClassBalancedBuffer``; with our buffers both
  tests are the same test (``test_replay_flattening`` below).
* ``ParametricBufferTest.test_groupings`` with ``groupby=None`` and ``groupby="experience"``:
  our buffers group by class (``buffer_groups``) and by task (``task_groups``) only.
* ``SelectionStrategyTest.test``: herding and closest-to-centre are Avalanche's
  ``ExemplarsSelectionStrategy`` for its ``ParametricBuffer``; avalanche-gss has none.
"""

from unittest.mock import MagicMock

import pytest
from avalanche.benchmarks.utils.flat_data import _flatdata_depth
from avalanche.models import SimpleMLP
from avalanche.training.plugins import ReplayPlugin
from avalanche.training.supervised import Naive
from torch.nn import CrossEntropyLoss
from torch.optim import SGD

from .unit_tests_utils import BUFFERS, CLUSTERING, FILLING, SCORED, get_fast_benchmark


def _replay_balanced_memory(name, mem_size):
    """Avalanche's ``_test_replay_balanced_memory``; yields (samples seen, buffer size)."""
    benchmark = get_fast_benchmark(use_task_labels=True)
    model = SimpleMLP(input_size=6, hidden_size=10)
    storage_policy = BUFFERS[name](mem_size)
    replayPlugin = ReplayPlugin(mem_size=mem_size, storage_policy=storage_policy)
    cl_strategy = Naive(
        model=model,
        optimizer=SGD(model.parameters(), lr=0.001, momentum=0.9, weight_decay=0.001),
        criterion=CrossEntropyLoss(),
        train_mb_size=32,
        train_epochs=1,
        eval_mb_size=100,
        plugins=[replayPlugin],
    )

    n_seen_data = 0
    for step in benchmark.train_stream:
        n_seen_data += len(step.dataset)
        cl_strategy.train(step)
        lengths = []
        for d in replayPlugin.storage_policy.buffer_datasets:
            lengths.append(len(d))
        yield n_seen_data, sum(lengths)


# Avalanche runs it for None (its default ExperienceBalancedBuffer), ExperienceBalancedBuffer
# and ClassBalancedBuffer.
@pytest.mark.parametrize("name", FILLING)
def test_replay_balanced_memory(name):
    mem_size = 25
    for n_seen_data, filled in _replay_balanced_memory(name, mem_size):
        mem_fill = min(mem_size, n_seen_data)
        assert filled == mem_fill  # Always fully filled


# "Always fully filled" does not apply to a clustering buffer (it may hold fewer than M
# centres by design); what does: it is filled, never beyond M nor beyond what it saw.
@pytest.mark.parametrize("name", CLUSTERING)
def test_replay_balanced_memory_clustering(name):
    mem_size = 25
    for n_seen_data, filled in _replay_balanced_memory(name, mem_size):
        assert 0 < filled <= min(mem_size, n_seen_data)


def _balancing(name):
    """Avalanche's ``assert_balancing``; yields (buffer size, max_size) after each exp."""
    benchmark = get_fast_benchmark(use_task_labels=True)
    # Avalanche: ExperienceBalancedBuffer(100, adaptive_size=True) and
    # ClassBalancedBuffer(100, adaptive_size=True); ours have no adaptive_size.
    policy = BUFFERS[name](100)
    replay = ReplayPlugin(mem_size=100, storage_policy=policy)
    # Avalanche's model takes 784 inputs: with train_epochs=0 it never runs on the
    # 6-feature data, but a scored buffer runs it, so it gets the data's input size.
    extra = {"input_size": 6} if name in SCORED else {}
    model = SimpleMLP(num_classes=benchmark.n_classes, **extra)

    # CREATE THE STRATEGY INSTANCE (NAIVE)
    cl_strategy = Naive(
        model=model,
        optimizer=SGD(model.parameters(), lr=0.001),
        criterion=CrossEntropyLoss(),
        train_mb_size=100,
        train_epochs=0,
        eval_mb_size=100,
        plugins=[replay],
        evaluator=None,
    )

    for exp in benchmark.train_stream:
        cl_strategy.train(exp)

        ext_mem = policy.buffer_groups
        ext_mem_data = policy.buffer_datasets
        assert len(ext_mem) == len(ext_mem_data)

        len_tot = sum([len(el) for el in ext_mem_data])
        yield len_tot, policy.max_size


@pytest.mark.parametrize("name", FILLING)
def test_balancing(name):
    for len_tot, max_size in _balancing(name):
        # buffer size should equal self.mem_size if data is large enough
        assert len_tot == max_size


# Not fully filled by design (see above): never beyond max_size, never empty.
@pytest.mark.parametrize("name", CLUSTERING)
def test_balancing_clustering(name):
    for len_tot, max_size in _balancing(name):
        assert 0 < len_tot <= max_size


# Its third check (replay buffer data is flattened), for every buffer; the scored ones get
# the model they need.
@pytest.mark.parametrize("name", list(BUFFERS))
def test_replay_flattening(name):
    benchmark = get_fast_benchmark(use_task_labels=True)
    model = SimpleMLP(input_size=6, hidden_size=10)
    extra = {"model": model} if name in SCORED else {}

    # check that replay buffer data is flattened
    storage_policy = BUFFERS[name](100)
    base_depth = None
    for experience in benchmark.train_stream:
        storage_policy.update_from_dataset(experience.dataset, **extra)
        if base_depth is None:
            base_depth = _flatdata_depth(storage_policy.buffer._flat_data)
    assert _flatdata_depth(storage_policy.buffer._flat_data) == base_depth


# ParametricBufferTest.test_groupings. Avalanche's test only prints the groups' sizes; the
# asserts below check what it prints: every group holds its own class (task) only, and the
# groups together are the buffer. Avalanche passes ``MagicMock(experience=exp)`` as the
# strategy; the scored buffers need the model and its device, which the mock then carries
# (for every buffer here; Avalanche's bare mock is test_groupings_mock_strategy below).
def _groupings(policy, extra):
    benchmark = get_fast_benchmark(use_task_labels=True)
    for exp in benchmark.train_stream:
        policy.update(MagicMock(experience=exp, **extra))
        for by, groups in (("class", policy.buffer_groups), ("task", policy.task_groups)):
            groups_lens = [(g_id, len(g_data.buffer)) for g_id, g_data in groups.items()]
            assert sum(n for _, n in groups_lens) == len(policy) <= policy.max_size
            for g_id, g_data in groups.items():
                data = g_data.buffer
                labels = data.targets if by == "class" else data.targets_task_labels
                assert set(labels) == {g_id}
                assert len(g_data) == len(data) > 0


@pytest.mark.parametrize("name", list(BUFFERS))
def test_groupings(name):
    model = SimpleMLP(input_size=6, hidden_size=10)
    _groupings(BUFFERS[name](10), {"model": model, "device": "cpu"})


# Avalanche's own call, MagicMock(experience=exp), for the buffers that need no model.
@pytest.mark.parametrize("name", ["reservoir", "rand"])
def test_groupings_mock_strategy(name):
    _groupings(BUFFERS[name](10), {})
