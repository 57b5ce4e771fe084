"""A replay loss that reads per-slot state: GCR's weighted label and distillation terms.

:class:`SlotRetrieval` draws uniformly and remembers the drawn slots;
:class:`GCRReplayPlugin` learns the drawn batch with each sample weighted by the coreset
weight of its slot and pulled towards the logits stored with it (Tiwari et al., CVPR 2022;
the authors' ``GCR.observe``). Any buffer with per-slot ``weights`` and ``logits``
(:class:`WeightedSlots`, e.g. :class:`~avalanche_gss.methods.gcr.GCRBuffer`) can be
replayed this way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import torch
from avalanche.models import avalanche_forward
from torch import Tensor

from avalanche_gss._avalanche import criterion_of
from avalanche_gss.training.ace import replay_criterion
from avalanche_gss.training.rehearsal import OnlineRehearsalPlugin, single_sample_norm
from avalanche_gss.training.retrieval import Batch, RandomRetrieval, draw_slots, per_sample_loss

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["GCRReplayPlugin", "SlotRetrieval", "WeightedSlots", "ReplayLoss", "REPLAY_LOSSES"]

ReplayLoss = Literal["weighted", "uniform"]
REPLAY_LOSSES = ("weighted", "uniform")


@runtime_checkable
class WeightedSlots(Protocol):
    """A buffer with a weight and stored logits per slot (what the weighted loss reads)."""

    @property
    def weights(self) -> Tensor:
        """The stored samples' weights, ``(size,)`` (slot order)."""

    @property
    def logits(self) -> Tensor | None:
        """The logits stored with each slot, ``(M, n_out)``, or ``None`` before any."""


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
    :class:`WeightedSlots` buffer is learnt with
    ``sum_{i in B} (w_i / sum_B w) (beta CE(f(x_i), y_i) + alpha mean((f(x_i) - z_i)^2))``:
    the label term and the distillation term on the stored logits ``z_i``, each sample
    weighted by its coreset weight ``w_i`` normalised over the batch (the authors' code;
    the paper's eq. 5 up to that normalisation). ``"uniform"``: the strategy's criterion,
    unweighted (selection only). The supervised contrastive term is not provided (it needs
    a projection head and two augmented views; the library's models have neither).

    :class:`~avalanche_gss.training.OnlineRehearsal` builds the plugin with the generic
    arguments; :class:`~avalanche_gss.methods.gcr.GCR` sets :attr:`replay_loss`,
    :attr:`alpha` and :attr:`beta` after. The retrieval must be a :class:`SlotRetrieval`
    for the weighted loss.

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

    def _replay_loss(self, strategy: SupervisedTemplate, batch: Batch) -> Tensor:
        """GCR's weighted loss on the drawn slots, or the strategy's with ``"uniform"``."""
        slots = getattr(self.retrieval, "last_slots", None)
        buffer = self.storage_policy
        if (self.replay_loss == "uniform" or slots is None
                or not isinstance(buffer, WeightedSlots)):
            return super()._replay_loss(strategy, batch)
        x, y, t = batch
        with single_sample_norm(strategy.model, len(y)):
            out: Tensor = avalanche_forward(strategy.model, x, t)
        w = buffer.weights[slots.to(buffer.weights.device)].to(out.device, out.dtype)
        total = w.sum()  # normalised on the device: no read of the total (a host sync)
        w = torch.where(torch.isfinite(total) & (total > 0), w / total,
                        torch.full_like(w, 1.0 / len(w)))
        criterion = replay_criterion(criterion_of(strategy))
        loss = self.beta * (w * per_sample_loss(criterion, out, y)).sum()
        logits = buffer.logits
        if self.alpha and logits is not None:
            z = logits[slots.to(logits.device)].to(out.device, out.dtype)
            width = min(z.shape[1], out.shape[1])  # a head may have grown since
            z, now = z[:, :width], out[:, :width]
            known = ~torch.isnan(z)  # NaN: a column the sample's model did not have
            # The mean over the known columns, with no branch on them (a host sync); where
            # all are known it is, bit for bit, ((now - z) ** 2).mean(dim=1)
            sq = torch.where(known, now - z.nan_to_num(), torch.zeros_like(now)) ** 2
            per = sq.sum(dim=1) / known.sum(dim=1).clamp(min=1)
            loss = loss + self.alpha * (w * per).sum()
        return self._with_replay_terms(strategy, loss, x, t, out)
