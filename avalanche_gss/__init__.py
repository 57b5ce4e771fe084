"""avalanche-gss: gradient-based sample selection (Aljundi et al., NeurIPS 2019) in Avalanche.

The top-level names are imported lazily, so that ``avalanche_gss.selection`` and
``avalanche_gss.gradients`` (pure tensor code) can be used without importing Avalanche.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "OnlineBuffer": "avalanche_gss.storage",
    "ReservoirBuffer": "avalanche_gss.storage",
    "RandBuffer": "avalanche_gss.storage",
    "GSSGreedyBuffer": "avalanche_gss.storage",
    "RecentMergeBuffer": "avalanche_gss.storage",
    "GSSIQPBuffer": "avalanche_gss.storage",
    "GSSClustBuffer": "avalanche_gss.storage",
    "FSSClustBuffer": "avalanche_gss.storage",
    "ConstrainedUpdatePlugin": "avalanche_gss.plugins",
    "OnlineRehearsalPlugin": "avalanche_gss.plugins",
    "OnlineTemplate": "avalanche_gss.strategies",
    "OnlineRehearsal": "avalanche_gss.strategies",
    "Reservoir": "avalanche_gss.strategies",
    "Rand": "avalanche_gss.strategies",
    "GSSGreedy": "avalanche_gss.strategies",
    "GSSIQP": "avalanche_gss.strategies",
    "GSSClust": "avalanche_gss.strategies",
    "FSSClust": "avalanche_gss.strategies",
    "GSSIQPConstrained": "avalanche_gss.strategies",
    "train_resumable": "avalanche_gss.checkpoint",
    "MLP": "avalanche_gss.models",
    "ReducedResNet18": "avalanche_gss.models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'avalanche_gss' has no attribute {name!r}")
