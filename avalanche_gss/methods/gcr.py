"""``GCR`` (Gradient Coreset based Replay, Tiwari et al., CVPR 2022): the buffer and strategy.

Tiwari, Killamsetty, Iyer and Shenoy, "GCR: Gradient Coreset Based Replay Buffer Selection
for Continual Learning", CVPR 2022 (arXiv:2111.11210), and the authors' code
(google-research ``gradient_coresets_replay``).

The buffer is a weighted coreset: each stored sample carries a weight (kept in
:attr:`GCRBuffer.scores`) and the model's logits when it was stored
(:attr:`GCRBuffer.logits`, for the distillation term of the replay loss,
:class:`~avalanche_gss.training.weighted_replay.GCRReplayPlugin`). Incoming samples wait in
a recent buffer (the :class:`~avalanche_gss.buffers.RecentMergeBuffer` template); once it
holds ``recent_size`` samples and buffer ∪ recent exceeds ``M``, the exact per-sample Gram
of the union's loss gradients (gradient engine, model in eval mode, state untouched) goes to
:func:`~avalanche_gss.selection.gcr.omp_select`, per class as in the authors' code
(``selection_type = 'PerClass'``): each class present gets an equal budget of slots (capped
by its candidates, the surplus shared by the others:
:func:`~avalanche_gss.selection.gcr.class_budgets`), and OMP picks that many of its samples
and nonnegative weights whose weighted gradient matches ``sum_i w_i g_i`` over the class's
candidates (stored samples with their weights, waiting ones with weight 1), with ridge
``lam`` (the authors' 0.5). When the nonnegative pursuit stops short of the budget, the
rest is drawn at random from the class's other candidates with weight 1, as in the
authors' code.

Adaptations to the task-free online setting:

- GCR updates its coreset from the buffer and the data of the current task seen since the
  last update; here the data since the last update are the ``recent_size`` samples of the
  recent buffer (one update per ``recent_size / 10`` batches of 10), and the candidate
  pool is buffer ∪ recent;
- the authors give each task ``M / tasks`` slots, whatever its size, split among its
  classes in proportion to their counts; without tasks, each class gets an equal share
  (the same split for tasks of disjoint, equally frequent classes); ``class_share="seen"``:
  shares in proportion to the samples of each class seen (the split a reservoir tends to);
- the gradients are those of ``loss_fn`` (cross-entropy) with respect to all trainable
  parameters; the authors' code takes the last layer's gradient of their training loss
  (label and distillation terms);
- the logits stored with a sample are the model's (eval mode) when the buffer sees it,
  after the batch was learnt; the authors store the training forward's outputs.

``per_class=False`` and ``positive=False`` give this library's first version: one pursuit
over the whole union with unconstrained ridge weights. Those weights turn negative and
large, feed back as the next target's pool weights, and the class composition drifts (on
disjoint MNIST, M = 300, classes of the first tasks vanish).
"""

from __future__ import annotations

from typing import Any, Literal, cast

import torch
from avalanche.models import avalanche_forward
from torch import Tensor, nn
from typing_extensions import Self  # typing.Self is Python 3.11+

from avalanche_gss.buffers import GradientScored, RecentMergeBuffer, Rows
from avalanche_gss.buffers.merge import usable as usable_rows
from avalanche_gss.gradients.state import eval_mode
from avalanche_gss.selection.gcr import OMPResult, class_groups, count_classes, pursue
from avalanche_gss.training.rehearsal import BufferStrategy
from avalanche_gss.training.weighted_replay import (
    REPLAY_LOSSES,
    GCRReplayPlugin,
    ReplayLoss,
    SlotRetrieval,
)

__all__ = ["GCRBuffer", "GCR", "GCRReplayPlugin", "SlotRetrieval", "SlotLogits"]

ClassShare = Literal["equal", "seen"]
CLASS_SHARES = ("equal", "seen")


