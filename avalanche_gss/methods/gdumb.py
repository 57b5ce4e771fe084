"""``GDumb``: GDumb's greedy class-balanced sampler (Prabhu, Torr and Dokania, ECCV 2020).

A storage policy to use instead of GSS, as a buffer and a ready strategy. Only the
sampler is GDumb's: the ready strategy learns online with replay, as every method of
this package, instead of GDumb's learner that retrains from scratch on the memory.
"""

from __future__ import annotations

from torch import Tensor, nn

from avalanche_gss.buffers import ClassBalancedBuffer, Rows
from avalanche_gss.selection.gdumb import gdumb_slots
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["GDumbBuffer", "GDumb"]


class GDumbBuffer(ClassBalancedBuffer):
    """``GDumb``: the greedy class-balanced sampler of GDumb.

    Prabhu, Torr and Dokania, *GDumb: A simple approach that questions our progress in
    continual learning*, ECCV 2020 (:func:`~avalanche_gss.selection.gdumb.gdumb_slots`):
    samples are stored greedily as they come, as long as their class holds fewer than
    ``M / |Y|`` samples (``|Y|``: the classes seen so far, the sample's own included);
    when the memory is full a random instance of the class with the most samples makes
    room. A sample whose class already holds its share is not stored, even into a free
    slot. Classes with fewer samples than their share keep them all; when every class
    keeps arriving the class counts settle within one of each other.

    It reads the samples' class labels (``y``) only: no task label and no task boundary.

    State: :attr:`class_seen` (samples seen per label, which also gives the classes seen)
    is saved by :meth:`state_dict`. :meth:`resize`: growing raises every class's share,
    and samples of classes below it fill the free slots (those of classes at their share
    are still not stored); shrinking removes a random instance of the largest class at a
    time, the sampler's own way of making room, so the counts stay balanced.

    :param max_size: memory budget ``M`` (the paper's ``k``).
    :param seed: seed of the buffer's generator (every random draw of the rule).
    """

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, None]:
        decision = gdumb_slots(self.stored_labels(), rows.y, self.max_size, self.class_seen,
                               generator=self.generator)
        self.class_seen = decision.seen
        return decision.slots, None


class GDumb(BufferStrategy):
    """Online rehearsal with GDumb's greedy class-balanced buffer (``GDumb``).

    GDumb's sampler only: the model learns the stream online with replay (the online
    rehearsal of the GSS paper), not GDumb's retraining from scratch on the memory.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = GDumbBuffer
