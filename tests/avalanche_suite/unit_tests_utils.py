"""What the adapted tests need from Avalanche 0.6.0's ``tests/unit_tests_utils.py``.

Copied from Avalanche (https://github.com/ContinualAI/avalanche, tag v0.6.0, MIT License,
Copyright (c) 2020 ContinualAI): ``get_fast_benchmark`` and
``dummy_classification_datasets``, unchanged but for formatting, plus the list of every
buffer of avalanche-gss with the small sizes the adapted tests use.
"""

import torch
from avalanche.benchmarks import nc_benchmark
from avalanche.benchmarks.utils import _make_taskaware_tensor_classification_dataset
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split

from avalanche_gss import (
    FSSClustBuffer,
    GSSClustBuffer,
    GSSGreedyBuffer,
    GSSIQPBuffer,
    RandBuffer,
    ReservoirBuffer,
)
from avalanche_gss.methods.gcr import GCRBuffer
from avalanche_gss.methods.ocs import OCSBuffer


def get_fast_benchmark(
    use_task_labels=False,
    shuffle=True,
    n_samples_per_class=100,
    n_classes=10,
    n_features=6,
    seed=None,
    train_transform=None,
    eval_transform=None,
):
    train, test = dummy_classification_datasets(n_classes, n_features, n_samples_per_class, seed)
    my_nc_benchmark = nc_benchmark(
        train,
        test,
        5,
        task_labels=use_task_labels,
        shuffle=shuffle,
        train_transform=train_transform,
        eval_transform=eval_transform,
        seed=seed,
    )
    return my_nc_benchmark


def dummy_classification_datasets(n_classes=10, n_features=7, n_samples_per_class=20, seed=42):
    dataset = make_classification(
        n_samples=n_classes * n_samples_per_class,
        n_classes=n_classes,
        n_features=n_features,
        n_informative=6,
        n_redundant=0,
        random_state=seed,
    )
    X = torch.from_numpy(dataset[0]).float()
    y = torch.from_numpy(dataset[1]).long()
    train_X, test_X, train_y, test_y = train_test_split(
        X, y, train_size=0.6, shuffle=True, stratify=y, random_state=seed
    )
    train = _make_taskaware_tensor_classification_dataset(train_X, train_y)
    test = _make_taskaware_tensor_classification_dataset(test_X, test_y)
    return train, test


# --------------------------------------------------------------------------- avalanche-gss
# The recent buffer of GSS-IQP / GSS-Clust / FSS-Clust: 10 samples, so that it divides every
# experience of the benchmarks above (120 samples with the defaults) and the 10-sample
# experiences of an online stream: every experience is fully merged when it ends.
RECENT = 10

BUFFERS = {
    "reservoir": lambda m, r=RECENT: ReservoirBuffer(m),
    "rand": lambda m, r=RECENT: RandBuffer(m),
    "gss_greedy_paper": lambda m, r=RECENT: GSSGreedyBuffer(m, variant="paper"),
    "gss_greedy_authors": lambda m, r=RECENT: GSSGreedyBuffer(m, variant="authors"),
    "gss_iqp": lambda m, r=RECENT: GSSIQPBuffer(m, recent_size=r),
    "gss_clust": lambda m, r=RECENT: GSSClustBuffer(m, recent_size=r),
    "fss_clust": lambda m, r=RECENT: FSSClustBuffer(m, recent_size=r),
    "ocs": lambda m, r=RECENT: OCSBuffer(m, k=5),
    "gcr": lambda m, r=RECENT: GCRBuffer(m, recent_size=r),
}
"""Factories ``(max_size, recent_size=RECENT) -> buffer`` for every avalanche-gss buffer
(``recent_size`` is ignored by the buffers that have no recent buffer)."""

FILLING = ["reservoir", "rand", "gss_greedy_paper", "gss_greedy_authors", "gss_iqp", "gcr"]
"""The buffers that hold ``min(max_size, samples seen)`` once their recent buffer merged.

GSS-Clust and FSS-Clust keep the centres of an online clustering: by design they may hold
fewer than ``max_size`` samples (their threshold only grows), so an expectation that a
buffer is "always fully filled" does not apply to them.
"""

CLUSTERING = ["gss_clust", "fss_clust"]

SCORED = {"gss_greedy_paper", "gss_greedy_authors", "gss_iqp", "gss_clust", "fss_clust", "ocs",
          "gcr"}
"""The buffers that score samples with the model (``update_from_dataset`` needs ``model=``)."""
