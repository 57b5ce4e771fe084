"""The one place where avalanche-gss touches Avalanche 0.6 internals, and why.

* :func:`tensor_dataset`: Avalanche 0.6 has no public builder for a classification
  dataset over tensors; its ``_make_taskaware_tensor_classification_dataset`` (underscore
  named, but listed in ``avalanche.benchmarks.utils.__all__``) is the one its own
  benchmarks use.
* :func:`has_transforms`: whether reading a dataset can give anything but the stored
  tensors. Avalanche keeps transform groups in its private flat-data tree
  (``_flat_data``, ``_transform_groups``, ``_frozen_transform_groups``, ``_datasets``);
  no public attribute tells whether a dataset transforms its samples.
* :func:`reading_copy`: a dataset to read a stream's dataset through without leaving
  anything in it. Reading an item of an ``AvalancheDataset`` inserts the current transform
  group into its transform groups' ``defaultdict`` (private ``_transform_groups``), which
  allocates that dict's table: ~250 bytes per dataset, kept as long as the dataset is. The
  streams of ``split_online_stream`` keep every experience they generated, so reading each
  experience's dataset grew memory by that much per experience for the whole run. Its
  ``_shallow_clone_dataset`` (what its own ``train()`` / ``eval()`` copies are made of)
  reads the same items with the same transforms and leaves the original as it was.
* :func:`criterion_of`: the loss module a strategy was built with. Avalanche 0.6 keeps it
  in ``strategy._criterion``; its public ``criterion()`` computes the loss of the current
  mini-batch instead, and a replay step on other samples, or a check of what kind of loss
  it is, needs the module itself.
* :func:`is_active`: whether an ``EvaluationPlugin`` records anything. Avalanche 0.6 keeps
  it in ``_active`` (False when built with no metric and no logger) and has no accessor.

One more use cannot live here, since it is an override rather than a call:
:class:`~avalanche_gss.training.hooks.FastHooks` replaces the templates' per-event trigger
methods (``_before_forward`` and 12 others), the only place where Avalanche dispatches an
event to the plugins, so that plugins with nothing to do on an event are not called.
"""

from __future__ import annotations

from typing import Any

from avalanche.benchmarks.utils import (
    AvalancheDataset,
    _make_taskaware_tensor_classification_dataset,
)
from torch import Tensor

__all__ = ["tensor_dataset", "has_transforms", "reading_copy", "criterion_of", "is_active"]


def tensor_dataset(x: Tensor, y: Tensor, task_labels: Tensor | int = 0) -> AvalancheDataset:
    """Wrap tensors as an Avalanche classification dataset yielding ``(x_i, y_i, t_i)``.

    No copy: the dataset indexes the given tensors.

    :param x: ``(N, ...)`` inputs.
    :param y: ``(N,)`` int64 labels.
    :param task_labels: one task label for every sample, or ``(N,)`` per-sample labels.
    """
    labels: list[int] | int = (
        task_labels.tolist() if isinstance(task_labels, Tensor) else int(task_labels))
    return _make_taskaware_tensor_classification_dataset(x, y, task_labels=labels)


def has_transforms(dataset: Any) -> bool:
    """Whether reading ``dataset`` may apply a transform (in any group, frozen or not).

    A dataset without transforms yields the tensors it stores, so a buffer may keep them
    and replay them directly; one with a transform (e.g. a random augmentation) must be
    read again at each replay.

    :param dataset: an ``AvalancheDataset`` or any PyTorch dataset.
    """
    node = dataset._flat_data if isinstance(dataset, AvalancheDataset) else dataset
    groups = [getattr(node, "_transform_groups", None),
              getattr(node, "_frozen_transform_groups", None)]
    for group in groups:
        table = getattr(group, "transform_groups", None) or {}
        if any(t is not None for t in table.values()):
            return True
    if getattr(node, "transform", None) is not None:  # e.g. a torchvision dataset
        return True
    if getattr(node, "target_transform", None) is not None:
        return True
    return any(has_transforms(child) for child in getattr(node, "_datasets", ()))


def reading_copy(dataset: Any) -> Any:
    """A shallow copy of ``dataset`` that reads its items, leaving ``dataset`` unchanged.

    :param dataset: an ``AvalancheDataset`` (copied) or any dataset (returned as is).
    """
    if isinstance(dataset, AvalancheDataset):
        return dataset._shallow_clone_dataset()
    return dataset


def criterion_of(strategy: Any) -> Any:
    """The loss module ``strategy`` was built with (``criterion=``).

    :param strategy: an Avalanche ``SupervisedTemplate``.
    """
    return strategy._criterion


def is_active(evaluator: Any) -> bool:
    """Whether an ``EvaluationPlugin`` records anything (``True`` when unknown).

    :param evaluator: an Avalanche ``EvaluationPlugin``.
    """
    return bool(getattr(evaluator, "_active", True))
