"""Shared fixtures: a tiny task-free stream of real MNIST digits (offline copy)."""

import pytest
import torch

from avalanche_gss.benchmarks import disjoint_tasks, load_dataset


@pytest.fixture(scope="session")
def mnist():
    return load_dataset("mnist-5k")


@pytest.fixture(scope="session")
def tiny_split(mnist):
    """5 disjoint tasks of 60 real digits each (300 samples, 30 batches)."""
    return disjoint_tasks(mnist, samples_per_task=60, seed=0)


@pytest.fixture(autouse=True)
def _single_thread():
    # Tiny models: one thread is faster and immune to oversubscription on 2 cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
