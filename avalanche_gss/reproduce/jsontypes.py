"""JSON as the harness writes it: a run's record, its free-form extras, a cached result.

:data:`Json` is any JSON value, :data:`JsonObject` a JSON object. They type what is
genuinely free-form (a run's ``extras``, which each method fills with its own facts) and
what crosses the file and cache boundary (a result as a sweep caches it); what has known
keys is a ``TypedDict`` or a dataclass of its own.

The standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

__all__ = ["Json", "JsonObject"]

Json: TypeAlias = None | bool | int | float | str | Sequence["Json"] | Mapping[str, "Json"]
"""A JSON value (read-only containers: a ``list[int]`` is one, and a tuple is written as a
list)."""

JsonObject: TypeAlias = dict[str, Json]
"""A JSON object."""
