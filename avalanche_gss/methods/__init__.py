"""The buffer methods, one file each, and the registry that names them.

Each method file of this package holds the method's buffer (a storage policy), its named
presets and its ready strategy; :data:`BUILTIN` names them. :data:`REGISTRY` maps
each name (``"GSS-Greedy"``, ...) to its :class:`~avalanche_gss.methods.spec.Method`
(a :class:`~avalanche_gss.registry.Registry`): this package's methods (:data:`NAMES`, from
:data:`BUILTIN`), then the methods registered from other code, in the order they came:

- :func:`register` (``register(Method("Newest", NewestBuffer, Newest))``, both from
  ``avalanche_gss.methods``) in one's own module; ``python -m reproduce --import MODULE``
  imports such a module before a run
  (:func:`avalanche_gss.reproduce.runs.own_code.import_user`), in every worker process too;
- the entry points of the group :data:`ENTRY_POINTS` (``avalanche_gss.methods``) that
  installed distributions declare, read by :func:`load_plugins` the first time the names
  are asked for.

The names are known without importing any method of this package (:func:`names`): the
package's are written in :data:`BUILTIN`, a table of names, files and class names, so
that the command line's ``--help`` stays instant; the method files are imported when
:data:`REGISTRY` or :func:`get` is first used.

**Adding a method to this package** is its file in this folder (its buffer, presets and
ready strategy) and its line in :data:`BUILTIN` (name, file, class names), in the tables'
order. Its names then reach the registry, the package's exports, the command line's
choices and the tests that run every method.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, overload

from avalanche_gss.registry import Registry

if TYPE_CHECKING:
    from avalanche_gss.methods.spec import Method

__all__ = ["BASELINES", "BUILTIN", "Builtin", "ENTRY_POINTS", "MODULES", "NAMES", "REGISTRY",
           "Method", "NameView", "exported_classes", "get", "load_plugins", "names",
           "plugin_modules", "register", "registered"]


@dataclass(frozen=True)
class Builtin:
    """One of this package's methods as the registry knows it before importing it.

    Its name, its file and the names of its classes there: enough for the command line's
    choices and the package's exports, with no method imported (and so no torch).

    :param name: the method's name (``"GSS-Greedy"``), used in tables, JSON and the CLI.
    :param module: its file in this folder (``"gss_greedy"``).
    :param buffer: the name of its buffer class in that file.
    :param strategy: the name of its ready strategy.
    :param constrained: the name of its constrained strategy, if it has one.
    """

    name: str
    module: str
    buffer: str
    strategy: str
    constrained: str | None = None

    @property
    def classes(self) -> tuple[str, ...]:
        """The names of the classes it gives: buffer, ready strategy, constrained strategy."""
        return tuple(c for c in (self.buffer, self.strategy, self.constrained) if c is not None)

    def load(self) -> Method:
        """The method, its file imported.

        :raises ImportError: the file lacks one of the classes named here.
        """
        from avalanche_gss.methods.spec import Method

        where = f"avalanche_gss.methods.{self.module}"
        module = importlib.import_module(where)
        missing = [c for c in self.classes if not isinstance(getattr(module, c, None), type)]
        if missing:
            raise ImportError(f"{where} has no class {', '.join(missing)}, which the method "
                              f"{self.name!r} names (avalanche_gss.methods.BUILTIN)")
        return Method(self.name, getattr(module, self.buffer), getattr(module, self.strategy),
                      constrained=(getattr(module, self.constrained) if self.constrained
                                   else None))


BUILTIN: tuple[Builtin, ...] = (
    Builtin("Rand", "rand", "RandBuffer", "Rand"),
    Builtin("Reservoir", "reservoir", "ReservoirBuffer", "Reservoir"),
    Builtin("GSS-Greedy", "gss_greedy", "GSSGreedyBuffer", "GSSGreedy"),
    Builtin("GSS-IQP", "gss_iqp", "GSSIQPBuffer", "GSSIQP", "GSSIQPConstrained"),
    Builtin("GSS-Clust", "clust", "GSSClustBuffer", "GSSClust"),
    Builtin("FSS-Clust", "clust", "FSSClustBuffer", "FSSClust"),
    Builtin("CBRS", "cbrs", "CBRSBuffer", "CBRS"),
    Builtin("GDumb", "gdumb", "GDumbBuffer", "GDumb"),
    Builtin("CB-GSS", "cb_gss", "CBGSSBuffer", "CBGSS"),
    Builtin("OCS", "ocs", "OCSBuffer", "OCS"),
    Builtin("GCR", "gcr", "GCRBuffer", "GCR"),
    Builtin("CSReL", "csrel", "CSReLBuffer", "CSReL"),
)
"""This package's buffer methods, in the tables' order: the one place each name is written.

