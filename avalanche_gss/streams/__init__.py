"""Real data and task-free online streams for the paper's benchmarks.

Three steps, seeded, and tensor-only until the last:

1. :func:`load_dataset` -> :class:`ArrayDataset` (MNIST, CIFAR-10, any ``.npz``).
2. A stream generator -> :class:`TaskSplit`: :func:`disjoint_tasks`, :func:`permuted_tasks`,
   :func:`imbalanced_tasks` (Table 4), :func:`blurry_tasks` (appendix).
3. :func:`online_benchmark` -> Avalanche streams (batches of 10, no task labels, no
   boundaries); :func:`class_incremental_benchmark_for` -> ``NCScenario`` for iCaRL.

The Avalanche-facing names (step 3) are imported on first use, so steps 1-2 do not pay
Avalanche's import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from .imbalanced import imbalanced_counts, imbalanced_tasks
from .npz import load_npz
from .permuted import permuted_tasks, task_permutations

if TYPE_CHECKING:
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

__all__ = [
    "DATASET_NAMES",
    "ArrayDataset",
    "TaskSplit",
    "blurry_tasks",
    "default_data_root",
    "disjoint_tasks",
    "imbalanced_counts",
    "imbalanced_tasks",
    "load_dataset",
    "load_mnist_5k",
    "load_npz",
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

# The names of __all__ that no import above binds at run time: those of .online.
_ONLINE = frozenset(name for name in __all__ if name not in globals())


def __getattr__(name: str) -> Any:
    """Import the Avalanche-facing names of :mod:`.online` on first access."""
    if name in _ONLINE:
        return getattr(importlib.import_module(".online", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
