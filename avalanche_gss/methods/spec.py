"""What the registry knows of a buffer method: :class:`Method`."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from avalanche_gss.buffers import OnlineBuffer

__all__ = ["Method"]


@dataclass(frozen=True)
class Method:
    """A task-free buffer method: its paper name, its buffer and its ready strategy.

    :param name: the paper's name (``"GSS-Greedy"``), used in tables, JSON and the CLI.
    :param buffer: the storage policy class; its ``PRESETS`` (if any) are the method's
        named presets, ``"paper"`` and ``"authors"``.
    :param strategy: the ready strategy (online rehearsal with that buffer).
    :param options: which run setting feeds which buffer option
        (``{"iqp_solver": "solver"}``); ``buffer_size`` and ``seed`` always do.
    :param constrained: the strategy that uses the buffer as constraints instead of
        replay (appendix C), if the method has one.
    """

    name: str
    buffer: type[OnlineBuffer]
    strategy: type[Any]
    options: Mapping[str, str] = field(default_factory=dict)
    constrained: type[Any] | None = None

    @property
    def presets(self) -> Mapping[str, Mapping[str, Any]]:
        """The buffer's named presets (empty: the method has a single form)."""
        presets: Mapping[str, Mapping[str, Any]] = getattr(self.buffer, "PRESETS", {})
        return presets

    def buffer_options(self, settings: Any) -> dict[str, Any]:
        """The buffer's options taken from a run's settings (by :attr:`options`)."""
        return {option: getattr(settings, name) for name, option in self.options.items()}

    def code_modules(self) -> tuple[str, ...]:
        """The modules outside this package whose code decides the method's runs, sorted.

        Those that define its buffer, strategy and constrained strategy classes and their
        base classes, less this package (whose code a run's cache key holds whole), torch,
        Avalanche and the standard library: for this package's methods, none; for a
        method of one's own, the module that defines it (and its own base classes').
        """
        skip = {"avalanche_gss", "avalanche", "torch", *sys.stdlib_module_names}
        classes = [c for c in (self.buffer, self.strategy, self.constrained) if c is not None]
        return tuple(sorted({base.__module__ for c in classes for base in c.__mro__
                             if base.__module__.partition(".")[0] not in skip}))
