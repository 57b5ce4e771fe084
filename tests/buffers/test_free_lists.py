"""No buffer's ``add`` leaves tuples behind in CPython's free lists, batch after batch.

CPython keeps freed tuples of each length 1-20 in a free list (up to 2,000 per length)
that only a full garbage collection empties. A tuple built from a generator is resized in
place instead of being taken from that list, so each one freed makes the list one longer.
The scored buffers made one such tuple per batch (their model key), so on the stock
``Naive`` + ``ReplayPlugin`` route one more free list filled again after each full
collection than with Avalanche's buffer: refills like these are the steps of resident
memory that ``benchmarks/replay_route_memory.py`` measures (see the user guide, "Notes").
"""

import gc
import platform
import sys

import pytest
import torch
from avalanche.models import SimpleMLP
from helpers import benchmark_script

from avalanche_gss import methods

pytestmark = pytest.mark.skipif(
    platform.python_implementation() != "CPython" or not hasattr(sys, "_debugmallocstats"),
    reason="CPython's allocator statistics")


_free_tuples = benchmark_script("rss").free_tuples  # the memory benchmarks' reader of the lists


def test_the_statistics_see_a_generator_built_tuple_stay_in_the_free_list():
    # The probe itself: 100 tuples built from generators leave 100 more in the list
    values = [1, 2, 3, 4, 5, 6, 7]
    gc.collect()  # a full collection empties the free lists
    before = _free_tuples()[7]
    for _ in range(100):
        tuple(v for v in values)
    assert _free_tuples()[7] - before >= 100


@pytest.mark.parametrize("name", methods.NAMES)
def test_a_batch_leaves_no_tuple_in_the_free_lists(name):
    torch.manual_seed(0)
    model = SimpleMLP(num_classes=10, input_size=8, hidden_size=16)
    buffer = methods.get(name).buffer(20, seed=0)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.rand(10, 8, generator=g), torch.randint(0, 10, (10,), generator=g))
               for _ in range(110)]
    for x, y in batches[:10]:  # the buffer fills; first-time work is done
        buffer.add(x, y, model=model)
    gc.collect()
    before = _free_tuples()
    for x, y in batches[10:]:
        buffer.add(x, y, model=model)
    after = _free_tuples()
    # One tuple per batch would add 100 to a list; a batch's own short-lived tuples add a
    # few. Lengths 1 and 2 are left out: torch's own calls leave tuples of those lengths
    # (torch.autograd.grad one 1-tuple per call, and one of its number of tensor inputs).
    grown = {n: after[n] - before[n] for n in after
             if n > 2 and after[n] - before[n] >= 50}
    assert not grown, f"{name}: free tuples of these lengths grew over 100 batches: {grown}"
