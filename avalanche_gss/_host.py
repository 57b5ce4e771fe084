"""Where a tensor lives, for code that picks a host loop or device ops by it.

A few small decisions (which slots to replay, say) are cheaper as a Python loop over host
values than as tensor ops, but reading a tensor that lives on an accelerator makes the host
wait for it. Such code asks :func:`on_host` first and keeps its tensor ops otherwise.
``benchmarks/host_syncs.py`` counts a GPU run's syncs on any machine: it replaces this
function by its own model of which tensors a GPU run keeps on the device, so that the count
follows the branch a GPU run takes.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["on_host"]


def on_host(*tensors: Tensor) -> bool:
    """Whether every tensor is on the host (the CPU), so that reading it costs no device sync.

    :param tensors: the tensors the caller would read.
    """
    return all(t.device.type == "cpu" for t in tensors)
