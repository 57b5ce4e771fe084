"""Avalanche 0.6.0's ``tests/streams/utils/test_flat_data.py`` with avalanche-gss buffers.

Adapted from Avalanche (https://github.com/ContinualAI/avalanche, tag v0.6.0, MIT License,
Copyright (c) 2020 ContinualAI): ``FlatteningTests.test_flattening_replay_ocl``, its
``ReservoirSamplingBuffer(100)`` replaced by each of our buffers (the scored ones get the
model they need; the buffers with a recent buffer get ``recent_size=1``, so that each
one-sample experience is merged at once: with 10 nothing would be stored after the
7 samples the test offers, and the check would be vacuous).

Not adapted: every other test of the file (``AvalancheDatasetTests``, the other
``FlatteningTests``, ``LazyIndicesTests``) exercises Avalanche's own ``FlatData`` /
``AvalancheDataset``, with no storage policy to swap.
"""

import pytest
from avalanche.benchmarks import FixedSizeExperienceSplitter
from avalanche.models import SimpleMLP

from .unit_tests_utils import BUFFERS, SCORED, get_fast_benchmark


@pytest.mark.parametrize("name", list(BUFFERS))
def test_flattening_replay_ocl(name):
    benchmark = get_fast_benchmark()
    buffer = BUFFERS[name](100, 1)
    model = SimpleMLP(input_size=6, hidden_size=10)
    extra = {"model": model} if name in SCORED else {}

    for t, exp in enumerate(FixedSizeExperienceSplitter(benchmark.train_stream[0], 1, None)):
        buffer.update_from_dataset(exp.dataset, **extra)
        b = buffer.buffer
        if t > 5:
            break
    assert len(b) > 0  # not in Avalanche's test: the check below is not vacuous
    assert len(b._datasets) <= 2

    for t, exp in enumerate(FixedSizeExperienceSplitter(benchmark.train_stream[1], 1, None)):
        buffer.update_from_dataset(exp.dataset, **extra)
        b = buffer.buffer
        if t > 5:
            break
    assert len(b) > 0
    assert len(b._datasets) <= 2
