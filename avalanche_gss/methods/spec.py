"""What the registry knows of a buffer method: :class:`Method`."""

from __future__ import annotations

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
    :param revision: raised by one whenever a change of the method alters its results for
        the same settings; part of the cache key of its runs (from 2 on), so that a result
        cached by an earlier revision is computed again rather than reused.
    """

    name: str
    buffer: type[OnlineBuffer]
    strategy: type[Any]
    options: Mapping[str, str] = field(default_factory=dict)
    constrained: type[Any] | None = None
    revision: int = 1

    @property
    def presets(self) -> Mapping[str, Mapping[str, Any]]:
        """The buffer's named presets (empty: the method has a single form)."""
        presets: Mapping[str, Mapping[str, Any]] = getattr(self.buffer, "PRESETS", {})
        return presets

    def buffer_options(self, settings: Any) -> dict[str, Any]:
        """The buffer's options taken from a run's settings (by :attr:`options`)."""
        return {option: getattr(settings, name) for name, option in self.options.items()}
