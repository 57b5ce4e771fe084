"""``GCR`` (Gradient Coreset based Replay, Tiwari et al., CVPR 2022): the buffer and strategy."""

from __future__ import annotations

from typing import Any, Literal, cast

import torch
from avalanche.models import avalanche_forward
from torch import Tensor, nn
from typing_extensions import Self  # typing.Self is Python 3.11+

from avalanche_gss._avalanche import criterion_of
from avalanche_gss.buffers import GradientScored, RecentMergeBuffer, Rows
from avalanche_gss.buffers.merge import usable as usable_rows
from avalanche_gss.gradients.state import eval_mode
from avalanche_gss.methods.spec import Method
from avalanche_gss.selection.gcr import OMPResult, class_budgets, omp_select
from avalanche_gss.training.rehearsal import (
    BufferStrategy,
    OnlineRehearsalPlugin,
    single_sample_norm,
)
from avalanche_gss.training.retrieval import Batch, RandomRetrieval, draw_slots, per_sample_loss

__all__ = ["GCRBuffer", "GCR", "GCRReplayPlugin", "SlotRetrieval", "METHODS"]

ReplayLoss = Literal["weighted", "uniform"]
REPLAY_LOSSES = ("weighted", "uniform")
ClassShare = Literal["equal", "seen"]
CLASS_SHARES = ("equal", "seen")


