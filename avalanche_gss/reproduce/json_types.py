"""JSON as the harness stores it: job configs, cached results, the reports' files.

:data:`Json` is any JSON value; :data:`JsonObject` a JSON object. They type what is
genuinely free-form at the file and cache boundary (a cached result, a config read back
from JSON); jobs, reports, rows and settings are dataclasses with real fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias, TypeVar

__all__ = ["Json", "JsonObject", "Scalar", "json_float", "json_floats", "json_int", "json_ints",
           "json_object", "json_objects", "json_str", "json_strs"]

Json: TypeAlias = None | bool | int | float | str | Sequence["Json"] | Mapping[str, "Json"]
"""A JSON value (read-only containers: a ``list[int]`` is one, and a tuple is written as a
list)."""

JsonObject: TypeAlias = dict[str, Json]
"""A JSON object."""

Scalar: TypeAlias = None | bool | int | float | str
"""A JSON value that is no list or object: a row key's value (``2``, ``"authors"``)."""

T = TypeVar("T")


def _fail(value: object, kind: str, what: str) -> TypeError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return TypeError(f"{what} must be {kind}, got {type(value).__name__} {shown}")


def json_object(value: Json, what: str = "a value") -> JsonObject:
    """``value``, checked to be a JSON object (a ``dict``).

    The accessors of this module read a value back from JSON (a cached result, a config)
    as the type the code needs, checked: a file edited or written by another version
    fails here in one line naming the value, not later with a wrong number.

    :param value: the value read.
    :param what: what it is, for the error (``"a run's extras"``).
    :raises TypeError: it is not one, naming ``what`` and the value.
    """
    if not isinstance(value, dict):
        raise _fail(value, "a JSON object", what)
    return value


def json_int(value: Json, what: str = "a value") -> int:
    """``value``, checked to be an integer (not a bool). See :func:`json_object`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(value, "an integer", what)
    return value


def json_float(value: Json, what: str = "a value") -> float:
    """``value`` as a float, checked to be a number (an int too; not a bool).

    See :func:`json_object`.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(value, "a number", what)
    return float(value)


def json_str(value: Json, what: str = "a value") -> str:
    """``value``, checked to be a string. See :func:`json_object`."""
    if not isinstance(value, str):
        raise _fail(value, "a string", what)
    return value


def _items(value: Json, read: Callable[[Json, str], T], kind: str, what: str) -> list[T]:
    """``value``, checked to be a list, each item read by ``read``."""
    if not isinstance(value, (list, tuple)):
        raise _fail(value, kind, what)
    return [read(v, f"each item of {what}") for v in value]


def json_ints(value: Json, what: str = "a value") -> list[int]:
    """``value``, checked to be a list of integers. See :func:`json_object`."""
    return _items(value, json_int, "a list of integers", what)


def json_floats(value: Json, what: str = "a value") -> list[float]:
    """``value`` as floats, checked to be a list of numbers. See :func:`json_object`."""
    return _items(value, json_float, "a list of numbers", what)


def json_strs(value: Json, what: str = "a value") -> list[str]:
    """``value``, checked to be a list of strings. See :func:`json_object`."""
    return _items(value, json_str, "a list of strings", what)


def json_objects(value: Json, what: str = "a value") -> list[JsonObject]:
    """``value``, checked to be a list of JSON objects. See :func:`json_object`."""
    return _items(value, json_object, "a list of JSON objects", what)
