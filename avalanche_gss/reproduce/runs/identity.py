"""What identifies a run: its data (loaded once per process) and its code, in its cache key.

The engine's own: a job loads its data and checks them against its key
(:func:`load_checked`), and a worker process readies itself for a job (:func:`prepare_job`):
it imports the job's modules of one's own and checks that it runs the code, torch and CPU
kind the key names. The harness's plugin imports and cache identity live here, beside the
cache (:mod:`~avalanche_gss.reproduce.runs.cache`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import CellType

import avalanche_gss
from avalanche_gss import methods
from avalanche_gss.provenance import numerics_identity
from avalanche_gss.reproduce.json_types import Json, JsonObject, json_object, json_str, json_strs
from avalanche_gss.reproduce.runs import own_code
from avalanche_gss.reproduce.runs.cache import module_sha256, package_sha256
from avalanche_gss.streams import ArrayDataset, load_dataset, synthetic_images
from avalanche_gss.streams.datasets import OfflineDigitsWarning

__all__ = ["STANDIN", "STANDIN_COUNTS", "STANDIN_SHAPE", "code_identity", "data_identity",
           "load", "load_checked", "method_code", "prepare_job", "run_code", "stream_modules",
           "user_code"]

STANDIN = "cifar10-standin"
"""The generated stand-in used by ``--quick`` when CIFAR-10 cannot be loaded."""

STANDIN_SHAPE = (3, 16, 16)
"""The stand-in's image shape: CIFAR-10's channels at half its side, so that a ``--quick``
run of the ResNet-18 takes a quarter of the arithmetic (its outputs record the shape)."""

STANDIN_COUNTS = (100, 20)
"""The stand-in's training and test samples per class (``--quick`` runs use at most 25 and
evaluate every test sample)."""

_DATA: dict[tuple[object, ...], ArrayDataset] = {}
_FINGERPRINTS: dict[int, str] = {}


def load(name: str, root: str | None, download: bool) -> ArrayDataset:
    """Load a dataset once per process (``cifar10-standin``: the generated stand-in).

    An ``.npz`` file is loaded again when it changed on disk (size or modification time).
    """
    key: tuple[object, ...] = (name, root, download)
    if name.lower().endswith(".npz") and os.path.exists(name):
        stat = os.stat(name)
        key += (stat.st_size, stat.st_mtime_ns)
    if key not in _DATA:
        if name == STANDIN:
            _DATA[key] = synthetic_images(STANDIN, shape=STANDIN_SHAPE, num_classes=10,
                                          train_per_class=STANDIN_COUNTS[0],
                                          test_per_class=STANDIN_COUNTS[1])
        else:
            _DATA[key] = load_dataset(name, root=root, download=download)
    return _DATA[key]


def data_identity(data: ArrayDataset) -> dict[str, str]:
    """What identifies the data of a run: their content's hash and their resolved source.

    Both enter every run's cache key, so a file replaced at the same path, or MNIST
    switching between the 5,000-digit fallback and torchvision's files, is a new run.
    """
    if id(data) not in _FINGERPRINTS:
        _FINGERPRINTS[id(data)] = data.fingerprint()
    return {"data_sha256": _FINGERPRINTS[id(data)], "data_source": data.source}


def code_identity() -> JsonObject:
    """What identifies the code of every run in its cache key, and what it computes on.

    The package's version and the hash of its source
    (:func:`~avalanche_gss.reproduce.runs.cache.package_sha256`), torch's version, and the CPU
    instruction set torch's kernels dispatch to
    (:func:`~avalanche_gss.provenance.numerics_identity`): another torch, or kernels of
    another vector width, sum in another order, and a run's numbers can change with them.
    In a process that imported code of one's own with ``--import``, also ``imports``
    (:func:`user_code`): what a worker process imports before its run, so that it runs
    what this process runs; it names where the code is, not what it is, and is no part of
    the cache key (:data:`~avalanche_gss.reproduce.runs.cache.NAMING_KEYS`).

    Code of one's own enters a run's key only where it is that run's code:
    :func:`run_code` adds the hash of its method's modules and its stream's, and of every
    module of one's own they import. Any edit of the package is a new key, and so is
    another torch or another kind of CPU; the same code on the same kind of machine gives
    the same key, so its cached results stay valid.
    """
    return {"code": avalanche_gss.__version__, "code_sha256": package_sha256(),
            **numerics_identity(), **user_code()}


def user_code(modules: Iterable[str] = ()) -> JsonObject:
    """The code of one's own a run runs, as its cache key holds it.

    ``user_code``: the SHA-256 of the source of each module of ``modules`` and of every
    module of one's own their code imports, at the top or inside a function
    (:func:`~avalanche_gss.reproduce.runs.own_code.own_imports`), by module name, never
    by path: moving the folder that holds them keeps the key; ``imports``: the
    ``--import`` modules (:func:`~avalanche_gss.reproduce.runs.own_code.user_imports`),
    which a worker process imports before its run (no part of the key). Each only where
    there is any.

    :param modules: the modules whose code decides the run (its method's, its stream's).
    :raises ValueError: a module has no source file to hash (a ``.pyc`` alone, a zip
        import), in one line naming the module and its file.
    """
    identity: JsonObject = {}
    if modules:
        identity["user_code"] = {name: _source_sha256(name, path)
                                 for name, path in _own_imports(tuple(sorted(modules))).items()}
    imports = own_code.user_imports()
    if imports:
        identity["imports"] = list(imports)
    return identity


@functools.cache
def _own_imports(modules: tuple[str, ...]) -> dict[str, str]:
    """:func:`~avalanche_gss.reproduce.runs.own_code.own_imports`, once per set of modules."""
    return own_code.own_imports(modules)


def _source_sha256(name: str, path: str) -> str:
    """The hash of module ``name``'s source, imported or not.

    Of the code this process runs where it is imported
    (:func:`~avalanche_gss.reproduce.runs.cache.module_sha256`), else of its file ``path``;
    either is computed once per process and module.
    """
    if name in sys.modules:
        return module_sha256(name)
    return _file_sha256(name, path)


@functools.cache
def _file_sha256(name: str, path: str) -> str:
    if not path.endswith(".py"):
        raise ValueError(f"module {name!r} ({path}) has no Python source file to hash: a "
                         "run's cache key holds the hash of the code it runs; put the "
                         "module's .py source in a folder")
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def method_code(method: str) -> JsonObject:
    """What a run's cache key and its worker process need of a method from user code.

    Empty for this package's methods and the baselines, but for :func:`user_code`'s
    ``imports``. For a registered method: ``user_code``, the hash of the source file of
    each module that defines its classes
    (:meth:`~avalanche_gss.methods.spec.Method.code_modules`, an installed plugin's too)
    and of each module of one's own they import, so that an edit of the policy, or of a
    module it imports, is a new run; and ``imports``, what a worker process imports to
    know the method (:func:`~avalanche_gss.reproduce.runs.own_code.imports_for`, and every other
    ``--import`` module), where there is any.
    """
    return run_code(method)


def stream_modules(stream: str | None) -> tuple[str, ...]:
    """The modules of one's own whose code builds the registered stream ``stream``.

    Those that define its definition's ``build_split`` and the functions and definitions
    that function holds (a transform's inner stream, a ``functools.partial``'s
    function), outside this package, torch and the standard library; none for this
    package's streams and ``None``.

    :param stream: a name of :data:`avalanche_gss.streams.REGISTRY`, or ``None``.
    """
    from avalanche_gss.streams import REGISTRY, StreamDefinition

    if stream is None or stream in REGISTRY.builtin_names():
        return ()
    found: set[str] = set()
    todo: list[object] = [REGISTRY[stream]]
    seen: set[int] = set()
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, StreamDefinition):
            todo.append(item.build_split)
        elif isinstance(item, functools.partial):
            todo += [item.func, *item.args, *item.keywords.values()]
        elif callable(item):
            module = getattr(item, "__module__", None)
            if isinstance(module, str):
                found.add(module)
            todo += [cell.cell_contents for cell in getattr(item, "__closure__", None) or ()
                     if _filled(cell)]
    skip = {"avalanche_gss", "avalanche", "torch", "builtins", *sys.stdlib_module_names}
    return tuple(sorted(m for m in found if m.partition(".")[0] not in skip))


def _filled(cell: CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def run_code(method: str, stream: str | None = None) -> JsonObject:
    """What a run's cache key and its worker process need of its code of one's own.

    :func:`user_code` of the modules of its method, where it is registered from code of
    one's own (:meth:`~avalanche_gss.methods.spec.Method.code_modules`), and of its
    stream, where it is (:func:`stream_modules`): an edit of an ``--import`` module, or of
    a module it imports, is a new run for the runs whose code it is, and for no other
    (this package's methods on this package's streams keep their keys). ``imports``:
    every ``--import`` module, and the one that registered the method, for the worker.

    :param method: the run's method.
    :param stream: its registered stream (``None``: a protocol's own).
    """
    modules: tuple[str, ...] = ()
    if method in methods.names() and method not in methods.NAMES:
        modules = methods.get(method).code_modules()
    identity = user_code((*modules, *stream_modules(stream)))
    imports = list(dict.fromkeys([*json_strs(identity.get("imports", ())),
                                  *own_code.imports_for(method)]))
    if imports:
        identity["imports"] = imports
    return identity


def prepare_job(config: Mapping[str, Json]) -> None:
    """Make a job's process ready for it: import its user modules, check its code.

    Imports the modules of ``config["imports"]`` (a worker process starts without them),
    then checks that the code this process runs is the code the job's key names
    (``code_sha256``, ``user_code``), and that it runs on the torch and the CPU capability
    the key names (``torch``, ``cpu_capability``: a worker on another machine), where the
    config holds them.

    :raises ValueError: the code changed since the sweep started, or this process runs on
        another torch or CPU capability than the key's, naming what differs.
    """
    for spec in json_strs(config.get("imports", ())):
        own_code.import_user(spec)
    methods.names()  # the entry points' methods, imported
    changed = []
    if config.get("code_sha256") not in (None, package_sha256()):
        changed.append("avalanche_gss")
    changed += [name for name, digest in json_object(config.get("user_code", {}),
                                                       "a job's user_code").items()
                if _current_sha256(name) != digest]
    if changed:
        raise ValueError(f"the code of {', '.join(changed)} changed during the sweep (its "
                         "source hash differs from the one the sweep started with); run the "
                         "command again")
    here = numerics_identity()
    differ = [f"{name} {here[name]} here, {config[name]} in the run's key" for name in here
              if config.get(name, here[name]) != here[name]]
    if differ:
        raise ValueError(f"this worker computes on {'; '.join(differ)}: its numbers would be "
                         "cached as another machine's; run the workers on machines like the "
                         "one that started the sweep")


def _current_sha256(name: str) -> str | None:
    """The hash of module ``name``'s source here, imported or not (``None``: found nowhere).

    A module a run imports lazily is not imported yet when its job starts: it is looked
    for as :func:`~avalanche_gss.reproduce.runs.own_code.own_imports` looks, beside the
    modules of one's own this process imported, then on ``sys.path``.
    """
    if name not in sys.modules:
        folders = tuple(dict.fromkeys(
            os.path.dirname(str(getattr(sys.modules[m], "__file__", "") or ""))
            for m in own_code.user_modules() if "." not in m))
        path = own_code.module_file(name, folders)
        if path is None:
            return None
        return _source_sha256(name, path)
    return module_sha256(name)


def load_checked(config: Mapping[str, Json]) -> ArrayDataset:
    """Load a job's data and check that they are the data its cache key names.

    :raises ValueError: the data changed since the sweep started (e.g. the file was
        replaced), naming the data and both hashes.
    """
    with warnings.catch_warnings():
        # The command that planned the sweep loaded these data first, and said so if the
        # offline digits stand in for MNIST: its worker processes do not say it again.
        warnings.simplefilter("ignore", OfflineDigitsWarning)
        root = config["root"]
        data = load(str(config["data"]), None if root is None else json_str(root, "a job's root"),
                    bool(config["download"]))
    expected = config.get("data_sha256")
    if expected is not None:
        found = data_identity(data)["data_sha256"]
        if found != expected:
            raise ValueError(f"the data {config['data']!r} changed during the sweep (content "
                             f"hash {found[:12]}, the sweep started with {str(expected)[:12]}); "
                             "run the command again")
    return data
