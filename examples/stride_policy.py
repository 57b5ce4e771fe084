"""Stride: a buffer policy of one's own, with two options, registered by name from this file.

It registers a method, ``Stride`` (``--methods``), and a which-buffer row of it with its
default options, also ``Stride`` (``--policies``). Run it, from the folder that holds
this file:

    avalanche-gss --import stride_policy.py table1 --quick --methods 'Stride:stride=2,offset=1' Reservoir --seeds 0 --buffer-sizes 20
    avalanche-gss --import stride_policy.py which-buffer --quick --policies 'Stride:stride=2,offset=1' Reservoir --streams disjoint --seeds 0 --buffer-sizes 20

It keeps every ``stride``-th sample of the stream, from sample ``offset`` on (samples
``offset``, ``offset + stride``, ...), and replaces as reservoir sampling does over those
samples once it is full: each of them has the same chance to be in the buffer. Check it
keeps the buffers' invariants with ``avalanche_gss.testing.check_policy(lambda m:
StrideBuffer(m, stride=2, offset=1))``.
"""  # noqa: E501 (the commands stay whole, to be copied)

from __future__ import annotations

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import OnlineBuffer, Rows
from avalanche_gss.methods import Method, register
from avalanche_gss.reproduce.experiments.policies import register_policy
from avalanche_gss.selection.reservoir import refill_slots
from avalanche_gss.training import BufferStrategy


class StrideBuffer(OnlineBuffer):
    """Every ``stride``-th sample from ``offset`` on, sampled as a reservoir once full.

    :param max_size: number of slots ``M``.
    :param stride: keep one sample in ``stride`` (at least 1).
    :param offset: the stream position of the first sample kept (at least 0).
    :param seed: seed of the buffer's generator (the reservoir's draws).
    """

    def __init__(self, max_size: int, *, stride: int = 2, offset: int = 0,
                 seed: int = 0) -> None:
        if stride < 1 or offset < 0:
            raise ValueError(f"Stride takes stride >= 1 and offset >= 0, got stride={stride}, "
                             f"offset={offset}")
        super().__init__(max_size, seed=seed)
        self.stride, self.offset = stride, offset

    def _kept_before(self, n: int) -> int:
        """How many of the stream's first ``n`` samples the stride keeps."""
        return max(0, -(-(n - self.offset) // self.stride))

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, None]:
        position = torch.arange(self.n_seen, self.n_seen + len(rows))
        kept = (position >= self.offset) & ((position - self.offset) % self.stride == 0)
        slots = torch.full((len(rows),), -1, dtype=torch.long)
        slots[kept] = refill_slots(self._kept_before(self.n_seen), int(kept.sum()), self.size,
                                   self.max_size, generator=self.generator)
        return slots, None

    def report(self) -> dict[str, int]:
        """The options a run used, in its extras."""
        return {"stride": self.stride, "offset": self.offset}


class Stride(BufferStrategy):
    """Online rehearsal with a :class:`StrideBuffer`.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param stride: the buffer's ``stride``.
    :param offset: the buffer's ``offset``.
    :param options: the ready strategy's other arguments (``model``, ``optimizer``, ...).
    """

    buffer_class = StrideBuffer

    def __init__(self, *, mem_size: int, seed: int = 0, stride: int = 2, offset: int = 0,
                 **options: object) -> None:
        buffer = StrideBuffer(mem_size, stride=stride, offset=offset, seed=seed)
        self.rehearse(buffer, seed, options)


register(Method("Stride", StrideBuffer, Stride))  # a method: --methods Stride
register_policy("Stride", method="Stride")  # a which-buffer row: --policies Stride
