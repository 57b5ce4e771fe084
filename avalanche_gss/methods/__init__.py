"""The paper's buffer methods, one file each, and the registry that names them.

Each method file holds the method's buffer (a storage policy), its named presets and its
ready strategy, and declares them in ``METHODS``. :data:`REGISTRY` maps each paper name
(``"GSS-Greedy"``, ...) to its :class:`~avalanche_gss.methods.spec.Method`. Adding a
policy takes a new file here and one line in :data:`MODULES`.

The names are known without importing any method (:data:`NAMES`), so that the command
line's ``--help`` stays instant; the method files are imported when :data:`REGISTRY` or
:func:`get` is first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from avalanche_gss.methods.spec import Method

__all__ = ["MODULES", "NAMES", "REGISTRY", "get"]

MODULES: dict[str, tuple[str, ...]] = {
    "rand": ("Rand",),
    "reservoir": ("Reservoir",),
    "gss_greedy": ("GSS-Greedy",),
    "gss_iqp": ("GSS-IQP",),
    "clust": ("GSS-Clust", "FSS-Clust"),
    "cbrs": ("CBRS",),
    "gdumb": ("GDumb",),
    "cb_gss": ("CB-GSS",),
}
"""The registry: each method file of this package and the paper names it defines."""

NAMES: tuple[str, ...] = tuple(name for names in MODULES.values() for name in names)
"""Every buffer method's name, in the tables' order."""


def _load() -> dict[str, Method]:
    registry: dict[str, Method] = {}
    for module, names in MODULES.items():
        defined = importlib.import_module(f"avalanche_gss.methods.{module}").METHODS
        if tuple(m.name for m in defined) != names:
            raise ImportError(f"avalanche_gss.methods.{module} defines "
                              f"{[m.name for m in defined]}, the registry says {list(names)}")
        registry.update((m.name, m) for m in defined)
    return registry


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":  # built once, on first use
        registry = globals()["REGISTRY"] = _load()
        return registry
    raise AttributeError(f"module 'avalanche_gss.methods' has no attribute {name!r}")


def get(name: str) -> Method:
    """The method called ``name``.

    :raises ValueError: no such method; the message lists the choices.
    """
    registry: dict[str, Method] = globals().get("REGISTRY") or __getattr__("REGISTRY")
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown buffer method {name!r}; choose from "
                         f"{', '.join(NAMES)}") from None