class SlotLogits:
    """The logits stored with each slot of a buffer, and those of its waiting samples.

    The coreset's bookkeeping of :class:`GCRBuffer`: a column that follows the buffer's
    slots (merge, moves, shrinking), moved with it and saved with its state.
    """

    def __init__(self) -> None:
        self.stored: Tensor | None = None  # (M, n_out) logits stored with each sample
        self.recent: Tensor | None = None  # (R, n_out) those of the waiting samples

    def wait(self, out: Tensor) -> None:
        """Append the logits of newly waiting samples.

        A model whose outputs grew (an incremental or multi-head classifier) gives wider
        logits than before: every row is NaN-padded to the widest, and the loss compares
        only the columns a sample has.
        """
        self.recent = out if self.recent is None else _stack_padded(self.recent, out)

    def place(self, recent: Tensor | None, slots: Tensor, kept_new: Tensor, max_size: int
              ) -> None:
        """Store the logits ``recent`` of the waiting samples ``kept_new`` at ``slots``."""
        if recent is None or len(recent) != len(slots):
            return
        if self.stored is None:
            self.stored = recent.new_full((max_size, recent.shape[1]), float("nan"))
        width = max(self.stored.shape[1], recent.shape[1])
        self.stored, recent = _widen(self.stored, width), _widen(recent, width)
        self.stored[slots[kept_new].to(self.stored.device)] = recent[
            kept_new.to(recent.device)].to(self.stored.device)

    def move(self, dest: Tensor, source: Tensor) -> None:
        """Copy the logits of slots ``source`` to slots ``dest``."""
        if self.stored is not None:
            self.stored[dest.to(self.stored.device)] = self.stored[source.to(self.stored.device)]

    def keep(self, keep: Tensor, max_size: int) -> None:
        """Keep the logits of slots ``keep``, in that order, in ``max_size`` slots."""
        if self.stored is not None:
            logits = self.stored.new_full((max_size, self.stored.shape[1]), float("nan"))
            logits[: len(keep)] = self.stored[keep.to(self.stored.device)]
            self.stored = logits

    def state_dict(self) -> dict[str, Tensor | None]:
        """CPU copies of the stored and waiting logits."""
        return {"logits": None if self.stored is None else self.stored.cpu().clone(),
                "recent_logits": None if self.recent is None else self.recent.cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (missing keys: no logits)."""
        logits, recent = state.get("logits"), state.get("recent_logits")
        self.stored = None if logits is None else logits.clone()
        self.recent = None if recent is None else recent.clone()

    def to(self, device: torch.device | str) -> None:
        """Move the logits to ``device``."""
        if self.stored is not None:
            self.stored = self.stored.to(device)
        if self.recent is not None:
            self.recent = self.recent.to(device)


def _widen(logits: Tensor, width: int) -> Tensor:
    """``logits`` with NaN columns appended up to ``width``."""
    if logits.shape[1] >= width:
        return logits
    pad = logits.new_full((len(logits), width - logits.shape[1]), float("nan"))
    return torch.cat([logits, pad], dim=1)


def _stack_padded(a: Tensor, b: Tensor) -> Tensor:
    """The rows of ``a`` then ``b``, NaN-padded to the wider of the two."""
    width = max(a.shape[1], b.shape[1])
    return torch.cat([_widen(a, width), _widen(b, width).to(a.device)])


def store_weights(scores: Tensor | None, pool: Tensor | None, n: int, slots: Tensor,
                  kept_new: Tensor) -> None:
    """Write a merge's weights: the ``n`` stored samples' and the kept waiting ones'.

    The kept stored samples stay in their slots: a selection keeps at least the ``n``
    stored ones' count (``M >= n``, or all of a fitting union).

    :param scores: the buffer's weight column, changed in place (``None``: nothing to do).
    :param pool: ``(n + R,)`` the union's new weights (``None``: no selection ran).
    :param n: the stored samples before the merge.
    :param slots: ``(R,)`` slot of each waiting sample, ``-1`` where dropped.
    :param kept_new: the waiting samples kept.
    """
    if scores is None or pool is None:
        return
    dev = scores.device
    scores[:n] = pool[:n].to(dev, torch.float32)
    scores[slots[kept_new].to(dev)] = pool[n + kept_new].to(dev, torch.float32)


class GCRBuffer(GradientScored, RecentMergeBuffer):
    """``GCR``: Gradient Coreset based Replay, adapted to a task-free stream and a fixed buffer.

    A weighted coreset: every ``recent_size`` samples, per class, orthogonal matching
    pursuit on the Gram of buffer ∪ recent picks samples and nonnegative weights whose
    weighted gradient matches the class's (the module's docstring: the method, its
    adaptations to the task-free setting, the references). A non-finite gradient drops a
    waiting sample, or skips the merge if stored; logits are kept per slot (:attr:`columns`).

    :param max_size: number of slots ``M``.
    :param recent_size: samples between two coreset updates.
    :param lam: ridge regularisation of the weights (the authors' 0.5).
    :param positive: nonnegative weights (the authors'); ``False``: unconstrained.
    :param per_class: one pursuit per class, with budgets (the authors'), or one for all.
    :param class_share: class budgets ``"equal"``, or in proportion to samples ``"seen"``.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's generator (the random fill).
    """

    scored = True  # the coreset weight of each stored sample
    method = "GCR"

    def __init__(self, max_size: int, *, recent_size: int = 100, lam: float = 0.5,
                 positive: bool = True, per_class: bool = True,
                 class_share: ClassShare = "equal", loss_fn: Any = None,
                 params: list[nn.Parameter] | None = None, seed: int = 0) -> None:
        super().__init__(max_size, recent_size=recent_size, seed=seed)
        if not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        if class_share not in CLASS_SHARES:
            raise ValueError(f"class_share must be one of equal, seen, got {class_share!r}")
        self.class_share: ClassShare = class_share
        self.lam, self.positive, self.per_class = float(lam), bool(positive), bool(per_class)
        self.loss_fn, self.params = loss_fn, params
        self.last_result: OMPResult | None = None  # the last pursuit of the last merge
        self.class_seen = torch.zeros(0, dtype=torch.long)  # (C,) samples seen per class
        self.columns = SlotLogits()  # the logits stored with each slot and waiting sample
        self._union_weights: Tensor | None = None  # (K,) weights of the last selection's union
        self._kept: Tensor | None = None

    @property
    def weights(self) -> Tensor:
        """The stored samples' coreset weights, ``(size,)`` float32 (slot order)."""
        return torch.zeros(0) if self.scores is None else self.scores[: self.size]

    @property
    def logits(self) -> Tensor | None:
        """``(M, n_out)`` logits stored with each slot (model in eval mode), ``None`` before any."""
        return self.columns.stored

    def _admit(self, rows: Rows, model: nn.Module | None) -> Tensor:
        self.class_seen = count_classes(self.class_seen, rows.y)
        if model is not None:
            with torch.no_grad(), eval_mode(model):
                out = avalanche_forward(model, rows.x, rows.t).detach().float()
            self.columns.wait(out.to(rows.x.device))
        return super()._admit(rows, model)

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
        gram = gram.detach().to("cpu", torch.float64)
        labels = union.y.detach().cpu().long()[usable]
        groups = (class_groups(usable, labels, self.class_seen, self.class_share, self.max_size)
                  if self.per_class else [(usable, self.max_size)])
        new, kept = pool.clone(), []
        for members, budget in groups:
            keep, weights, result = pursue(gram, pool, members, budget, self.lam,
                                           positive=self.positive, generator=self.generator)
            self.last_result = self.last_result if result is None else result
            new[keep] = weights
            kept.append(keep)
        self._union_weights = new
        return torch.cat(kept).sort().values

    def merge_recent(self, model: nn.Module | None = None) -> Tensor:
        """:meth:`RecentMergeBuffer.merge_recent`, storing the new weights and logits."""
        n = self.size
        self._union_weights = None
        recent_logits = self.columns.recent
        slots = super().merge_recent(model)
        self.columns.recent = None
        pool = self._union_weights
        kept_new = (slots >= 0).nonzero().flatten()
        store_weights(self.scores, pool, n, slots, kept_new)
        self.columns.place(recent_logits, slots, kept_new, self.max_size)
        self._union_weights = None
        return slots

    def _move(self, dest: Tensor, source: Tensor) -> None:
        super()._move(dest, source)
        self.columns.move(dest, source)

    def _kept_on_shrink(self, new_size: int) -> Tensor:
        self._kept = super()._kept_on_shrink(new_size)
        return self._kept

    def resize(self, strategy: Any, new_size: int) -> None:
        """:meth:`OnlineBuffer.resize`, the stored logits following their samples."""
        self._kept = None
        size = self.size
        super().resize(strategy, new_size)
        self.columns.keep(self._kept if self._kept is not None else torch.arange(size),
                          self.max_size)
        self._kept = None

    def state_dict(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer.state_dict` plus the class counts and the stored logits."""
        return {**super().state_dict(), "class_seen": self.class_seen.clone(),
                **self.columns.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        seen = state.get("class_seen")
        self.class_seen = torch.zeros(0, dtype=torch.long) if seen is None else seen.clone()
        self.columns.load_state_dict(state)

    def _snapshot(self) -> dict[str, Any]:
        stored = self.columns.stored  # written in place by a merge
        logits = (self.columns.recent, None if stored is None else stored.clone())
        return {**super()._snapshot(), "logits": logits}

    def _rollback(self, snapshot: dict[str, Any]) -> None:
        super()._rollback(snapshot)
        self.columns.recent, self.columns.stored = snapshot["logits"]

    def to(self, device: torch.device | str) -> Self:
        """Move the stored and waiting tensors, and the logits, to ``device``; the buffer."""
        super().to(device)
        self.columns.to(device)
        return self


class GCR(BufferStrategy):
    """Online rehearsal with the ``GCR`` buffer and loss (Tiwari et al., CVPR 2022).

    ``replay_loss="weighted"`` (the paper's method, the default): replay batches are
    drawn uniformly and learnt with GCR's weighted label and distillation terms
    (:class:`~avalanche_gss.training.weighted_replay.GCRReplayPlugin`), ``alpha = 0.1``
    and ``beta = 0.5`` (the authors' code's defaults, ``CustomLoss(alpha=0.1, beta=0.5)``;
    the paper tunes them per dataset).
    ``"uniform"``: selection only, the strategy's unweighted criterion (as every other
    buffer). The replay step is this library's (a separate SGD step after the incoming
    batch's, or ``joint=True`` for the authors' single step). The supervised contrastive
    term is not provided.

    The buffer's options (``recent_size``, ``lam``, ``positive``, ``per_class``,
    ``class_share``, ``loss_fn``, ``params``) are those of :class:`GCRBuffer`, with its
    defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param replay_loss: ``"weighted"`` or ``"uniform"``.
    :param alpha: weight of the distillation term.
    :param beta: weight of the label term.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...); with ``"weighted"``,
        ``retrieval`` must be left out or ``"random"``.
    :raises ValueError: an unknown ``replay_loss``, or another retrieval with ``"weighted"``.
    """

    buffer_class = GCRBuffer
    plugin_class = GCRReplayPlugin

    def __init__(
        self, *, mem_size: int, seed: int = 0, replay_loss: ReplayLoss = "weighted",
        alpha: float = 0.1, beta: float = 0.5, recent_size: int = 100, lam: float = 0.5,
        positive: bool = True, per_class: bool = True, class_share: ClassShare = "equal",
        loss_fn: Any = None, params: list[nn.Parameter] | None = None, **options: Any,
    ) -> None:
        if replay_loss not in REPLAY_LOSSES:
            raise ValueError(f"replay_loss must be one of {', '.join(REPLAY_LOSSES)}, "
                             f"got {replay_loss!r}")
        if replay_loss == "weighted":
            retrieval = options.get("retrieval")
            if retrieval not in (None, "random") and not isinstance(retrieval, SlotRetrieval):
                raise ValueError(f"GCR's weighted replay loss draws uniformly; retrieval "
                                 f"{retrieval!r} is not allowed (use replay_loss='uniform')")
            options["retrieval"] = SlotRetrieval()
        buffer = GCRBuffer(mem_size, recent_size=recent_size, lam=lam, positive=positive,
                           per_class=per_class, class_share=class_share, loss_fn=loss_fn,
                           params=params, seed=seed)
        self.rehearse(buffer, seed, options)
        plugin = cast(GCRReplayPlugin, self.rehearsal)
        plugin.replay_loss, plugin.alpha, plugin.beta = replay_loss, float(alpha), float(beta)
