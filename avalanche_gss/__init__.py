"""avalanche-gss: gradient-based sample selection (Aljundi et al., NeurIPS 2019) in Avalanche.

The top-level names are imported lazily, so that ``avalanche_gss.selection`` and
``avalanche_gss.gradients`` (pure tensor code) can be used without importing Avalanche.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "OnlineBuffer": "avalanche_gss.buffers",
    "ReservoirBuffer": "avalanche_gss.methods.reservoir",
    "RandBuffer": "avalanche_gss.methods.rand",
    "GSSGreedyBuffer": "avalanche_gss.methods.gss_greedy",
    "RecentMergeBuffer": "avalanche_gss.buffers",
    "GSSIQPBuffer": "avalanche_gss.methods.gss_iqp",
    "GSSClustBuffer": "avalanche_gss.methods.clust",
    "FSSClustBuffer": "avalanche_gss.methods.clust",
    "CBRSBuffer": "avalanche_gss.methods.cbrs",
    "GDumbBuffer": "avalanche_gss.methods.gdumb",
    "ConstrainedUpdatePlugin": "avalanche_gss.training",
    "OnlineRehearsalPlugin": "avalanche_gss.training",
    "OnlineTemplate": "avalanche_gss.training",
    "OnlineRehearsal": "avalanche_gss.training",
    "MIRRetrieval": "avalanche_gss.training",
    "LogitAdjustedLoss": "avalanche_gss.training",
    "RandomRetrieval": "avalanche_gss.training",
    "Reservoir": "avalanche_gss.methods.reservoir",
    "Rand": "avalanche_gss.methods.rand",
    "GSSGreedy": "avalanche_gss.methods.gss_greedy",
    "GSSIQP": "avalanche_gss.methods.gss_iqp",
    "GSSClust": "avalanche_gss.methods.clust",
    "FSSClust": "avalanche_gss.methods.clust",
    "CBRS": "avalanche_gss.methods.cbrs",
    "GDumb": "avalanche_gss.methods.gdumb",
    "CBGSSBuffer": "avalanche_gss.methods.cb_gss",
    "CBGSS": "avalanche_gss.methods.cb_gss",
    "GSSIQPConstrained": "avalanche_gss.methods.gss_iqp",
    "quiet_evaluator": "avalanche_gss.training",
    "REGISTRY": "avalanche_gss.methods",
    "train_resumable": "avalanche_gss.checkpoint",
    "MLP": "avalanche_gss.models",
    "ReducedResNet18": "avalanche_gss.models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'avalanche_gss' has no attribute {name!r}")
