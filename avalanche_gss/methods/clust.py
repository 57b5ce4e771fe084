"""``GSS-Clust`` and ``FSS-Clust`` (paper section 4.1): online clustering of the stream.

Both keep the centres of Charikar et al.'s doubling algorithm over ``M_b U M_r``
(:class:`~avalanche_gss.selection.clust.DoublingClustering`) at each merge of the recent
buffer: GSS-Clust between normalised loss gradients, FSS-Clust between features.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import GradientScored, RecentMergeBuffer, Rows, Variant
from avalanche_gss.buffers.merge import usable as usable_rows
from avalanche_gss.buffers.presets import resolve
from avalanche_gss.buffers.rows import model_device
from avalanche_gss.buffers.scored import model_features
from avalanche_gss.gradients import cosine_from_gram
from avalanche_gss.selection.clust import DoublingClustering, feature_distance, gradient_distance
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["ClustFeatures", "GSSClustBuffer", "FSSClustBuffer", "GSSClust", "FSSClust"]

ClustFeatures = Literal["penultimate", "logits"]


class ClustBuffer(RecentMergeBuffer):
    """The doubling algorithm over ``M_b U M_r`` at each merge (GSS-Clust, FSS-Clust).

    The buffer samples are the cluster centres; their distances are recomputed with the
    current model at each merge. Stored centres the model no longer tells apart
    (distance 0) are merged first, since the doubling algorithm needs distinct centres.
    Subclasses implement :meth:`_distances`.
    """

    def __init__(
        self, max_size: int, *, recent_size: int = 100, growth: float = 2.0, seed: int = 0
    ) -> None:
        super().__init__(max_size, recent_size=recent_size, seed=seed)
        self.clustering = DoublingClustering(self.max_size, growth=growth, seed=seed)

    _measures = "gradient"  # what the distances are between, for warnings

    def _distances(self, union: Rows, model: nn.Module) -> tuple[Tensor, Tensor]:
        """Return the union's ``(K, K)`` distances and its ``(K,)`` finiteness mask.

        The mask is False for samples whose gradient or feature is not finite (their
        distances are not either).
        """
        raise NotImplementedError

    def _select(self, union: Rows, n_stored: int, model: nn.Module | None) -> Tensor:
        if model is None:
            raise ValueError(f"{type(self).__name__} measures distances with the model: "
                             "pass model=")
        dist, valid = self._distances(union, model)  # (K, K), (K,)
        usable = usable_rows(self, valid.cpu(), n_stored, self._measures)  # (K',)
        if usable is None:
            return torch.arange(n_stored)
        dist = dist.detach().cpu()[usable[:, None], usable[None, :]]  # (K', K')
        alive = torch.ones(len(usable), dtype=torch.bool)
        coincide = dist[:n_stored, :n_stored] <= 0  # (n, n)
        coincide.fill_diagonal_(False)
        if bool(coincide.any()):  # keep the first of each group of coinciding centres
            for i in range(n_stored):
                if alive[i]:
                    alive[i + 1 : n_stored] &= ~coincide[i, i + 1 :]
        idx = alive.nonzero().flatten()
        keep = self.clustering.update(dist[idx[:, None], idx[None, :]], int(alive[:n_stored].sum()))
        return usable[idx[keep]]

    def resize(self, strategy: Any, new_size: int) -> None:
        """Change ``max_size`` and the clustering's capacity with it."""
        super().resize(strategy, new_size)
        self.clustering.capacity = self.max_size

    def _snapshot(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer._snapshot` plus the clustering's threshold and generator."""
        return {**super()._snapshot(), "clustering": self.clustering.state_dict()}

    def _rollback(self, snapshot: dict[str, Any]) -> None:
        super()._rollback(snapshot)
        self.clustering.load_state_dict(snapshot["clustering"])

    def state_dict(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer.state_dict` plus the clustering's threshold and RNG."""
        state = super().state_dict()
        state["clustering"] = self.clustering.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.clustering.capacity = self.max_size
        self.clustering.load_state_dict(state["clustering"])


class GSSClustBuffer(GradientScored, ClustBuffer):
    """``GSS-Clust`` (paper section 4.1): online clustering of normalised loss gradients.

    Every ``recent_size`` samples, the Euclidean distances ``||u_i - u_j||`` between the
    unit gradients of ``M_b U M_r`` (from the gradient engine's cosine Gram, model in
    eval mode, state untouched) feed
    :class:`~avalanche_gss.selection.clust.DoublingClustering`, which keeps at most ``M``
    cluster centres (Charikar et al.'s doubling algorithm); the centres are stored.

    The threshold only grows, and these distances are at most 2: with ``growth=2`` it
    soon exceeds most of them and the buffer shrinks to a few centres (measured in
    ``docs/RESULTS.md``, "Measurements the buffers' documentation used to quote").

    :param max_size: number of slots ``M``.
    :param variant: ``"authors"`` (default: it reproduces the paper's published numbers)
        grows the threshold by 1.01 per merge round, as the authors' ``GSS_Clust.py``;
        ``"paper"`` doubles it (the doubling algorithm as the paper writes it).
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param growth: threshold factor per merge round; ``None``: by ``variant``.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's and the clustering's generators.
    """

    PRESETS = {"paper": {"growth": 2.0}, "authors": {"growth": 1.01}}
    """The options each variant sets."""

    method = "GSS-Clust"

    def __init__(
        self,
        max_size: int,
        *,
        variant: Variant = "authors",
        recent_size: int = 100,
        growth: float | None = None,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        options = resolve(self.PRESETS, variant, {"growth": growth})
        super().__init__(max_size, recent_size=recent_size, growth=options["growth"], seed=seed)
        self.variant: Variant = variant
        self.loss_fn = loss_fn
        self.params = params

    def _distances(self, union: Rows, model: nn.Module) -> tuple[Tensor, Tensor]:
        gram = self._gram(model, union.x, union.y, union.t)  # (K, K)
        valid = torch.isfinite(gram.diagonal())  # (K,)
        return gradient_distance(cosine_from_gram(gram)), valid  # (K, K), (K,)


class FSSClustBuffer(ClustBuffer):
    """``FSS-Clust`` (paper section 4.1): online clustering of the samples' features.

    Every ``recent_size`` samples, the distances between the features of
    ``M_b U M_r`` (model in eval mode, no gradient, state preserved) feed
    :class:`~avalanche_gss.selection.clust.DoublingClustering`, which keeps at most ``M``
    cluster centres (Charikar et al.'s doubling algorithm); the centres are stored.
    As the threshold only grows, the buffer may hold far fewer than ``M`` centres
    (measured in ``docs/RESULTS.md``).

    :param max_size: number of slots ``M``.
    :param variant: ``"authors"`` (default: it reproduces the paper's published numbers)
        clusters squared Euclidean distances between logits, as the authors'
        ``FSS_Clust.py``; ``"paper"`` Euclidean distances between penultimate features.
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param features: ``"penultimate"`` (paper: "the last layer before classification",
        the input of the model's classifier, see
        :func:`~avalanche_gss.buffers.model_features`) or ``"logits"`` (the authors');
        ``None``: by ``variant``.
    :param squared: squared Euclidean distances, as the authors' code (not a metric: the
        clustering's radius bound no longer holds); ``None``: by ``variant``.
    :param growth: threshold factor per merge round (2: doubling, also the authors');
        ``None``: by ``variant``.
    :param seed: seed of the buffer's and the clustering's generators.
    """

    PRESETS = {
        "paper": {"features": "penultimate", "squared": False, "growth": 2.0},
        "authors": {"features": "logits", "squared": True, "growth": 2.0},
    }
    """The options each variant sets."""

    def __init__(
        self,
        max_size: int,
        *,
        variant: Variant = "authors",
        recent_size: int = 100,
        features: ClustFeatures | None = None,
        squared: bool | None = None,
        growth: float | None = None,
        seed: int = 0,
    ) -> None:
        options = resolve(self.PRESETS, variant,
                          {"features": features, "squared": squared, "growth": growth})
        super().__init__(max_size, recent_size=recent_size, growth=options["growth"], seed=seed)
        self.variant: Variant = variant
        if options["features"] not in ("penultimate", "logits"):
            raise ValueError(f"features must be 'penultimate' or 'logits', got {features!r}")
        self.features: ClustFeatures = options["features"]
        self.squared: bool = options["squared"]

    _measures = "feature"

    def _distances(self, union: Rows, model: nn.Module) -> tuple[Tensor, Tensor]:
        dev = model_device(model) or union.x.device
        out = model_features(model, union.x.to(dev), union.t.to(dev),
                             penultimate=self.features == "penultimate")  # (K, D)
        valid = torch.isfinite(out).all(dim=1)  # (K,)
        return feature_distance(out, squared=self.squared), valid  # (K, K), (K,)


class GSSClust(BufferStrategy):
    """Online rehearsal with the ``GSS-Clust`` buffer (doubling clustering of gradients).

    The buffer's options (``variant``, ``recent_size``, ``growth``, ``loss_fn``, ``params``)
    are those of :class:`GSSClustBuffer`, with its defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = GSSClustBuffer

    def __init__(
        self, *, mem_size: int, seed: int = 0, variant: Variant = "authors", recent_size: int = 100,
        growth: float | None = None, loss_fn: Any = None, params: list[nn.Parameter] | None = None,
        **options: Any,
    ) -> None:
        buffer = GSSClustBuffer(mem_size, variant=variant, recent_size=recent_size, growth=growth,
                                loss_fn=loss_fn, params=params, seed=seed)
        self.rehearse(buffer, seed, options)


class FSSClust(BufferStrategy):
    """Online rehearsal with the ``FSS-Clust`` buffer (doubling clustering of features).

    The buffer's options (``variant``, ``recent_size``, ``features``, ``squared``,
    ``growth``) are those of :class:`FSSClustBuffer`, with its defaults, and documented
    there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = FSSClustBuffer

    def __init__(
        self, *, mem_size: int, seed: int = 0, variant: Variant = "authors", recent_size: int = 100,
        features: ClustFeatures | None = None, squared: bool | None = None,
        growth: float | None = None, **options: Any,
    ) -> None:
        buffer = FSSClustBuffer(mem_size, variant=variant, recent_size=recent_size,
                                features=features, squared=squared, growth=growth, seed=seed)
        self.rehearse(buffer, seed, options)
