"""Code of one's own that the harness runs: imported by name or file, and hashed for the cache.

``python -m avalanche_gss.reproduce --import SPEC`` imports a module of one's own before a
run, in every worker process too (:func:`import_user`); the methods and policies it
registers remember the spec (:func:`imports_for`). A run's cache key holds the hash of each
module of one's own it runs: those imported so, those the entry points loaded
(:func:`avalanche_gss.methods.plugin_modules`), and every module of one's own that their
code imports (:func:`user_modules`, :func:`own_imports`), so that an edit is a new run,
never a stale cached one.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType

import avalanche_gss
from avalanche_gss import methods

__all__ = ["import_user", "imports_for", "module_file", "own_imports", "user_imports",
           "user_modules"]

_ORIGIN: dict[str, str] = {}  # registered method name -> the import_user spec that registered it
_IMPORTED: dict[str, None] = {}  # the import_user specs that succeeded, in order
_LOADED: dict[str, None] = {}  # the modules of one's own that import_user imported


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
    before = set(methods.registered())
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
    for name in methods.registered():
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

    Those that :func:`import_user` and the entry points
    (:func:`avalanche_gss.methods.load_plugins`) loaded, still imported, from a file
    outside the standard library, the installed packages (site-packages, the virtual
    environment) and this package: a run's cache key holds the hash of each (a module of
    one's own, a second module it imports, a change of a built-in method can all change a
    run). A module's place is where the import system found it (its spec's origin):
    built-in, frozen and namespace modules, and objects that other code put in
    ``sys.modules``, have none and are left out. Empty in a
    process that imported no code of one's own.
    """
    loaded = (*_LOADED, *methods.plugin_modules())
    return tuple(sorted({name for name in loaded if _of_ones_own(sys.modules.get(name))}))


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
    roots.append(os.path.dirname(os.path.abspath(avalanche_gss.__file__)))
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
