"""The paper's buffer methods, one file each, and the registry that names them.

Each method file holds the method's buffer (a storage policy), its named presets and its
ready strategy, and declares them in ``METHODS``. :data:`REGISTRY` maps each paper name
(``"GSS-Greedy"``, ...) to its :class:`~avalanche_gss.methods.spec.Method`. Adding a
policy takes a new file here and its module name in :data:`_MODULES`.
"""

from __future__ import annotations

import importlib

from avalanche_gss.methods.spec import Method

__all__ = ["Method", "REGISTRY", "get"]

_MODULES = ("rand", "reservoir", "gss_greedy", "gss_iqp", "clust")

REGISTRY: dict[str, Method] = {
    method.name: method
    for module in _MODULES
    for method in importlib.import_module(f"avalanche_gss.methods.{module}").METHODS
}
"""Paper name -> :class:`~avalanche_gss.methods.spec.Method`, in the tables' order."""


def get(name: str) -> Method:
    """The method called ``name``.

    :raises ValueError: no such method; the message lists the choices.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown buffer method {name!r}; choose from "
                         f"{', '.join(REGISTRY)}") from None
