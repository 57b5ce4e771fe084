"""Pickling a strategy with ``dill`` (Avalanche's ``save_checkpoint``) and ``deepcopy``.

:class:`PicklableStrategy` (a base of
:class:`~avalanche_gss.training.template.OnlineTemplate`) uses :func:`picklable_optimizer`.

``dill`` 0.4 cannot locate ``torch.optim.sgd.SGD`` (``torch.optim`` deletes its submodule
attributes), tries to pickle the class itself and fails; the optimizer is therefore
pickled by its class's import path.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch.optim import Optimizer
from typing_extensions import Self  # typing.Self is Python 3.11+

__all__ = ["PicklableStrategy", "picklable_optimizer"]


def _rebuild_optimizer(module: str, qualname: str, state: dict[str, Any]) -> Optimizer:
    """Recreate a pickled optimizer from its class's import path and ``__getstate__``."""
    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    optimizer = cls.__new__(cls)
    optimizer.__setstate__(state)
    return optimizer


class _OptimizerByName:
    """Pickles as the wrapped optimizer, its class referenced by import path."""

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer

    def __reduce__(self) -> tuple[Any, ...]:
        cls = type(self.optimizer)
        return _rebuild_optimizer, (cls.__module__, cls.__qualname__, self.optimizer.__getstate__())


def picklable_optimizer(state: dict[str, Any]) -> dict[str, Any]:
    """A strategy's pickle state with its optimizer pickled by its class's import path.

    :param state: a copy of the strategy's ``__dict__`` (changed in place and returned).
    """
    if isinstance(state.get("optimizer"), Optimizer):
        state["optimizer"] = _OptimizerByName(state["optimizer"])
    return state


class PicklableStrategy:
    """A strategy that pickles (``dill``, ``deepcopy``) and copies: its own attributes only."""

    def __getstate__(self) -> dict[str, Any]:
        """Pickle state: the optimizer by class name; the plugin-dispatch cache is rebuilt."""
        state = self.__dict__.copy()
        state["_hook_cache"] = {}
        return picklable_optimizer(state)

    def __copy__(self) -> Self:
        """A shallow copy sharing every attribute (not routed through :meth:`__getstate__`)."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new
