"""JSON as the harness stores it: job configs, cached results, the reports' files.

:data:`Json` is any JSON value; :data:`JsonObject` a JSON object. They type what is
genuinely free-form at the file and cache boundary (a cached result, a config read back
from JSON); jobs, reports, rows and settings are dataclasses with real fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

__all__ = ["Json", "JsonObject", "Scalar"]

Json: TypeAlias = None | bool | int | float | str | Sequence["Json"] | Mapping[str, "Json"]
"""A JSON value (read-only containers: a ``list[int]`` is one, and a tuple is written as a
list)."""

JsonObject: TypeAlias = dict[str, Json]
"""A JSON object."""

Scalar: TypeAlias = None | bool | int | float | str
"""A JSON value that is no list or object: a row key's value (``2``, ``"authors"``)."""
