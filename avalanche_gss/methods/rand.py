"""``Rand`` (paper section 5.1): a uniform random ``M`` of buffer and batch."""

from __future__ import annotations

from torch import Tensor, nn

from avalanche_gss.buffers import OnlineBuffer, Rows
from avalanche_gss.selection.rand import rand_slots
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["RandBuffer", "Rand"]


class RandBuffer(OnlineBuffer):
    """``Rand`` (paper section 5.1): a uniform random ``M`` of buffer and batch.

    Every batch joins; when the buffer overflows, a uniform random ``M`` of buffer and
    batch is kept.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator.
    """

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, None]:
        return rand_slots(self.size, len(rows), self.max_size, generator=self.generator), None


class Rand(BufferStrategy):
    """Online rehearsal with the paper's ``Rand`` buffer.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = RandBuffer
