"""Algorithm 1's buffer update through a recent buffer: the template of GSS-IQP and the clusterings.

Incoming samples wait in the recent buffer ``M_r``; once it holds ``recent_size`` samples,
one selection over ``M_b U M_r`` decides what the buffer keeps. A policy of this template
implements :meth:`RecentMergeBuffer._select`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from typing_extensions import Self  # typing.Self is Python 3.11+

from avalanche_gss.buffers.base import OnlineBuffer, reject
from avalanche_gss.buffers.columns import check_size
from avalanche_gss.buffers.rows import Rows

__all__ = ["RecentMergeBuffer", "usable"]


class RecentMergeBuffer(OnlineBuffer):
    """A buffer updated as in Algorithm 1, through a recent buffer ``M_r``.

    Incoming samples wait in the recent buffer; once it holds ``recent_size`` samples,
    one selection over ``M_b U M_r`` decides what the buffer keeps, and the recent
    buffer is emptied.

    Subclasses implement :meth:`_select`. Kept buffer samples stay in their slots; kept
    recent samples take the freed slots, then the free ones; a selection that keeps fewer
    samples than the buffer held moves the last kept ones down so that the buffer stays
    contiguous. Waiting samples are not replayed (:meth:`sample`, :meth:`tensors` and
    :attr:`buffer` see ``M_b`` only), as in Algorithm 1 and the authors'
    ``GSS_IQP_Rehearse.py``; they are part of :meth:`state_dict`.

    :param max_size: number of slots ``M`` (Alg. 1's ``M_b``).
    :param recent_size: size of the recent buffer ``M_r`` (100 in the authors' scripts).
    :param seed: seed of the buffer's generator.
    """

    def __init__(self, max_size: int, *, recent_size: int = 100, seed: int = 0) -> None:
        super().__init__(max_size, seed=seed)
        self.recent_size = check_size(recent_size, "recent_size")
        self.recent: Rows | None = None  # R < recent_size waiting samples between calls

    @property
    def n_recent(self) -> int:
        """Number of samples waiting in the recent buffer."""
        return 0 if self.recent is None else len(self.recent)

    @property
    def recent_x(self) -> Tensor | None:
        """Inputs of the waiting samples, ``(R, *input_shape)`` (``None``: none wait)."""
        return None if self.recent is None else self.recent.x

    @property
    def recent_y(self) -> Tensor | None:
        """Labels of the waiting samples, ``(R,)`` (``None``: none wait)."""
        return None if self.recent is None else self.recent.y

    def _select(self, union: Rows, n_stored: int, model: nn.Module | None) -> Tensor:
        """Return the ascending indices of ``M_b U M_r`` to keep, at most ``max_size``.

        :param union: the ``K`` samples of the union: the ``n_stored`` buffer samples
            first, then the recent ones (``union.x``, ``union.y``, ``union.t``).
        :param n_stored: number of buffer samples at the head of the union.
        :param model: the learner.
        """
        raise NotImplementedError

    def _referenced_sources(self) -> Tensor:
        stored = super()._referenced_sources()
        return stored if self.recent is None else torch.cat([stored, self.recent.src])

    def _input_like(self) -> Tensor | None:
        return self.x if self.x is not None else self.recent_x

    def _admit(self, rows: Rows, model: nn.Module | None) -> Tensor:
        """Queue a batch in the recent buffer; merge once ``recent_size`` samples wait.

        :return: ``(B,)`` slot of each sample when this batch triggered a merge, ``-1``
            where a sample was not kept or still waits.
        """
        b = len(rows)
        rows = rows.detached()
        self.recent = rows if self.recent is None else Rows.cat(self.recent, rows)
        self.n_seen += b
        if self.n_recent < self.recent_size:
            return torch.full((b,), -1, dtype=torch.long)
        return self.merge_recent(model)[-b:]  # a failure: the caller restores the buffer

    def merge_recent(self, model: nn.Module | None = None) -> Tensor:
        """Run the selection on ``M_b U M_r`` now, whatever the recent buffer holds.

        A selection that raises leaves the buffer, the waiting samples and the generators
        as they were.

        :param model: the learner.
        :return: ``(R,)`` slot taken by each recent sample, ``-1`` where it was dropped.
        """
        before = self._snapshot()
        try:
            return self._merge(model)
        except BaseException:
            self._rollback(before)
            raise

    def _merge(self, model: nn.Module | None) -> Tensor:
        recent = self.recent
        if recent is None:
            return torch.empty(0, dtype=torch.long)
        union = recent if self.x is None else Rows.cat(self.stored_rows(), recent)
        n = self.size
        keep = self._select(union, n, model).cpu().long()
        if len(keep) > self.max_size or (len(keep) > 1 and not bool((keep[1:] > keep[:-1]).all())):
            raise RuntimeError("a selection returned unsorted indices or more than max_size")
        new = keep[keep >= n] - n
        slots = torch.full((len(recent),), -1, dtype=torch.long)
        slots[new] = self._replace(keep[keep < n], recent.take(new))
        self.recent = None
        return slots

    def _replace(self, keep_stored: Tensor, new_rows: Rows) -> Tensor:
        """Keep the stored slots ``keep_stored``, drop the others, store the new samples.

        :return: ``(len(new_rows),)`` slot of each new sample.
        """
        new_size = len(keep_stored) + len(new_rows)
        stay = keep_stored[keep_stored < new_size]
        movers = keep_stored[keep_stored >= new_size]  # only when the buffer shrinks
        occupied = torch.zeros(new_size, dtype=torch.bool)
        occupied[stay] = True
        vacant = (~occupied).nonzero().flatten()  # dropped slots, then the free ones
        if len(movers) and self.x is not None:
            dest, vacant = vacant[: len(movers)], vacant[len(movers) :]
            self._move(dest, movers)
        self._write(new_rows, vacant, torch.zeros(len(new_rows)))
        self.store.size = new_size
        return vacant

    def state_dict(self) -> dict[str, Any]:
        """:meth:`OnlineBuffer.state_dict` plus the waiting samples."""
        state = super().state_dict()
        recent = self.recent
        state["recent_x"] = None if recent is None else recent.x.cpu()
        state["recent_y"] = None if recent is None else recent.y.cpu()
        state["recent_t"] = None if recent is None else recent.t.cpu()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        rx, ry, rt = state["recent_x"], state["recent_y"], state["recent_t"]
        self.recent = None if rx is None else Rows.of_tensors(rx.clone(), ry.clone(), rt.clone())

    def to(self, device: torch.device | str) -> Self:
        """Move the stored and the waiting tensors to ``device`` in place.

        :param device: where the samples live (normally the strategy's device).
        :return: the buffer.
        """
        super().to(device)
        if self.recent is not None:
            self.recent = self.recent.to(device)
        return self


def usable(owner: OnlineBuffer, valid: Tensor, n_stored: int, what: str = "gradient"
           ) -> Tensor | None:
    """Indices of ``M_b U M_r`` a selection may use, given which ones it can score.

    Waiting samples whose gradient (or feature) is not finite are dropped; if a stored
    sample's is not finite (a diverged model), nothing is selected: ``None``, the
    buffer stays as it is and every waiting sample is dropped. A ``RuntimeWarning``
    says which, and ``owner.n_rejected`` counts the dropped samples.

    :param owner: the buffer selecting.
    :param valid: ``(K,)`` whether each union sample has a finite gradient/feature.
    :param n_stored: number of buffer samples at the head of the union.
    :param what: ``"gradient"`` or ``"feature"``, for the warning.
    """
    if bool(valid.all()):
        return torch.arange(len(valid))
    if not bool(valid[:n_stored].all()):
        dropped = len(valid) - n_stored
        reject(owner, dropped, f"stored samples have a non-finite {what}; the buffer is left "
               f"unchanged and {dropped} waiting sample(s) are dropped", stacklevel=4)
        return None
    dropped = int((~valid).sum())
    reject(owner, dropped, f"{dropped} waiting sample(s) with a non-finite {what} not stored",
           stacklevel=4)
    return valid.nonzero().flatten()
