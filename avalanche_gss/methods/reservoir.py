"""``Reservoir``: reservoir sampling (Vitter's Algorithm R), as a buffer and a strategy."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import OnlineBuffer, Rows
from avalanche_gss.methods.spec import Method
from avalanche_gss.selection.reservoir import reservoir_slots
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["ReservoirBuffer", "Reservoir", "METHODS"]


class ReservoirBuffer(OnlineBuffer):
    """``Reservoir``: reservoir sampling (Vitter's Algorithm R).

    Every sample of the stream is in the buffer with the same probability ``M / n_seen``.
    After :meth:`resize` grew the buffer, the next samples fill the free slots first.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator.
    """

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, None]:
        b, free = len(rows), self.max_size - self.size
        if free > 0 and self.n_seen > self.size:  # grown by resize(): fill the free slots
            first = min(free, b)
            slots = torch.full((b,), -1, dtype=torch.long)
            slots[:first] = torch.arange(self.size, self.size + first)
            if b > first:
                rest = reservoir_slots(self.n_seen + first, b - first, self.max_size,
                                       generator=self.generator)
                # a later sample may replace one placed just now; slots stay distinct
                taken = rest[rest >= 0]
                clash = torch.isin(slots[:first], taken)
                slots[:first][clash] = -1
                slots[first:] = rest
            return slots, None
        return reservoir_slots(self.n_seen, b, self.max_size, generator=self.generator), None


class Reservoir(BufferStrategy):
    """Online rehearsal with a reservoir-sampling buffer (``Reservoir``).

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = ReservoirBuffer


METHODS = (Method("Reservoir", ReservoirBuffer, Reservoir),)