class GCRBuffer(GradientScored, RecentMergeBuffer):
    """``GCR``: Gradient Coreset based Replay, adapted to a task-free stream and a fixed buffer.

    Tiwari, Killamsetty, Iyer and Shenoy, "GCR: Gradient Coreset Based Replay Buffer
    Selection for Continual Learning", CVPR 2022 (arXiv:2111.11210), and the authors' code
    (google-research ``gradient_coresets_replay``).

    The buffer is a weighted coreset: each stored sample carries a weight (kept in
    :attr:`scores`) and the model's logits when it was stored (:attr:`logits`, for the
    distillation term of :class:`GCR`'s loss). Incoming samples wait in a recent buffer
    (the :class:`~avalanche_gss.buffers.RecentMergeBuffer` template); once it holds
    ``recent_size`` samples and buffer ∪ recent exceeds ``M``, the exact per-sample Gram of
    the union's loss gradients (gradient engine, model in eval mode, state untouched) goes
    to :func:`~avalanche_gss.selection.gcr.omp_select`, per class as in the authors' code
    (``selection_type = 'PerClass'``): each class present gets an equal budget of slots
    (capped by its candidates, the surplus shared by the others:
    :func:`~avalanche_gss.selection.gcr.class_budgets`), and OMP picks that many of
    its samples and nonnegative weights whose weighted gradient matches ``sum_i w_i g_i``
    over the class's candidates (stored samples with their weights, waiting ones with
    weight 1), with ridge ``lam`` (the authors' 0.5). When the
    nonnegative pursuit stops short of the budget, the rest is drawn at random from the
    class's other candidates with weight 1, as in the authors' code.

    Adaptations to the task-free online setting:

    - GCR updates its coreset from the buffer and the data of the current task seen since
      the last update; here the data since the last update are the ``recent_size``
      samples of the recent buffer (one update per ``recent_size / 10`` batches of 10),
      and the candidate pool is buffer ∪ recent;
    - the authors give each task ``M / tasks`` slots, whatever its size, split among its
      classes in proportion to their counts; without tasks, each class gets an equal
      share (the same split for tasks of disjoint, equally frequent classes);
      ``class_share="seen"``: shares in proportion to the samples of each class seen
      (the split a reservoir tends to);
    - the gradients are those of ``loss_fn`` (cross-entropy) with respect to all trainable
      parameters; the authors' code takes the last layer's gradient of their training
      loss (label and distillation terms);
    - the logits stored with a sample are the model's (eval mode) when the buffer sees it,
      after the batch was learnt; the authors store the training forward's outputs.

    ``per_class=False`` and ``positive=False`` give this library's first version: one
    pursuit over the whole union with unconstrained ridge weights. Those weights turn
    negative and large, feed back as the next target's pool weights, and the class
    composition drifts (on disjoint MNIST, M = 300, classes of the first tasks vanish).

    Waiting samples with a non-finite gradient are dropped at the merge; a stored sample
    with a non-finite gradient skips the merge (buffer unchanged, waiting samples dropped).
    The model's output size must stay the same along the stream (the stored logits).

    :param max_size: number of slots ``M``.
    :param recent_size: samples between two coreset updates.
    :param lam: ridge regularisation of the weights (the authors' 0.5).
    :param positive: nonnegative weights (the authors'); ``False``: unconstrained.
    :param per_class: one pursuit per class with class budgets (the authors'); ``False``:
        one pursuit over the union.
    :param class_share: ``"equal"`` budgets per class, or ``"seen"``: in proportion to the
        samples of each class seen.
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
            raise ValueError(f"class_share must be one of {', '.join(CLASS_SHARES)}, "
                             f"got {class_share!r}")
        self.class_share: ClassShare = class_share
        self.lam = float(lam)
        self.positive = bool(positive)
        self.per_class = bool(per_class)
        self.loss_fn = loss_fn
        self.params = params
        self.last_result: OMPResult | None = None  # the last pursuit of the last merge
        self.class_seen = torch.zeros(0, dtype=torch.long)  # (C,) samples seen per class
        self.logits: Tensor | None = None  # (M, n_out) logits stored with each sample
        self.recent_logits: Tensor | None = None  # (R, n_out) those of the waiting samples
        self._union_weights: Tensor | None = None  # (K,) weights of the last selection's union
        self._kept: Tensor | None = None

    @property
    def weights(self) -> Tensor:
        """The stored samples' coreset weights, ``(size,)`` float32 (slot order)."""
        if self.scores is None:
            return torch.zeros(0)
        return self.scores[: self.size]

    def _admit(self, rows: Rows, model: nn.Module | None) -> Tensor:
        y = rows.y.detach().cpu().long()
        n_cls = max(len(self.class_seen), int(y.max()) + 1 if len(y) else 0)
        seen = torch.zeros(n_cls, dtype=torch.long)
        seen[: len(self.class_seen)] = self.class_seen
        self.class_seen = seen + torch.bincount(y, minlength=n_cls)
        if model is not None:
            with torch.no_grad(), eval_mode(model):
                out = avalanche_forward(model, rows.x, rows.t).detach().float()
            out = out.to(rows.x.device)
            old = self.recent_logits
            self.recent_logits = out if old is None else torch.cat([old, out])
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
        if self.per_class:
            classes, available = torch.unique(labels, return_counts=True)
            share = torch.ones(len(classes), dtype=torch.float64)
            if self.class_share == "seen":
                known = classes < len(self.class_seen)
                share[~known] = 0.0
                share[known] = self.class_seen[classes[known]].double()
            budgets = class_budgets(available, share, self.max_size)
            groups = [(usable[labels == c], int(b)) for c, b in zip(classes, budgets, strict=True)]
        else:
            groups = [(usable, self.max_size)]
        new = pool.clone()
        kept = []
        for members, budget in groups:
            keep, weights = self._pursue(gram, pool, members, budget)
            new[keep] = weights
            kept.append(keep)
        self._union_weights = new
        return torch.cat(kept).sort().values

    def _pursue(self, gram: Tensor, pool: Tensor, members: Tensor, budget: int
                ) -> tuple[Tensor, Tensor]:
        """OMP on ``members`` for ``budget`` slots, the rest drawn at random with weight 1."""
        if len(members) <= budget:
            return members, pool[members]
        result = omp_select(gram[members[:, None], members[None, :]], pool[members], budget,
                            self.lam, positive=self.positive)
        self.last_result = result
        keep, weights = members[result.indices], result.weights
        short = budget - len(keep)
        if short > 0:  # the authors' fill: random candidates, weight 1
            rest = members[~torch.isin(members, keep)]
            fill = rest[torch.randperm(len(rest), generator=self.generator)[:short]]
            keep = torch.cat([keep, fill])
            weights = torch.cat([weights, torch.ones(short, dtype=torch.float64)])
        return keep, weights

    def merge_recent(self, model: nn.Module | None = None) -> Tensor:
        """Run the coreset update on buffer ∪ recent now; store the new weights and logits.

        :param model: the learner.
        :return: ``(R,)`` slot taken by each recent sample, ``-1`` where it was dropped.
        """
        n = self.size
        self._union_weights = None
        recent_logits = self.recent_logits
        slots = super().merge_recent(model)
        self.recent_logits = None
        pool = self._union_weights
        kept_new = (slots >= 0).nonzero().flatten()
        if pool is not None and self.scores is not None:
            # The kept stored samples stay in their slots: a selection keeps at least
            # the n stored ones' count (M >= n, or all of a fitting union).
            dev = self.scores.device
            stored = self.weights
            stored[: n] = pool[:n].to(dev, torch.float32)
            self.scores[slots[kept_new].to(dev)] = pool[n + kept_new].to(dev, torch.float32)
        if recent_logits is not None and len(recent_logits) == len(slots):
            if self.logits is None:
                self.logits = recent_logits.new_zeros((self.max_size, recent_logits.shape[1]))
            self.logits[slots[kept_new].to(self.logits.device)] = recent_logits[
                kept_new.to(recent_logits.device)].to(self.logits.device)
        self._union_weights = None
        return slots

    def _move(self, dest: Tensor, source: Tensor) -> None:
        super()._move(dest, source)
        if self.logits is not None:
            self.logits[dest.to(self.logits.device)] = self.logits[source.to(self.logits.device)]

    def _kept_on_shrink(self, new_size: int) -> Tensor:
        self._kept = super()._kept_on_shrink(new_size)
        return self._kept

    def resize(self, strategy: Any, new_size: int) -> None:
        """:meth:`OnlineBuffer.resize`, the stored logits following their samples."""
        self._kept = None
        size = self.size
        super().resize(strategy, new_size)
        if self.logits is not None:
            keep = self._kept if self._kept is not None else torch.arange(size)
            logits = self.logits.new_zeros((self.max_size, self.logits.shape[1]))
            logits[: len(keep)] = self.logits[keep.to(self.logits.device)]
            self.logits = logits
        self._kept = None

    def state_dict(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer.state_dict` plus the class counts and the stored logits."""
        state = super().state_dict()
        state["class_seen"] = self.class_seen.clone()
        state["logits"] = None if self.logits is None else self.logits.cpu().clone()
        state["recent_logits"] = (None if self.recent_logits is None
                                  else self.recent_logits.cpu().clone())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        seen = state.get("class_seen")
        self.class_seen = torch.zeros(0, dtype=torch.long) if seen is None else seen.clone()
        logits, recent = state.get("logits"), state.get("recent_logits")
        self.logits = None if logits is None else logits.clone()
        self.recent_logits = None if recent is None else recent.clone()

    def to(self, device: torch.device | str) -> Self:
        """Move the stored and waiting tensors, and the logits, to ``device`` in place.

        :param device: where the samples live (normally the strategy's device).
        :return: the buffer.
        """
        super().to(device)
        if self.logits is not None:
            self.logits = self.logits.to(device)
        if self.recent_logits is not None:
            self.recent_logits = self.recent_logits.to(device)
        return self


class SlotRetrieval(RandomRetrieval):
    """The uniform draw of :class:`~avalanche_gss.training.retrieval.RandomRetrieval`.

    The drawn slots are kept in :attr:`last_slots`, for a replay loss that reads per-slot
    state (:class:`GCRReplayPlugin`).
    """

    def __init__(self) -> None:
        self._last_slots: Tensor | None = None  # transient: not part of a configuration

    @property
    def last_slots(self) -> Tensor | None:
        """The slots of the last batch retrieved (CPU int64), ``None`` before any."""
        return self._last_slots

    def retrieve(self, strategy: Any, policy: Any, k: int,
                 generator: torch.Generator) -> Batch | None:
        """:func:`~avalanche_gss.training.retrieval.draw_slots` of ``k`` samples."""
        drawn = draw_slots(policy, k, generator, strategy.device)
        self._last_slots = None if drawn is None else drawn[1]
        return None if drawn is None else drawn[0]

    def reset(self) -> None:
        """Forget the last slots."""
        self._last_slots = None


class GCRReplayPlugin(OnlineRehearsalPlugin):
    """Online rehearsal with GCR's replay loss (the authors' ``GCR.observe``).

    With ``replay_loss="weighted"`` a replay batch ``B`` drawn uniformly from a
    :class:`GCRBuffer` is learnt with
    ``sum_{i in B} (w_i / sum_B w) (beta CE(f(x_i), y_i) + alpha mean((f(x_i) - z_i)^2))``:
    the label term and the distillation term on the stored logits ``z_i``, each sample
    weighted by its coreset weight ``w_i`` normalised over the batch (the authors' code;
    the paper's eq. 5 up to that normalisation). ``"uniform"``: the strategy's criterion,
    unweighted (selection only). The supervised contrastive term is not provided (it needs
    a projection head and two augmented views; the library's models have neither).

    :class:`~avalanche_gss.training.OnlineRehearsal` builds the plugin with the generic
    arguments; :class:`GCR` sets :attr:`replay_loss`, :attr:`alpha` and :attr:`beta` after.
    The retrieval must be a :class:`SlotRetrieval` for the weighted loss.

    :param replay_loss: ``"weighted"`` or ``"uniform"``.
    :param alpha: weight of the distillation term.
    :param beta: weight of the label term.
    :param rehearsal: :class:`~avalanche_gss.training.OnlineRehearsalPlugin`'s arguments.
    """

    def __init__(self, storage_policy: Any, replay_batch_size: int = 10, *,
                 replay_loss: ReplayLoss = "uniform", alpha: float = 0.1, beta: float = 0.5,
                 **rehearsal: Any) -> None:
        super().__init__(storage_policy, replay_batch_size, **rehearsal)
        self.replay_loss: ReplayLoss = replay_loss
        self.alpha, self.beta = float(alpha), float(beta)

    def _replay_loss(self, strategy: Any, batch: Batch) -> Tensor:  # type: ignore[override]
        slots = getattr(self.retrieval, "last_slots", None)
        buffer = self.storage_policy
        if self.replay_loss == "uniform" or slots is None or not isinstance(buffer, GCRBuffer):
            return OnlineRehearsalPlugin._replay_loss(strategy, batch)
        x, y, t = batch
        with single_sample_norm(strategy.model, len(y)):
            out: Tensor = avalanche_forward(strategy.model, x, t)
        w = buffer.weights[slots.to(buffer.weights.device)].to(out.device, out.dtype)
        total = w.sum()
        w = w / total if bool(torch.isfinite(total)) and float(total) > 0 else torch.full_like(
            w, 1.0 / len(w))
        loss = self.beta * (w * per_sample_loss(criterion_of(strategy), out, y)).sum()
        if self.alpha and buffer.logits is not None:
            z = buffer.logits[slots.to(buffer.logits.device)].to(out.device, out.dtype)
            loss = loss + self.alpha * (w * ((out - z) ** 2).mean(dim=1)).sum()
        return loss


class GCR(BufferStrategy):
    """Online rehearsal with the ``GCR`` buffer and loss (Tiwari et al., CVPR 2022).

    ``replay_loss="weighted"`` (the paper's method, the default): replay batches are
    drawn uniformly and learnt with GCR's weighted label and distillation terms
    (:class:`GCRReplayPlugin`), ``alpha = 0.1`` and ``beta = 0.5`` (the authors' code's
    defaults, ``CustomLoss(alpha=0.1, beta=0.5)``; the paper tunes them per dataset).
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
        self._rehearse(buffer, seed, options)
        plugin = cast(GCRReplayPlugin, self.rehearsal)
        plugin.replay_loss, plugin.alpha, plugin.beta = replay_loss, float(alpha), float(beta)


METHODS = (Method("GCR", GCRBuffer, GCR),)
