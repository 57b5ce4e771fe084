"""avalanche-gss: gradient-based sample selection (Aljundi et al., NeurIPS 2019) in Avalanche.

The top-level names are imported lazily, so that ``avalanche_gss.selection`` and
``avalanche_gss.gradients`` (pure tensor code) can be used without importing Avalanche.
Every method's classes (its buffer, ready strategy and constrained strategy) are
top-level names, those that :data:`avalanche_gss.methods.BUILTIN` names
(:func:`~avalanche_gss.methods.exported_classes`): a method added there exports its
classes here with no other list to edit.
"""

from __future__ import annotations

import importlib
from typing import Any

from avalanche_gss.methods import exported_classes as _exported_classes

__version__ = "0.1.0"

_LIBRARY = {
    "OnlineBuffer": "avalanche_gss.buffers",
    "RecentMergeBuffer": "avalanche_gss.buffers",
    "ConstrainedUpdatePlugin": "avalanche_gss.training",
    "OnlineRehearsalPlugin": "avalanche_gss.training",
    "OnlineTemplate": "avalanche_gss.training",
    "OnlineRehearsal": "avalanche_gss.training",
    "MIRRetrieval": "avalanche_gss.training",
    "LogitAdjustedLoss": "avalanche_gss.training",
    "AsymmetricCrossEntropy": "avalanche_gss.training",
    "MKDPlugin": "avalanche_gss.training",
    "RandomRetrieval": "avalanche_gss.training",
    "quiet_evaluator": "avalanche_gss.training",
    "REGISTRY": "avalanche_gss.methods",
    "train_resumable": "avalanche_gss.checkpoint",
    "MLP": "avalanche_gss.models",
    "ReducedResNet18": "avalanche_gss.models",
}
"""The top-level names that are not a method's class, with the module each comes from."""

_EXPORTS = {**_exported_classes(), **_LIBRARY}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'avalanche_gss' has no attribute {name!r}")


def __dir__() -> list[str]:
    public = {n for n in globals() if not n.startswith("_") or n.startswith("__")}
    return sorted((public | set(__all__)) - {"annotations", "importlib", "Any"})
