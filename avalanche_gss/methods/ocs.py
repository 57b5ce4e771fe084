"""``OCS`` (Online Coreset Selection, Yoon et al., ICLR 2022): the buffer and its strategy."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import GradientScored, OnlineBuffer, Rows
from avalanche_gss.buffers.base import reject
from avalanche_gss.selection.ocs import ocs_scores, ocs_topk
from avalanche_gss.selection.reservoir import refill_slots
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["OCSBuffer", "OCS"]


class OCSBuffer(GradientScored, OnlineBuffer):
    """``OCS``: Online Coreset Selection, adapted to a task-free stream and a fixed buffer.

    Yoon, Madaan, Yang and Hwang, "Online Coreset Selection for Rehearsal-based Continual
    Learning", ICLR 2022 (arXiv:2106.01085).

    Each incoming batch's per-sample gradients (the gradient engine's exact Gram, model in
    eval mode, state untouched) score each sample by minibatch similarity, sample
    diversity and coreset affinity, ``S + V + tau A``
    (:func:`~avalanche_gss.selection.ocs.ocs_scores`); the ``k`` best of the batch are the
    batch's coreset (:func:`~avalanche_gss.selection.ocs.ocs_topk`).

    Adaptations to the task-free online setting:

    - the paper keeps a coreset per task, and its affinity term compares with the
      gradient of the previous tasks' coresets. With no tasks, the coreset is the buffer
      itself: ``A`` compares with the mean gradient of ``n`` samples drawn uniformly
      from the buffer (``A = 0`` while it is empty);
    - the paper's per-task coresets grow with the tasks; here the buffer has ``M`` slots,
      and the selected samples (the top ``k`` of each batch) go into it by reservoir
      sampling over the stream of selected samples, so that every selected sample has
      the same chance to be in the buffer (after :meth:`resize` grew the buffer, the next
      selected samples fill the free slots first);
    - the authors' code selects 10 of each stream batch of 100; here each batch of 10
      keeps ``k`` (2 by default, this library's choice). ``tau`` defaults to the authors'
      rotated-MNIST value, 1000 (the affinity then decides whenever the buffer holds
      samples);
    - the diversity is the paper's ``-1/(B-1) sum_{p != n} cos``; the authors' code
      averages over all ``B`` samples including the sample itself, which rescales it by
      ``(B-1)/B`` relative to the other terms.

    Samples whose gradient is not finite are left out of the scores and not stored; if a
    drawn buffer sample's gradient is not finite, no sample of the batch is stored. The
    stored scores are the samples' OCS scores when they were selected.

    :param max_size: number of slots ``M``.
    :param k: samples kept per incoming batch (top-``k`` by score).
    :param n: buffer samples whose mean gradient is the coreset gradient.
    :param tau: weight of the coreset affinity.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's generator.
    """

    scored = True  # the OCS score of each stored sample at its selection
    method = "OCS"

    def __init__(self, max_size: int, *, k: int = 2, n: int = 10, tau: float = 1000.0,
                 loss_fn: Any = None, params: list[nn.Parameter] | None = None,
                 seed: int = 0) -> None:
        super().__init__(max_size, seed=seed)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.k = int(k)
        self.n = int(n)
        self.tau = float(tau)
        self.loss_fn = loss_fn
        self.params = params
        self.n_selected = 0  # samples selected so far: the reservoir's stream length

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, Tensor]:
        scores = self._score(rows, model)
        finite = torch.isfinite(scores).cpu()
        if not bool(finite.all()):
            bad = int((~finite).sum())
            reject(self, bad, f"{bad} sample(s) with a non-finite gradient score not stored",
                   stacklevel=5)
        masked = scores.detach().cpu().double().masked_fill(~finite, float("nan"))
        chosen = ocs_topk(masked, self.k)  # (k',) ascending
        slots = torch.full((len(rows),), -1, dtype=torch.long)
        slots[chosen] = refill_slots(self.n_selected, len(chosen), self.size, self.max_size,
                                     generator=self.generator)
        self.n_selected += len(chosen)
        return slots, scores

    def _score(self, rows: Rows, model: nn.Module | None) -> Tensor:
        """The OCS score of each incoming sample, ``(B,)``."""
        self._check_model(model)
        c = min(self.size, self.n)
        x, y, t = rows.x, rows.y, rows.t
        if c:
            bx, by, bt = self.rows(self.sample_slots(c))
            x, y, t = (torch.cat([a, b.to(a.device)]) for a, b in ((x, bx), (y, by), (t, bt)))
        gram = self._gram(model, x, y, t).double()
        b = len(rows)
        # Which gradients are usable, read once (a NaN/inf gradient has a non-finite norm):
        # the branches and indices below are then the host's, and the scores come back in
        # one read (the decision in _assign reads them on the host anyway).
        ok = torch.isfinite(gram.diagonal()).cpu()
        scores = torch.full((b,), float("nan"), dtype=torch.float64)
        if not bool(ok[b:].all()) or not bool(ok[:b].any()):
            return scores.float()  # the coreset gradient, or every sample's, is unusable
        idx = torch.cat([ok[:b].nonzero().flatten(), b + torch.arange(len(ok) - b)])
        idx = idx.to(gram.device)
        sub = gram[idx[:, None], idx[None, :]]
        scores[ok[:b]] = ocs_scores(sub, int(ok[:b].sum()), self.tau).cpu()
        return scores.float()

    def state_dict(self) -> dict[str, Any]:
        """:meth:`OnlineBuffer.state_dict` plus the number of samples selected so far."""
        state = super().state_dict()
        state["n_selected"] = self.n_selected
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.n_selected = int(state["n_selected"])


class OCS(BufferStrategy):
    """Online rehearsal with the ``OCS`` buffer (Yoon et al., ICLR 2022).

    The buffer's options (``k``, ``n``, ``tau``, ``loss_fn``, ``params``) are those of
    :class:`OCSBuffer`, with its defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = OCSBuffer

    def __init__(
        self, *, mem_size: int, seed: int = 0, k: int = 2, n: int = 10, tau: float = 1000.0,
        loss_fn: Any = None, params: list[nn.Parameter] | None = None, **options: Any,
    ) -> None:
        buffer = OCSBuffer(mem_size, k=k, n=n, tau=tau, loss_fn=loss_fn, params=params, seed=seed)
        self.rehearse(buffer, seed, options)
