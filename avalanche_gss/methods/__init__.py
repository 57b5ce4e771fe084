"""The buffer methods, one file each, and the registry that names them.

Each method file of this package holds the method's buffer (a storage policy), its named
presets and its ready strategy, and declares them in ``METHODS``. :data:`REGISTRY` maps
each name (``"GSS-Greedy"``, ...) to its :class:`~avalanche_gss.methods.spec.Method`
(a :class:`~avalanche_gss.registry.Registry`): this package's methods (:data:`NAMES`, from
the method files of this folder, :data:`MODULES`), then the methods registered from other
code, in the order they came:

- :func:`register` (``register(Method("Newest", NewestBuffer, Newest))``, both from
  ``avalanche_gss.methods``) in one's own module; ``python -m reproduce --import MODULE``
  imports such a module before a run (:func:`import_user`), in every worker process too;
- the entry points of the group :data:`ENTRY_POINTS` (``avalanche_gss.methods``) that
  installed distributions declare, read by :func:`load_plugins` the first time the names
  are asked for.

The names are known without importing any method of this package (:func:`names`): each
file's ``METHODS`` is read as text (a few milliseconds), so that the command line's
``--help`` stays instant; the method files are imported when :data:`REGISTRY` or
:func:`get` is first used.

**Adding a method to this package** is one file in this folder, with no list to edit: it
declares its methods in ``METHODS = (Method("NAME", Buffer, Strategy), ...)`` and its place
in the tables' order in ``ORDER = N`` (:data:`MODULES` is found by scanning the folder).
Its names then reach the registry, the package's exports, the command line's choices and
the tests that run every method.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, overload

from avalanche_gss.registry import Registry

if TYPE_CHECKING:
    from avalanche_gss.methods.spec import Method

__all__ = ["BASELINES", "ENTRY_POINTS", "MODULES", "NAMES", "REGISTRY", "Method", "NameView",
           "exported_classes", "get", "import_user", "imports_for", "load_plugins", "names",
           "module_file", "own_imports", "register", "user_imports", "user_modules"]

_FOLDER = os.path.dirname(os.path.abspath(__file__))


def _modules() -> tuple[str, ...]:
    """:data:`MODULES`, this package's method files, found in its folder on first use.

    A method file is a module of this folder (:mod:`pkgutil`) whose text declares
    ``METHODS = (...)``; they come in the order of their ``ORDER = N`` (the tables'), those
    without one last, by name.
    """
    found: tuple[str, ...] | None = globals().get("MODULES")
    if found is None:  # scanned once, on first use
        files = []
        for info in pkgutil.iter_modules([_FOLDER]):
            text = "" if info.ispkg or info.name.startswith("_") else _source(info.name)
            if re.search(r"^METHODS = \(", text, re.MULTILINE):
                order = re.search(r"^ORDER = (\d+)$", text, re.MULTILINE)
                files.append((int(order.group(1)) if order else sys.maxsize, info.name))
        found = globals()["MODULES"] = tuple(name for _, name in sorted(files))
    return found


def _source(module: str) -> str:
    with open(os.path.join(_FOLDER, f"{module}.py"), encoding="utf-8") as f:
        return f.read()


BASELINES = ("Single", "iid-online", "iid-offline", "GEM", "iCaRL")
"""The baselines, run through Avalanche's own strategies
(:mod:`avalanche_gss.methods.baselines`): no buffer method takes their names."""


def _declared(module: str) -> tuple[str, ...]:
    """The names a method file's ``METHODS = (Method("NAME", ...), ...)`` gives, read as text."""
    return tuple(name for name, _ in _declarations(module))


def _declarations(module: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each ``Method("NAME", Buffer, Strategy[, constrained=...])`` of a method file, as text.

    :return: per method, its name and the names of the classes it gives (buffer, ready
        strategy, constrained strategy), read from ``METHODS`` without importing the file.
    """
    path = os.path.join(_FOLDER, f"{module}.py")
    whole = _source(module)
    text, start, depth = whole, whole.find("\nMETHODS = (") + 1, 0
    for end, char in enumerate(whole[start:] if start else "", start):
        depth += (char in "([{") - (char in ")]}")
        if depth == 0 and char == ")":  # parse that statement only, not the whole file
            text = whole[start:end + 1]
            break
    try:
        tree = ast.parse(text, path)
    except SyntaxError:
        tree = ast.parse(whole, path)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List))
                and any(isinstance(t, ast.Name) and t.id == "METHODS" for t in node.targets)):
            found = []
            for call in node.value.elts:
                if not (isinstance(call, ast.Call) and call.args
                        and isinstance(call.args[0], ast.Constant)
                        and isinstance(call.args[0].value, str)):
                    break
                classes = [a.id for a in (*call.args[1:], *(k.value for k in call.keywords))
                           if isinstance(a, ast.Name)]
                found.append((str(call.args[0].value), tuple(classes)))
            if len(found) == len(node.value.elts):
                return tuple(found)
    raise ImportError(f"{path}: no METHODS = (Method(\"NAME\", ...), ...) to read its "
                      "methods' names from")


def exported_classes() -> dict[str, str]:
    """Every class this package's methods give, by name, with the module that defines it.

    The buffers, ready strategies and constrained strategies of each file of
    :data:`MODULES`, read from their ``METHODS`` as text (nothing is imported): the
    package's top-level names derive from it.
    """
    return {cls: f"avalanche_gss.methods.{module}" for module in _modules()
            for _, classes in _declarations(module) for cls in classes}


def _names() -> tuple[str, ...]:
    """:data:`NAMES`, this package's buffer methods in the tables' order.

    Read from the files of :data:`MODULES` on first use (the registered ones: :func:`names`).
    """
    found: tuple[str, ...] | None = globals().get("NAMES")
    if found is None:  # read once, on first use
        found = globals()["NAMES"] = tuple(n for module in _modules() for n in _declared(module))
    return found

ENTRY_POINTS = "avalanche_gss.methods"
"""The entry-point group whose entries add methods: each names a
:class:`~avalanche_gss.methods.spec.Method`, a sequence of them (a module's ``METHODS``),
or a module whose import calls :func:`register` itself."""

_USER: dict[str, Method] = {}  # registered methods, in order
_ORIGIN: dict[str, str] = {}  # registered name -> the import_user spec that registered it
_PLUGINS: list[bool] = []  # non-empty once the entry points have been read
_IMPORTED: dict[str, None] = {}  # the import_user specs that succeeded, in order
_LOADED: dict[str, None] = {}  # the modules of one's own that imports, entry points loaded


def _builtin(registry: Registry[Method]) -> None:
    """Import each method file of :data:`MODULES` and add its ``METHODS`` as the package's own.

    :raises ImportError: a file's ``METHODS`` differs from what its text declares.
    """
    for module in _modules():
        defined = importlib.import_module(f"avalanche_gss.methods.{module}").METHODS
        if tuple(m.name for m in defined) != _declared(module):
            raise ImportError(f"avalanche_gss.methods.{module} defines "
                              f"{[m.name for m in defined]}, its text says "
                              f"{list(_declared(module))}")
        classes = {cls for m in defined for cls in (m.buffer, m.strategy, m.constrained)
                   if cls is not None}
        named = {cls for _, names in _declarations(module) for cls in names}
        if {cls.__name__ for cls in classes} != named:
            raise ImportError(f"avalanche_gss.methods.{module}'s METHODS gives the classes "
                              f"{sorted(c.__name__ for c in classes)}, its text names "
                              f"{sorted(named)}: name each class as defined in the file")
        for m in defined:
            registry.add(m.name, m, builtin=True)


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
    if name == "NAMES":
        return _names()
    if name == "MODULES":
        return _modules()
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
    if name in _names() or name in BASELINES:
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
        try:
            with _loading():
                _register_object(entry.load(), where)
        except Exception as err:
            _PLUGINS.clear()  # asked again, it fails again rather than go without
            raise ImportError(f"{where}: {type(err).__name__}: {' '.join(str(err).split())}"
                              ) from err


def names() -> tuple[str, ...]:
    """Every buffer method's name: this package's (:data:`NAMES`), then the registered ones.

    Reads the entry points first (:func:`load_plugins`); imports none of this package's
    methods.
    """
    load_plugins()
    return (*_names(), *_USER)


def import_user(spec: str) -> ModuleType:
    """Import a module of one's own that registers methods or policies; return it.

    The methods it registers remember ``spec``, so that a worker process importing the
    same spec (:func:`imports_for`) knows them too. A module imported before is not
    executed again. While the module is imported, the folder of a ``.py`` file, or the
    current folder for a module name, is importable: a file's own modules beside it and
    a module of the current folder import as they would under ``python FILE`` and
    ``python -m`` (``sys.path`` is left as it was). What it imports is remembered
    (:func:`user_imports`, :func:`user_modules`).

    :param spec: a module name importable from the current folder or ``sys.path``
        (``my_policies``, ``mypkg.policies``), or the path of a ``.py`` file (imported as
        a module named after the file, ``newest.py`` as ``newest``).
    :raises ImportError: the module cannot be found or fails to import, or ends the
        process while imported (``sys.exit``); the message names ``spec``.
        ``KeyboardInterrupt`` passes; any other error of the module's own code is raised
        as it is.
    """
    before = set(_USER)
    path = os.path.abspath(spec) if spec.endswith(".py") else None
    try:
        with _loading(), _importable(os.path.dirname(path) if path else os.getcwd(),
                                     first=path is not None):
            if path is not None:
                module = _import_path(spec)
            else:
                try:
                    module = importlib.import_module(spec)
                except ImportError as err:
                    raise ImportError(
                        f"cannot import {spec!r}: {err} (give a module name importable from "
                        "the current folder or PYTHONPATH, or a path to a .py file)") from err
    except SystemExit as err:  # sys.exit() in the module: a failed import, not the end
        raise ImportError(f"cannot import {spec!r}: it called sys.exit({err.code!r}) while "
                          "imported") from err
    for name in _USER:
        if name not in before:
            _ORIGIN[name] = path or spec
    _IMPORTED[path or spec] = None
    return module


def user_imports() -> tuple[str, ...]:
    """What this process imported with :func:`import_user`, in order.

    The specs that a worker process imports again to run the same code (a ``.py`` file as
    its absolute path).
    """
    return tuple(_IMPORTED)


def user_modules() -> tuple[str, ...]:
    """The modules of one's own code that this process runs, sorted by name.

    Those that :func:`import_user` and the entry points (:func:`load_plugins`) loaded,
    still imported, from a file outside the standard library, the installed packages
    (site-packages, the virtual environment) and this package: a run's cache key holds
    the hash of each (a module of one's own, a second module it imports, a change of a
    built-in method can all change a run). A module's place is where the import system
    found it (its spec's origin): built-in, frozen and namespace modules, and objects
    that other code put in ``sys.modules``, have none and are left out. Empty in a
    process that imported no code of one's own.
    """
    return tuple(sorted(name for name in _LOADED if _of_ones_own(sys.modules.get(name))))


def own_imports(modules: Iterable[str]) -> dict[str, str]:
    """``modules`` and every module of one's own that their code imports, with their files.

    Each module's source is read, not run: every ``import`` and ``from ... import``
    statement counts, at the top of the file or inside a function or a method (a helper
    imported lazily, when a run first calls it), relative ones too, and so do the
    modules those import in turn. A name is resolved as the import system would find it,
    without importing it: an imported module by its own file, another by searching its
    package's folders, or, for a top-level name, the importing file's folder (``--import``
    puts it first) and ``sys.path``. Modules found in the standard library, the installed
    packages or this package are left out, and not read (:func:`user_modules`); so are
    names found nowhere (an import that would fail) and those built into Python. A
    module imported by a name computed at run time (``importlib.import_module(name)``)
    is not seen: import it by an import statement.

    :param modules: module names; each is kept, with its file, wherever it lies (the
        modules that define a method's classes: :meth:`.Method.code_modules`).
    :return: each module's name, sorted, and the path of its source file.
    :raises ValueError: a module of ``modules`` that is neither imported nor found.
    """
    found: dict[str, str] = {}
    todo = []
    for name in modules:
        path = module_file(name, ())
        if path is None:
            raise ValueError(f"module {name!r} is neither imported nor found on sys.path")
        found[name] = path
        todo.append(name)
    while todo:
        name = todo.pop()
        path = found[name]
        if not path.endswith(".py"):
            continue  # no source to read (a compiled module): its own hash stands for it
        folder = os.path.dirname(path)
        is_package = os.path.basename(path) == "__init__.py"
        for imported in _imported_names(path, name, is_package):
            if imported in found:
                continue
            where = module_file(imported, (folder,) if "." not in name else ())
            if where is not None and not _installed(where):
                found[imported] = where
                todo.append(imported)
    return dict(sorted(found.items()))


def _imported_names(path: str, module: str, is_package: bool) -> list[str]:
    """Every module name the import statements of the file ``path`` (module ``module``) name.

    ``import a.b`` names ``a`` and ``a.b``; ``from a import b`` names ``a`` and ``a.b``
    (``b`` may be a submodule); a relative import is made absolute against ``module``'s
    package. A file that does not parse names none (its import fails the run itself).
    """
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts) or not parts:
                    continue  # beyond the top-level package: the import fails by itself
                base = ".".join([*parts[:len(parts) - node.level + 1], *filter(None, [base])])
            if not base:
                continue
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names
                               if alias.name != "*")]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            names += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return list(dict.fromkeys(names))


def module_file(name: str, first: Sequence[str] = ()) -> str | None:
    """The file module ``name`` is (or would be) loaded from, without importing it.

    An imported module's own file; another's as the import system would find it, its
    parent packages not imported (:func:`own_imports`).

    :param name: a module name (``helper``, ``mypkg.helper``).
    :param first: folders searched before ``sys.path`` for a top-level name.
    :return: an absolute path, or ``None``: a built-in, a namespace package, a name found
        nowhere.
    """
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else _find_spec(name, first)
    where = spec.origin if spec is not None and spec.has_location else None
    return os.path.abspath(where) if isinstance(where, str) and os.path.isfile(where) else None


def _find_spec(name: str, first: Sequence[str]) -> importlib.machinery.ModuleSpec | None:
    """The spec of module ``name`` found on the path, its parent packages not imported."""
    parent, _, _ = name.rpartition(".")
    if parent:
        loaded = sys.modules.get(parent)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else _find_spec(parent,
                                                                                        first)
        locations = getattr(spec, "submodule_search_locations", None)
        if not locations:
            return None
        search = list(locations)
    else:
        search = [*first, *(p or os.curdir for p in sys.path)]
    try:
        return importlib.machinery.PathFinder.find_spec(name, search)
    except (ImportError, ValueError, OSError):
        return None


def _of_ones_own(module: ModuleType | None) -> bool:
    """Whether ``module`` was found in a file outside the places of :func:`_installed`."""
    spec = getattr(module, "__spec__", None)
    where = spec.origin if spec is not None and spec.has_location else None
    return isinstance(where, str) and os.path.isabs(where) and not _installed(where)


def _installed(path: str) -> bool:
    """Whether a module's file lies where no code of one's own is.

    The standard library, an installed package's folder (site-packages, the virtual
    environment's scripts) or this package.
    """
    return _installed_folder(os.path.dirname(path))


@functools.cache
def _installed_folder(folder: str) -> bool:
    real = os.path.realpath(folder)
    return any(real == root or real.startswith(root + os.sep) for root in _installed_roots())


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib", "scripts")
             if k in paths]
    roots += getattr(site, "getsitepackages", list)()
    if site.ENABLE_USER_SITE:
        roots.append(site.getusersitepackages())
    roots.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # avalanche_gss
    return tuple(os.path.realpath(r) for r in roots if r)


@contextlib.contextmanager
def _loading() -> Iterator[None]:
    """Remember the modules of one's own imported inside (:func:`user_modules`)."""
    before = set(sys.modules)
    try:
        yield
    finally:
        _LOADED.update((name, None) for name, module in list(sys.modules.items())
                       if name not in before and _of_ones_own(module))


@contextlib.contextmanager
def _importable(folder: str, first: bool) -> Iterator[None]:
    """``folder`` on ``sys.path`` inside (first, or last when it is not there yet)."""
    entries = {os.path.realpath(p or os.curdir) for p in sys.path}
    if not first and os.path.realpath(folder) in entries:
        yield
        return
    entry = folder
    if first:
        sys.path.insert(0, entry)
    else:
        sys.path.append(entry)
    try:
        yield
    finally:
        try:
            sys.path.remove(entry)
        except ValueError:  # the module took it off itself
            pass


def _import_path(spec: str) -> ModuleType:
    path = os.path.abspath(spec)
    if not os.path.isfile(path):
        raise ImportError(f"no such file: {path}")
    name = os.path.splitext(os.path.basename(path))[0]
    loaded = sys.modules.get(name)
    if loaded is not None:
        if os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
            return loaded
        raise ImportError(f"cannot import {path} as module {name!r}: a module of that name "
                          f"is already imported ({getattr(loaded, '__file__', 'built in')}); "
                          "rename the file")
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None or not name.isidentifier():
        raise ImportError(f"cannot import {path}: its name is not a Python module name")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def imports_for(name: str) -> tuple[str, ...]:
    """What a fresh process must import (:func:`import_user`) to know the method ``name``.

    Empty for this package's methods, for those of entry points and for a name registered
    otherwise than through :func:`import_user`.
    """
    return (_ORIGIN[name],) if name in _ORIGIN else ()


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
