"""``GCR`` (Gradient Coreset based Replay, Tiwari et al., CVPR 2022): the buffer and strategy."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import GradientScored, RecentMergeBuffer, Rows
from avalanche_gss.buffers.merge import usable as usable_rows
from avalanche_gss.methods.spec import Method
from avalanche_gss.selection.gcr import OMPResult, omp_select
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["GCRBuffer", "GCR", "METHODS"]


class GCRBuffer(GradientScored, RecentMergeBuffer):
    """``GCR``: Gradient Coreset based Replay, adapted to a task-free stream and a fixed buffer.

    Tiwari, Killamsetty, Iyer and Shenoy, "GCR: Gradient Coreset Based Replay Buffer
    Selection for Continual Learning", CVPR 2022 (arXiv:2111.11210).

    The buffer is a weighted coreset: each stored sample carries a weight (kept in
    :attr:`scores`). Incoming samples wait in a recent buffer (the
    :class:`~avalanche_gss.buffers.RecentMergeBuffer` template); once it holds
    ``recent_size`` samples and buffer ∪ recent exceeds ``M``, the exact per-sample Gram of
    the union's loss gradients (gradient engine, model in eval mode, state untouched) goes
    to :func:`~avalanche_gss.selection.gcr.omp_select`, which keeps ``M`` samples and new
    weights whose weighted gradient matches ``sum_i w_i g_i`` over the union (stored
    samples with their weights, waiting ones with weight 1), by orthogonal matching
    pursuit with ridge ``lam``.

    Adaptations to the task-free online setting:

    - GCR updates its coreset from the buffer and the data of the current task seen since
      the last update; here the data since the last update are the ``recent_size``
      samples of the recent buffer (the stream comes in batches of 10, so one update per
      ``recent_size / 10`` batches), and the candidate pool is buffer ∪ recent;
    - the target, "the gradient of all data seen", is the weighted union's gradient: the
      stored weights stand for the data that were dropped before;
    - OMP always chooses exactly ``M`` samples, so the buffer stays full; a union that
      fits is kept whole, the waiting samples with weight 1;
    - the weights are unconstrained ridge least squares: GRAD-MATCH's OMP (``positive``)
      also drops samples whose weight turns negative, which is not done here; ``lam``
      (0.5) is this library's default.

    GCR also changes the training loss (weighted replay and distillation terms); that is
    not yet provided: the weights only steer the selection, and replay is uniform and
    unweighted, as for the other buffers.

    Waiting samples with a non-finite gradient are dropped at the merge; a stored sample
    with a non-finite gradient skips the merge (buffer unchanged, waiting samples dropped).

    :param max_size: number of slots ``M``.
    :param recent_size: samples between two coreset updates.
    :param lam: ridge regularisation of the weights.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's generator.
    """

    scored = True  # the coreset weight of each stored sample
    method = "GCR"

    def __init__(self, max_size: int, *, recent_size: int = 100, lam: float = 0.5,
                 loss_fn: Any = None, params: list[nn.Parameter] | None = None,
                 seed: int = 0) -> None:
        super().__init__(max_size, recent_size=recent_size, seed=seed)
        if not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        self.lam = float(lam)
        self.loss_fn = loss_fn
        self.params = params
        self.last_result: OMPResult | None = None
        self._union_weights: Tensor | None = None  # (K,) weights of the last selection's union

    @property
    def weights(self) -> Tensor:
        """The stored samples' coreset weights, ``(size,)`` float32 (slot order)."""
        if self.scores is None:
            return torch.zeros(0)
        return self.scores[: self.size]

    def _select(self, union: Rows, n_stored: int, model: nn.Module | None) -> Tensor:
        k = len(union)
        pool = torch.ones(k, dtype=torch.float64)
        if n_stored:
            pool[:n_stored] = self.weights.detach().cpu().double()
        self._union_weights = pool
        if k <= self.max_size:
            return torch.arange(k)
        gram = self._gram(model, union.x, union.y, union.t)  # (K, K)
        usable = usable_rows(self, torch.isfinite(gram.diagonal()).cpu(), n_stored)  # (K',)
        if usable is None:
            return torch.arange(n_stored)
        if len(usable) <= self.max_size:
            return usable
        idx = usable.to(gram.device)
        result = omp_select(gram[idx[:, None], idx[None, :]], pool[usable], self.max_size,
                            self.lam)
        self.last_result = result
        keep = usable[result.indices]
        new = pool.clone()
        new[keep] = result.weights
        self._union_weights = new
        return keep

    def merge_recent(self, model: nn.Module | None = None) -> Tensor:
        """Run the coreset update on buffer ∪ recent now; store the new weights.

        :param model: the learner.
        :return: ``(R,)`` slot taken by each recent sample, ``-1`` where it was dropped.
        """
        n = self.size
        self._union_weights = None
        slots = super().merge_recent(model)
        pool = self._union_weights
        if pool is not None and self.scores is not None:
            # The kept stored samples stay in their slots: a selection keeps at least
            # the n stored ones' count (M >= n, or all of a fitting union).
            dev = self.scores.device
            stored = self.weights
            kept_new = (slots >= 0).nonzero().flatten()
            stored[: n] = pool[:n].to(dev, torch.float32)
            self.scores[slots[kept_new].to(dev)] = pool[n + kept_new].to(dev, torch.float32)
        self._union_weights = None
        return slots


class GCR(BufferStrategy):
    """Online rehearsal with the ``GCR`` buffer (Tiwari et al., CVPR 2022).

    Selection only: replay is uniform and unweighted (GCR's weighted replay loss is not
    yet provided).

    The buffer's options (``recent_size``, ``lam``, ``loss_fn``, ``params``) are those of
    :class:`GCRBuffer`, with its defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = GCRBuffer

    def __init__(
        self, *, mem_size: int, seed: int = 0, recent_size: int = 100, lam: float = 0.5,
        loss_fn: Any = None, params: list[nn.Parameter] | None = None, **options: Any,
    ) -> None:
        buffer = GCRBuffer(mem_size, recent_size=recent_size, lam=lam, loss_fn=loss_fn,
                           params=params, seed=seed)
        self._rehearse(buffer, seed, options)


METHODS = (Method("GCR", GCRBuffer, GCR),)
