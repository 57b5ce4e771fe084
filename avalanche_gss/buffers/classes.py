"""The template of class-balancing policies: per-class counts kept, the largest class cut first.

:class:`ClassBalancedBuffer` is an :class:`~avalanche_gss.buffers.OnlineBuffer` that keeps
how many samples of each class the stream has shown it (``n_c``), in its state, and that
shrinks (:meth:`~avalanche_gss.buffers.OnlineBuffer.resize`) the way such policies make
room: a random instance of the largest class at a time
(:func:`~avalanche_gss.selection.classes.shrink_largest`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from avalanche_gss.buffers.base import OnlineBuffer
from avalanche_gss.selection.classes import shrink_largest

__all__ = ["ClassBalancedBuffer"]


class ClassBalancedBuffer(OnlineBuffer):
    """A buffer whose policy balances classes by their labels (no task label needed).

    :attr:`class_seen` holds ``n_c``, the samples of class ``c`` offered to the policy so
    far (those with finite inputs, as :attr:`n_seen`), indexed by label (so labels must be
    below :attr:`label_bound`, ``2**20``); it is part of :meth:`state_dict`. Subclasses
    implement :meth:`_assign` and update it there; :attr:`class_state` names the per-class
    tensors saved with the samples.

    :param max_size: number of slots ``M``.
    :param seed: seed of the buffer's generator.
    """

    class_state: tuple[str, ...] = ("class_seen",)
    """The per-class tensors :meth:`state_dict` saves and :meth:`load_state_dict` restores."""

    label_bound = 2**20
    """Labels must be below it: the per-class state is indexed by label (8 bytes per class
    for :attr:`class_seen`, so at most 8 MiB); a subclass may raise it."""

    def __init__(self, max_size: int, *, seed: int = 0) -> None:
        super().__init__(max_size, seed=seed)
        self.class_seen = torch.zeros(0, dtype=torch.long)  # n_c, indexed by label

    def stored_labels(self) -> Tensor:
        """The stored samples' labels, ``(len(self),)`` int64 on the CPU."""
        if self.y is None:
            return torch.zeros(0, dtype=torch.long)
        return self.y[: self.size].cpu()

    def class_sizes(self) -> Tensor:
        """``m_c``: stored samples per class, indexed by label (as long as :attr:`class_seen`)."""
        return torch.bincount(self.stored_labels(), minlength=len(self.class_seen))

    def _kept_on_shrink(self, new_size: int) -> Tensor:
        """Shrink as the policy makes room: a random instance of the largest class at a time.

        Classes smaller than the rest keep every instance; :attr:`class_seen` is a count of
        the stream and does not change.
        """
        return shrink_largest(self.stored_labels(), new_size, generator=self.generator)

    def state_dict(self) -> dict[str, Any]:
        """:meth:`OnlineBuffer.state_dict` plus the per-class tensors of :attr:`class_state`."""
        state = super().state_dict()
        for name in self.class_state:
            state[name] = getattr(self, name).clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        for name in self.class_state:
            setattr(self, name, state[name].clone())
