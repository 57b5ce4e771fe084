"""One registry mechanism: names to definitions, for methods, streams and experiments.

A :class:`Registry` maps a name to what it names (a method's definition, a stream's, an
experiment's), in registration order: the package's own first, then those registered
from code of one's own (a module given to ``--import``, an entry point). What the command
line offers, what the package exports and what the tests check are read from it, so no
list has to be kept in sync by hand.

>>> colours = Registry[str]("colour")
>>> colours.add("red", "#f00")
'#f00'
>>> colours["red"], colours.names()
('#f00', ('red',))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to definitions of one kind, in registration order.

    :param kind: what a name names, for error messages (``"stream"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._builtin: set[str] = set()

    def add(self, name: str, value: T, *, replace: bool = False, builtin: bool = False) -> T:
        """Register ``value`` under ``name``; return it.

        :param name: its name, as the command line, reports and tables spell it (non-empty).
        :param value: the definition.
        :param replace: allow a name registered before (not one of the package's own) to
            be registered again, e.g. a module of one's own imported a second time.
        :param builtin: one of the package's own (which nothing may replace).
        :raises ValueError: an empty name, or a name taken (one line naming it).
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        if name in self._items and (name in self._builtin or not replace):
            raise ValueError(f"{self.kind} {name!r} is already registered"
                             + ("" if name in self._builtin else
                                "; pass replace=True to register it again"))
        self._items[name] = value
        if builtin:
            self._builtin.add(name)
        return value

    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """Decorator form of :meth:`add`: ``@registry.register("name")``.

        :param name: the name to register the decorated definition under.
        :param replace: as for :meth:`add`.
        """
        def decorate(value: T) -> T:
            return self.add(name, value, replace=replace)
        return decorate

    def get(self, name: str) -> T:
        """The definition registered under ``name``.

        :param name: a registered name.
        :raises ValueError: an unknown name, in one line naming it and the choices.
        """
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {self.kind} {name!r}; choose from "
                             f"{', '.join(self._items) or '(none registered)'}") from None

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> tuple[str, ...]:
        """Every registered name, the package's own first, in registration order."""
        return tuple(self._items)

    def builtin_names(self) -> tuple[str, ...]:
        """The names the package itself registered."""
        return tuple(n for n in self._items if n in self._builtin)

    def items(self) -> tuple[tuple[str, T], ...]:
        """``(name, definition)`` pairs, in registration order."""
        return tuple(self._items.items())

    def remove(self, name: str) -> None:
        """Forget a name registered from code of one's own (tests, a reloaded module).

        :param name: a registered name that is not one of the package's own.
        :raises ValueError: an unknown name or one of the package's own.
        """
        self.get(name)
        if name in self._builtin:
            raise ValueError(f"{self.kind} {name!r} is the package's own and stays registered")
        del self._items[name]

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._items)})"
