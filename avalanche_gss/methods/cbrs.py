"""``CBRS``: class-balancing reservoir sampling (Chrysakis and Moens, ICML 2020).

A storage policy to use instead of GSS on class-imbalanced streams, as a buffer and a
ready strategy.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import ClassBalancedBuffer, Rows
from avalanche_gss.selection.cbrs import cbrs_slots
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["CBRSBuffer", "CBRS"]


class CBRSBuffer(ClassBalancedBuffer):
    """``CBRS``: class-balancing reservoir sampling.

    Chrysakis and Moens, *Online Continual Learning from Imbalanced Data*, ICML 2020,
    Algorithm 1 (:func:`~avalanche_gss.selection.cbrs.cbrs_slots`): while the memory is
    not filled every sample is stored. From then on a class is *full* if it is, or has
    been at an earlier step, (one of) the largest in the memory. A sample of a class that
    is not full overwrites a random instance of the largest class (of any class tied for
    largest); a sample of a full class ``c`` overwrites a random stored instance of ``c``
    with probability ``m_c / n_c`` (``m_c`` stored, ``n_c`` seen, this one included) and
    is dropped otherwise: a reservoir within the class. So small classes keep every
    sample they have seen and large ones share the rest.

    It reads the samples' class labels (``y``) only: no task label and no task boundary.
    The paper's weighted replay (drawing replay samples against the class sizes) is not
    part of the storage policy; the ready strategy :class:`CBRS` replays uniformly, as
    every method of this package.

    State: :attr:`class_seen` (``n_c`` per label) and :attr:`full_classes` are saved by
    :meth:`state_dict`, so that a resumed run decides exactly as an uninterrupted one.
    :meth:`resize`: growing leaves free slots that the next samples fill (the memory is
    not filled then); shrinking removes a random instance of the largest class at a time,
    the rule's own way of making room; the full classes stay full and ``n_c`` is unchanged.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator (every random draw of the rule).
    """

    class_state = ("class_seen", "full_classes")
    """The per-class tensors saved with the samples: ``n_c`` and the full classes."""

    def __init__(self, max_size: int, *, seed: int = 0) -> None:
        super().__init__(max_size, seed=seed)
        self.full_classes = torch.zeros(0, dtype=torch.bool)  # indexed by label

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, Tensor | None]:
        decision = cbrs_slots(self.stored_labels(), rows.y, self.max_size, self.class_seen,
                              self.full_classes, generator=self.generator)
        self.class_seen, self.full_classes = decision.seen, decision.full
        return decision.slots, None


class CBRS(BufferStrategy):
    """Online rehearsal with a class-balancing reservoir buffer (``CBRS``).

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = CBRSBuffer
