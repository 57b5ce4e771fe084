"""The result cache of a sweep: one checksummed JSON file per finished job.

Each result is stored under a hash of the whole job config (:func:`config_key`), written
to a temporary file and moved into place with ``os.replace`` (a writer killed at any
moment leaves only whole results), with a checksum of config and result that a read
checks before trusting the file. What a config holds of the code that ran comes from
:func:`package_sha256` (this package's source) and :func:`module_sha256` (a module of
one's own).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import inspect
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

from avalanche_gss._atomic import atomic_write, remove_stale_temporaries
from avalanche_gss._files import FileRefused, read_regular
from avalanche_gss.reproduce.json_types import Json, JsonObject

__all__ = ["MAX_ENTRY_BYTES", "NAMING_KEYS", "IgnoredResultWarning", "ResultCheck",
           "ResultCache", "canonical_json", "config_key", "module_sha256", "package_sha256",
           "result_config", "source_sha256"]

MAX_ENTRY_BYTES = 256 * 2**20
"""The largest cache entry :meth:`ResultCache.get` reads, and :meth:`ResultCache.put`
writes (256 MiB): a larger file at an entry's path is not read, but recomputed."""


class IgnoredResultWarning(UserWarning):
    """A stored result that :meth:`ResultCache.get` does not believe: its job runs again.

    A link, no regular file, too large, unreadable, of another config or shape, altered;
    the message is one line naming the file and why.
    """


ResultCheck = Callable[[Mapping[str, Json], Mapping[str, Json]], object]
"""``check(config, result)``: raises ``ValueError``, ``TypeError`` or ``KeyError`` when a
stored ``result`` of the job ``config`` lacks what the caller reads from it."""


def canonical_json(config: Mapping[str, Json]) -> str:
    """Return the config as canonical JSON (sorted keys, no spaces); raise if not JSON data."""
    if not isinstance(config, Mapping):
        raise TypeError(f"a job config must be a mapping, got {type(config).__name__}")
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"job config is not JSON-serialisable: {err}") from err


NAMING_KEYS = frozenset({"label", "imports"})
"""Entries of a job config that change no result: they are no part of its cache key.

``label`` names the run in log and failure lines (renaming a run never trains it again);
``imports`` says where a worker finds the code of one's own it imports (paths: moving
the folder never trains it again), whose content the key holds as ``user_code``, by
module name."""