A table, like the entry points of installed distributions (:data:`ENTRY_POINTS`), so that
the names are known without importing any method; each method's options are its buffer's
parameters and ``PRESETS``, in its own file."""

NAMES: tuple[str, ...] = tuple(m.name for m in BUILTIN)
"""This package's buffer methods, in the tables' order (the registered ones: :func:`names`)."""

MODULES: tuple[str, ...] = tuple(dict.fromkeys(m.module for m in BUILTIN))
"""This package's method files (modules of this folder), in the tables' order."""

BASELINES = ("Single", "iid-online", "iid-offline", "GEM", "iCaRL")
"""The baselines, run through Avalanche's own strategies
(:mod:`avalanche_gss.methods.baselines`): no buffer method takes their names."""


def exported_classes() -> dict[str, str]:
    """Every class this package's methods give, by name, with the module that defines it.

    The buffers, ready strategies and constrained strategies of :data:`BUILTIN` (nothing
    is imported): the package's top-level names derive from it.
    """
    return {cls: f"avalanche_gss.methods.{m.module}" for m in BUILTIN for cls in m.classes}


ENTRY_POINTS = "avalanche_gss.methods"
"""The entry-point group whose entries add methods: each names a
:class:`~avalanche_gss.methods.spec.Method`, a sequence of them (a module's ``METHODS``),
or a module whose import calls :func:`register` itself."""

_USER: dict[str, Method] = {}  # registered methods, in order
_PLUGINS: list[bool] = []  # non-empty once the entry points have been read
_PLUGIN_MODULES: dict[str, None] = {}  # the modules that loading the entry points imported


def _builtin(registry: Registry[Method]) -> None:
    """Import each method of :data:`BUILTIN` and add it as the package's own."""
    for method in BUILTIN:
        registry.add(method.name, method.load(), builtin=True)


def _load() -> Registry[Method]:
    registry: Registry[Method] = Registry("buffer method")
    _builtin(registry)
    for name, method in _USER.items():
        registry.add(name, method)
    return registry


def _registry() -> Registry[Method]:
    registry: Registry[Method] | None = globals().get("REGISTRY")
    if registry is None:  # built once, on first use
        registry = globals()["REGISTRY"] = _load()
    load_plugins()  # once: registers into it
    return registry


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":
        return _registry()
    if name == "Method":  # imported on use: it needs torch
        from avalanche_gss.methods.spec import Method

        return Method
    raise AttributeError(f"module 'avalanche_gss.methods' has no attribute {name!r}")


def register(method: Method) -> Method:
    """Add a buffer method to the registry, under ``method.name``; return it.

    From then on the name works wherever a method name does: ``RunSettings(method=...)``,
    ``python -m reproduce --methods`` (with ``--import`` naming the module that calls
    this), a which-buffer policy (``avalanche_gss.reproduce.experiments.policies.register_policy``).
    Registering the same method again, or a method of the same name from the same module
    (that module imported again), replaces it.

    :param method: the method: its name, buffer (an ``OnlineBuffer`` subclass) and ready
        strategy.
    :raises TypeError: ``method`` is not a ``Method``.
    :raises ValueError: the name is one of this package's methods or baselines, or
        another module registered it.
    """
    from avalanche_gss.buffers import OnlineBuffer
    from avalanche_gss.methods.spec import Method

    if not isinstance(method, Method):
        raise TypeError(f"register takes an avalanche_gss.methods.spec.Method, got "
                        f"{type(method).__name__}")
    name = method.name
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a method's name must be a non-empty string, got {name!r}")
    if name in NAMES or name in BASELINES:
        raise ValueError(f"method name {name!r} is taken by this package; choose another")
    if not (isinstance(method.buffer, type) and issubclass(method.buffer, OnlineBuffer)):
        raise TypeError(f"method {name!r}: buffer must be a subclass of OnlineBuffer, got "
                        f"{method.buffer!r}")
    before = _USER.get(name)
    if before is not None and before.strategy.__module__ != method.strategy.__module__:
        raise ValueError(f"method name {name!r} is already registered by "
                         f"{before.strategy.__module__}; choose another")
    _USER[name] = method
    registry: Registry[Method] | None = globals().get("REGISTRY")
    if registry is not None:
        registry.add(name, method, replace=True)
    return method


def _register_object(obj: Any, where: str) -> None:
    from avalanche_gss.methods.spec import Method

    if isinstance(obj, ModuleType):
        return  # its import registered what it has
    if isinstance(obj, Method):
        register(obj)
    elif isinstance(obj, (list, tuple)) and all(isinstance(m, Method) for m in obj):
        for m in obj:
            register(m)
    else:
        raise TypeError(f"{where} is a {type(obj).__name__}; it must name a Method, a "
                        "sequence of them or a module")


def load_plugins() -> None:
    """Read the entry points of the group :data:`ENTRY_POINTS` (once per process).

    Each is loaded (its module imported) and what it names registered. Nothing is
    imported when no installed distribution declares one.

    :raises ImportError: an entry point cannot be loaded or names something else, naming
        it and its distribution.
    """
    if _PLUGINS:
        return
    _PLUGINS.append(True)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
        dist = getattr(entry.dist, "name", "?")
        where = f"entry point {entry.name} = {entry.value} (group {ENTRY_POINTS}, {dist})"
        before = set(sys.modules)
        try:
            try:
                _register_object(entry.load(), where)
            finally:
                _PLUGIN_MODULES.update((n, None) for n in list(sys.modules) if n not in before)
        except Exception as err:
            _PLUGINS.clear()  # asked again, it fails again rather than go without
            raise ImportError(f"{where}: {type(err).__name__}: {' '.join(str(err).split())}"
                              ) from err


def plugin_modules() -> tuple[str, ...]:
    """The modules that loading the entry points imported (:func:`load_plugins`), in order.

    Every one, installed or not: a run's cache key holds those of one's own
    (:func:`avalanche_gss.reproduce.runs.own_code.user_modules`).
    """
    return tuple(_PLUGIN_MODULES)


def registered() -> tuple[str, ...]:
    """The names registered from other code so far, in order.

    Those of :func:`register` and of the entry points read so far; unlike :func:`names`,
    it reads no entry point and imports nothing.
    """
    return tuple(_USER)


def names() -> tuple[str, ...]:
    """Every buffer method's name: this package's (:data:`NAMES`), then the registered ones.

    Reads the entry points first (:func:`load_plugins`); imports none of this package's
    methods.
    """
    load_plugins()
    return (*NAMES, *_USER)


def get(name: str) -> Method:
    """The method called ``name``.

    :raises ValueError: no such method; the message lists the choices.
    """
    return _registry().get(name)


class NameView(Sequence[str]):
    """A read-only sequence of names that follows the registry: a live tuple.

    Compares equal to the tuple of its current names; ``+`` gives a tuple.

    :param source: returns the current names.
    """

    def __init__(self, source: Callable[[], Sequence[str]]) -> None:
        self._source = source

    def _names(self) -> tuple[str, ...]:
        return tuple(self._source())

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, NameView)):
            return self._names() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # its content changes

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:
        return (*self._names(), *other)

    def __radd__(self, other: Sequence[str]) -> tuple[str, ...]:
        return (*other, *self._names())

    def __repr__(self) -> str:
        return repr(self._names())
