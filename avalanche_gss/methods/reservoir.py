"""``Reservoir``: reservoir sampling (Vitter's Algorithm R), as a buffer and a strategy."""

from __future__ import annotations

from torch import Tensor, nn

from avalanche_gss.buffers import OnlineBuffer, Rows
from avalanche_gss.selection.reservoir import refill_slots
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["ReservoirBuffer", "Reservoir"]


class ReservoirBuffer(OnlineBuffer):
    """``Reservoir``: reservoir sampling (Vitter's Algorithm R).

    Every sample of the stream is in the buffer with the same probability ``M / n_seen``.
    After :meth:`resize` grew the buffer, the next samples fill the free slots first.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator.
    """

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, None]:
        return refill_slots(self.n_seen, len(rows), self.size, self.max_size,
                            generator=self.generator), None


class Reservoir(BufferStrategy):
    """Online rehearsal with a reservoir-sampling buffer (``Reservoir``).

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = ReservoirBuffer