def result_config(config: Mapping[str, Json]) -> JsonObject:
    """The part of a job's config that decides its result: all but :data:`NAMING_KEYS`.

    :param config: the job's config.
    :raises TypeError: ``config`` is not a mapping.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"a job config must be a mapping, got {type(config).__name__}")
    return {k: v for k, v in config.items() if k not in NAMING_KEYS}


def config_key(config: Mapping[str, Json]) -> str:
    """Return the cache key of a job: SHA-256 (32 hex digits) of its canonical JSON.

    Key order does not matter; every value does (``1`` and ``1.0`` differ), except the
    entries that only name the run (:data:`NAMING_KEYS`).

    :param config: the job's JSON-serialisable config.
    """
    return hashlib.sha256(canonical_json(result_config(config)).encode()).hexdigest()[:32]


@functools.cache
def package_sha256() -> str:
    """SHA-256 of this package's source (:func:`source_sha256`), computed once per process.

    Part of every ``python -m reproduce`` run's cache key: any edit of the package is a
    new key, with no version number to remember.
    """
    import avalanche_gss  # the whole package, not this module's folder

    return source_sha256(Path(avalanche_gss.__file__).resolve().parent)


def source_sha256(root: str | os.PathLike[str]) -> str:
    """SHA-256 of the Python source under a folder.

    Every ``.py`` file's path relative to ``root`` (sorted, ``/``-separated) and content.

    :param root: the folder (a package's).
    """
    root = Path(root)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        relative = path.relative_to(root).as_posix().encode()
        content = path.read_bytes()
        digest.update(b"%d:%s%d:" % (len(relative), relative, len(content)))
        digest.update(content)
    return digest.hexdigest()


@functools.cache
def module_sha256(name: str) -> str:
    """SHA-256 of the source file of the imported module ``name``.

    Computed once per process and module, so it names the code that this process runs.

    :param name: a module in ``sys.modules``.
    :raises ValueError: the module is not imported, or has no source file to read (a
        ``.pyc`` without its ``.py``, a module in a zip file, a compiled extension), in
        one line naming the module and its file.
    """
    module = sys.modules.get(name)
    if module is None:
        raise ValueError(f"module {name!r} has no source file to hash (it is not imported)")
    try:
        path = inspect.getsourcefile(module)
    except TypeError:  # a built-in module
        path = None
    if path is None or not os.path.isfile(path):
        where = getattr(module, "__file__", None) or "built in"
        raise ValueError(f"module {name!r} ({where}) has no Python source file to hash (a "
                         ".pyc without its .py, a module in a zip file or a compiled "
                         "extension): a run's cache key holds the hash of the code it runs; "
                         "put the module's .py source in a folder")
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _checksum(config: object, result: object) -> str:
    """SHA-256 of the canonical JSON of a cache entry's config and result."""
    text = json.dumps({"config": config, "result": result}, sort_keys=True,
                      separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


class ResultCache:
    """One JSON file per finished job, ``<cache_dir>/<config_key>.json``.

    Each file holds ``{"key", "config", "result", "checksum", "seconds", "finished",
    "host"}``; ``checksum`` is the SHA-256 of the config and the result, so an entry
    altered on disk (a flipped digit) is not believed: :meth:`get` warns, naming the
    file, and the job runs again. Files are written atomically (temporary file in the
    same folder, ``fsync``, ``os.replace``); leftovers of killed writes are named
    ``.tmp-*``, never read, and removed when an hour old.

    :param cache_dir: the folder (created if missing).
    """

    def __init__(self, cache_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.dir, ".tmp-", ".json")

    def path(self, config: Mapping[str, Json]) -> Path:
        """Return where the job's result lives.

        :param config: the job's config.
        """
        return self.dir / f"{config_key(config)}.json"

    def get(self, config: Mapping[str, Json], check: ResultCheck | None = None
            ) -> JsonObject | None:
        """Return the job's stored result, or ``None`` if it has none (or an unreadable one).

        What is at the entry's path is read only if it is a regular file (not a symbolic
        link, a FIFO, a folder) of at most :data:`MAX_ENTRY_BYTES`; anything else, and an
        entry that does not parse, holds another config, fails its checksum or ``check``,
        is a warning naming the file, and ``None``: the job runs again.

        :param config: the job's config.
        :param check: ``check(config, result)`` raises ``ValueError``, ``TypeError`` or
            ``KeyError`` for a result that lacks what the caller reads from it (one of
            another shape, written with a checksum that matches).
        """
        path = self.path(config)
        try:
            data = read_regular(path, limit=MAX_ENTRY_BYTES, what="cache entry")
        except FileNotFoundError:
            return None
        except FileRefused as err:
            warnings.warn(f"ignoring {path} (it will be recomputed): it {err.reason}",
                          IgnoredResultWarning, stacklevel=2)
            return None
        except OSError as err:
            warnings.warn(f"ignoring unreadable result {path} (it will be recomputed): {err}",
                          IgnoredResultWarning, stacklevel=2)
            return None
        try:
            result, problem = self._entry(data, config, check)
        except RecursionError:  # JSON nested deeper than Python's recursion limit
            result, problem = None, "its JSON is nested too deeply to be a result entry"
        if problem is not None:
            warnings.warn(f"ignoring {path} (it will be recomputed): {problem}",
                          IgnoredResultWarning, stacklevel=2)
        return result

    @staticmethod
    def _entry(data: bytes, config: Mapping[str, Json], check: ResultCheck | None
               ) -> tuple[JsonObject | None, str | None]:
        """The result an entry's bytes hold, or ``None`` and why they are not believed."""
        try:
            record = json.loads(data.decode("utf-8"))
        except ValueError as err:  # UnicodeDecodeError is a ValueError
            return None, f"unreadable result ({err})"
        if not isinstance(record, dict) or not {"config", "result"} <= set(record):
            return None, "not a result entry (needs config, result and checksum)"
        if record["config"] != json.loads(canonical_json(result_config(config))):
            return None, "it holds another config"
        if record.get("checksum") != _checksum(record["config"], record["result"]):
            return None, ("its checksum does not match its content (the file was altered)")
        result = record["result"]
        if not isinstance(result, dict):
            return None, "its result is not a dict"
        if check is not None:
            try:
                check(config, result)
            except (KeyError, TypeError, ValueError) as err:
                why = " ".join(str(err).split())[:300] or type(err).__name__
                if isinstance(err, KeyError):
                    why = f"no {why}"
                return None, f"its result is not one this job returns ({why})"
        return result, None

    def put(self, config: Mapping[str, Json], result: Mapping[str, Json], seconds: float) -> Path:
        """Store a finished job's result atomically; return its path.

        :param config: the job's config.
        :param result: what the job returned (JSON-serialisable).
        :param seconds: the job's wall time.
        :raises OSError: the entry cannot be written (a full disk, a read-only or foreign
            folder, a symbolic link at its path, more than :data:`MAX_ENTRY_BYTES`),
            naming the entry's file; nothing is written through a link.
        """
        canonical = json.loads(canonical_json(result_config(config)))
        try:
            stored = json.loads(json.dumps(result, allow_nan=True))
        except TypeError as err:
            raise TypeError(f"the result of job {dict(config)} is not JSON-serialisable") from err
        record = {
            "key": config_key(config),
            "config": canonical,
            "result": stored,
            "checksum": _checksum(canonical, stored),
            "seconds": seconds,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": platform.node(),
        }
        try:
            text = json.dumps(record, indent=1, allow_nan=True)
        except TypeError as err:
            raise TypeError(f"the result of job {dict(config)} is not JSON-serialisable") from err
        path = self.path(config)
        if len(text) > MAX_ENTRY_BYTES:  # get() would not read it back
            raise OSError(errno.EFBIG, f"cannot write {path}: the result takes {len(text)} "
                          f"bytes, more than the {MAX_ENTRY_BYTES} a cache entry may hold")
        try:
            atomic_write(path, lambda f: f.write(text.encode()), prefix=".tmp-", suffix=".json")
        except OSError as err:  # name the entry, unless the error already does
            if str(path) in str(err):
                raise
            raise OSError(err.errno, err.strerror or str(err), str(path)) from err
        return path
