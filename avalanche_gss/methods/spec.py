"""What the registry knows of a buffer method: :class:`Method`."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
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
    :param constrained: the strategy that uses the buffer as constraints instead of
        replay (appendix C), if the method has one.
    """

    name: str
    buffer: type[OnlineBuffer]
    strategy: type[Any]
    constrained: type[Any] | None = None

    @property
    def presets(self) -> Mapping[str, Mapping[str, Any]]:
        """The buffer's named presets (empty: the method has a single form)."""
        presets: Mapping[str, Mapping[str, Any]] = getattr(self.buffer, "PRESETS", {})
        return presets

    def buffer_defaults(self) -> dict[str, Any]:
        """The buffer's options and their defaults, in its signature's order.

        Its keyword-only parameters, less ``seed`` (a run's seed sets it).
        """
        return {p.name: p.default for p in inspect.signature(self.buffer).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "seed"}

    def defaults(self) -> dict[str, Any]:
        """The method's options and their defaults: what a run's ``options`` may set.

        :meth:`buffer_defaults`, then the ready strategy's own keyword-only parameters
        that the buffer does not take, less ``mem_size`` and ``seed`` (GCR's
        ``replay_loss``, ``alpha``, ``beta``): ``RunSettings(method=..., options={...})``.
        """
        own = self.buffer_defaults()
        strategy = inspect.signature(self.strategy).parameters.values()
        return {**own, **{p.name: p.default for p in strategy
                          if p.kind is inspect.Parameter.KEYWORD_ONLY
                          and p.name not in own and p.name not in ("mem_size", "seed")}}

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Refuse options the buffer does not take, or a preset it does not have.

        :param options: buffer options by the buffer's own parameter names.
        :raises ValueError: in one line, naming the bad option (or preset) and the allowed.
        """
        allowed = self.defaults()
        for name in options:
            if name not in allowed:
                raise ValueError(f"{self.name} has no option {name!r}; its options: "
                                 f"{', '.join(allowed) or 'none'}")
        presets = self.presets
        if presets and "variant" in options and options["variant"] not in presets:
            raise ValueError(f"{self.name} has no preset {options['variant']!r}; choose from "
                             f"{', '.join(presets)}")

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
