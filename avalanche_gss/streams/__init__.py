"""Real data and task-free online streams for the paper's benchmarks.

Three steps, seeded, and tensor-only until the last:

1. :func:`load_dataset` -> :class:`ArrayDataset` (MNIST, CIFAR-10, any ``.npz``).
2. A stream -> :class:`TaskSplit`: by name from :data:`REGISTRY`
   (``REGISTRY["disjoint"].build(data, seed=0)``; :func:`register_stream` adds one's own,
   :func:`blurred` and :func:`gradual_drift` transform one), or a generator:
   :func:`disjoint_tasks`, :func:`permuted_tasks`, :func:`imbalanced_tasks` (Table 4),
   :func:`blurry_tasks` (appendix), :func:`gradual_tasks`.
3. :func:`online_benchmark` -> Avalanche streams (batches of 10, no task labels, no
   boundaries); :func:`class_incremental_benchmark_for` -> ``NCScenario`` for iCaRL.

The registry's names (:mod:`.registry`) import without torch; every other name is imported
on first use, so that listing the streams costs nothing and steps 1-2 do not pay
Avalanche's import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .registry import (
    BLURRY_KEEP,
    REGISTRY,
    OptionValue,
    StreamDefinition,
    blurred,
    gradual_drift,
    register_stream,
)

if TYPE_CHECKING:
    from ._split import TaskSplit
    from .blurry import blurry_tasks
    from .datasets import (
        DATASET_NAMES,
        ArrayDataset,
        default_data_root,
        load_dataset,
        load_mnist_5k,
        synthetic_images,
    )
    from .disjoint import disjoint_tasks
    from .gradual import gradual_tasks
    from .imbalanced import imbalanced_counts, imbalanced_tasks
    from .npz import load_npz
    from .online import (
        OnlineBenchmark,
        OnlineTrainStream,
        TensorExperience,
        class_incremental_benchmark_for,
        dataset_tensors,
        experience_tensors,
        online_benchmark,
        tensor_dataset,
    )
    from .permuted import permuted_tasks, task_permutations

_LAZY: dict[str, str] = {
    "TaskSplit": "_split", "blurry_tasks": "blurry", "disjoint_tasks": "disjoint",
    "gradual_tasks": "gradual", "imbalanced_counts": "imbalanced",
    "imbalanced_tasks": "imbalanced", "load_npz": "npz", "permuted_tasks": "permuted",
    "task_permutations": "permuted",
    **dict.fromkeys(("DATASET_NAMES", "ArrayDataset", "default_data_root", "load_dataset",
                     "load_mnist_5k", "synthetic_images"), "datasets"),
    **dict.fromkeys(("OnlineBenchmark", "OnlineTrainStream", "TensorExperience",
                     "class_incremental_benchmark_for", "dataset_tensors",
                     "experience_tensors", "online_benchmark", "tensor_dataset"), "online"),
}
"""Each name imported on first access, and the module of this package that defines it."""

__all__ = [
    "BLURRY_KEEP",
    "DATASET_NAMES",
    "REGISTRY",
    "ArrayDataset",
    "OptionValue",
    "StreamDefinition",
    "TaskSplit",
    "blurred",
    "blurry_tasks",
    "default_data_root",
    "disjoint_tasks",
    "gradual_drift",
    "gradual_tasks",
    "imbalanced_counts",
    "imbalanced_tasks",
    "load_dataset",
    "load_mnist_5k",
    "load_npz",
    "register_stream",
    "synthetic_images",
    "permuted_tasks",
    "task_permutations",
    # from .online, imported on first access (see __getattr__)
    "OnlineBenchmark",
    "OnlineTrainStream",
    "TensorExperience",
    "class_incremental_benchmark_for",
    "dataset_tensors",
    "experience_tensors",
    "online_benchmark",
    "tensor_dataset",
]


def __getattr__(name: str) -> Any:
    """Import a name of :data:`_LAZY` from its module on first access."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
