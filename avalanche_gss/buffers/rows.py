"""What a buffer knows about one batch of samples, and which models take task labels."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from avalanche.models import MultiTaskModule
from torch import Tensor, nn

__all__ = ["Rows", "task_labels_for", "labels_on", "model_device", "same_shapes"]


def task_labels_for(model: nn.Module | None, t: Tensor) -> Tensor | None:
    """The task labels to call ``model`` with: ``t`` for a ``MultiTaskModule``, else None.

    Avalanche's ``avalanche_forward`` calls a ``MultiTaskModule`` as ``model(x, t)`` and any
    other model as ``model(x)``; the gradient engine and the feature scorer do the same.

    :param model: the network.
    :param t: ``(N,)`` task labels of the samples.
    """
    return t if isinstance(model, MultiTaskModule) else None


def labels_on(model: nn.Module, t: Tensor, device: torch.device | str) -> Tensor | None:
    """:func:`task_labels_for`, moved to ``device``.

    :param model: the network.
    :param t: ``(N,)`` task labels of the samples.
    :param device: where the model runs.
    """
    labels = task_labels_for(model, t)
    return None if labels is None else labels.to(device)


def model_device(model: nn.Module) -> torch.device | None:
    """The device of the model's first parameter (``None``: it has none)."""
    param = next(model.parameters(), None)
    return None if param is None else param.device


def same_shapes(a: nn.Module, b: nn.Module) -> bool:
    """Whether two networks' parameters have the same shapes, in order (host metadata only).

    :param a: a network (a copy of ``b`` made earlier, say).
    :param b: the other network (its head may have grown since).
    """
    pa, pb = list(a.parameters()), list(b.parameters())
    return len(pa) == len(pb) and all(x.shape == y.shape for x, y in zip(pa, pb, strict=True))


@dataclass
class Rows:
    """A batch of samples with everything a buffer keeps about each one.

    A policy's decision (:meth:`~avalanche_gss.buffers.OnlineBuffer._assign`) receives the
    incoming samples as ``Rows``. ``x``, ``y``, ``t`` live on the samples' device; the
    provenance columns on the CPU.

    :param x: ``(B, *input_shape)`` the inputs as the model was trained on them.
    :param y: ``(B,)`` int64 class labels.
    :param t: ``(B,)`` int64 task labels.
    :param src: ``(B,)`` int64 id of the source dataset in the buffer's registry (-1: none).
    :param idx: ``(B,)`` int64 index of the sample in its source dataset.
    :param plain: ``(B,)`` bool: reading the source gives exactly ``x`` (no transform).
    """

    x: Tensor
    y: Tensor
    t: Tensor
    src: Tensor
    idx: Tensor
    plain: Tensor

    @staticmethod
    def of_tensors(x: Tensor, y: Tensor, t: Tensor) -> Rows:
        """Samples given as tensors, with no source dataset."""
        b = len(y)
        return Rows(x, y, t, torch.full((b,), -1, dtype=torch.long),
                    torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool))

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def take(self, index: Tensor) -> Rows:
        """Rows at ``index`` (a CPU index or boolean mask)."""
        index = index.cpu()
        dev = index.to(self.x.device, non_blocking=True)  # no stream sync on CUDA
        return Rows(self.x[dev], self.y[dev], self.t[dev], self.src[index], self.idx[index],
                    self.plain[index])

    @staticmethod
    def cat(a: Rows, b: Rows) -> Rows:
        """``a`` then ``b`` (``b`` moved to ``a``'s device)."""
        dev = a.x.device
        return Rows(torch.cat([a.x, b.x.to(dev)]), torch.cat([a.y, b.y.to(dev)]),
                    torch.cat([a.t, b.t.to(dev)]), torch.cat([a.src, b.src]),
                    torch.cat([a.idx, b.idx]), torch.cat([a.plain, b.plain]))

    def to(self, device: torch.device | str) -> Rows:
        """The same rows with ``x``, ``y``, ``t`` on ``device``."""
        return Rows(self.x.to(device), self.y.to(device), self.t.to(device), self.src,
                    self.idx, self.plain)

    def detached(self) -> Rows:
        """A copy of ``x``, ``y``, ``t`` that no later change to the caller's tensors reaches."""
        return Rows(self.x.detach().clone(), self.y.detach().clone().long(),
                    self.t.detach().clone().long(), self.src, self.idx, self.plain)
