"""Exact resume of an online run: the training state as tensors, written atomically.

:func:`train_resumable` trains a stream in chunks of ``every`` experiences and saves the
state after each chunk (:func:`save_state`); started again with the same arguments after
a crash or a ``SIGKILL``, it loads the last state (:func:`load_state`) and trains only
the experiences after it, so the run ends with the same model, buffer and accuracy as
an uninterrupted one (bit for bit on CPU)::

    strategy = GSSIQP(model=model, optimizer=optimizer, mem_size=300, seed=0)
    train_resumable(strategy, bench.train_stream, "run.ckpt", every=100)

The state (:func:`strategy_state_dict`) holds tensors, numbers and strings only: the
model's and the optimizer's ``state_dict``, the ``state_dict`` of every plugin that has
one (buffer samples, scores, recent buffer, clustering state and every generator the
selectors and the replay draw from), the Avalanche clock's counters and the global RNGs
(torch, CUDA, NumPy, Python). It is loaded with ``torch.load(weights_only=True)``, which
builds no arbitrary Python object: a checkpoint of unknown origin cannot run code when
loaded. The file is a header line, the SHA-256 of the rest, then ``torch.save``'s output
(:func:`read_state` checks the checksum before anything is unpickled). A file is written
to a temporary name in the same folder, synced and renamed over the previous one
(``os.replace``), so a process killed while saving leaves the previous checkpoint intact
(and at most a ``.<name>.*.tmp`` file behind, removed by the next save once it is an hour
old).

Each file also carries the configuration it was made with (:func:`strategy_config`:
strategy and plugin classes, buffer class, size, options and seed, replay seed, model
parameter shapes, optimizer type and hyper-parameters, iterations per batch, the
stream's length and any ``identity`` the caller adds) and a SHA-256 checksum of its
whole payload. Loading refuses, with one line naming the file and the first difference,
a file made by another configuration, and a damaged or altered one.

Avalanche's ``save_checkpoint``/``maybe_load_checkpoint`` also work on this library's
strategies; they pickle the whole strategy with ``dill``, so loading one of their files
runs whatever code it names: load only files you trust (README, "Reliability").
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import random
from collections.abc import Iterable, Iterator, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from avalanche_gss._atomic import atomic_write, remove_stale_temporaries
from avalanche_gss.buffers import OnlineBuffer

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "load_state",
    "read_state",
    "load_strategy_state_dict",
    "rng_state",
    "save_state",
    "set_rng_state",
    "strategy_config",
    "strategy_state_dict",
    "train_resumable",
]

FORMAT_VERSION = 2
"""Version of the checkpoint layout; :func:`load_state` refuses any other (1: no
configuration, no checksum)."""

_BUFFER_OPTIONS = ("n", "variant", "memory_grads", "gate", "candidate_draw", "group_size",
                   "recent_size", "solver", "time_limit", "restarts", "slack", "features",
                   "squared")
"""Buffer attributes that configure a policy (recorded when present and plain values)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into this strategy: damaged, or of another run."""


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def strategy_config(strategy: SupervisedTemplate, *, stream_length: int | None = None,
                    identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a checkpoint must have been made with to be loaded into ``strategy``.

    :param strategy: a strategy (fresh, or the one being saved).
    :param stream_length: the number of experiences of the stream it learns, if known.
    :param identity: more values that identify the run (e.g. the data's hash); compared
        as they are.
    :return: plain values only (strings, numbers, lists, dicts).
    """
    config: dict[str, Any] = {"strategy": type(strategy).__qualname__}
    config["plugins"] = [type(p).__qualname__ for p in strategy.plugins
                         if _plugin_state(p) is not None]
    config["n_iter"] = getattr(strategy, "n_iter", None)
    config["train_mb_size"] = getattr(strategy, "train_mb_size", None)
    for plugin in strategy.plugins:
        policy = getattr(plugin, "storage_policy", None)
        if isinstance(policy, OnlineBuffer):
            buffer: dict[str, Any] = {"class": type(policy).__qualname__,
                                      "max_size": int(policy.max_size),
                                      "seed": int(policy.generator.initial_seed())}
            for name in _BUFFER_OPTIONS:
                value = getattr(policy, name, None)
                if value is not None and _plain(value):
                    buffer[name] = value
            clustering = getattr(policy, "clustering", None)
            if clustering is not None and _plain(getattr(clustering, "growth", None)):
                buffer["growth"] = clustering.growth
            config["buffer"] = buffer
            generator = getattr(plugin, "generator", None)
            if isinstance(generator, torch.Generator):
                config["replay_seed"] = int(generator.initial_seed())
            config["replay_batch_size"] = getattr(plugin, "replay_batch_size", None)
            break
    config["model"] = {name: list(t.shape) for name, t in strategy.model.state_dict().items()}
    optimizer = strategy.optimizer
    config["optimizer"] = {
        "class": type(optimizer).__qualname__,
        "param_groups": [{k: v for k, v in group.items() if k != "params" and _plain(v)}
                         for group in optimizer.param_groups],
    }
    if stream_length is not None:
        config["stream_length"] = int(stream_length)
    if identity:
        config["identity"] = dict(identity)
    return config


def _first_difference(saved: Any, fresh: Any, where: str = "") -> str | None:
    """Where two configurations first differ, as ``"key: saved X, here Y"``; or ``None``."""
    if isinstance(saved, dict) and isinstance(fresh, dict):
        for key in [*saved, *(k for k in fresh if k not in saved)]:
            inner = f"{where}.{key}" if where else str(key)
            if key not in fresh or key not in saved:
                return f"{inner}: {saved.get(key, '(absent)')!r} in the file, " \
                       f"{fresh.get(key, '(absent)')!r} here"
            found = _first_difference(saved[key], fresh[key], inner)
            if found:
                return found
        return None
    if isinstance(saved, (list, tuple)) and isinstance(fresh, (list, tuple)) \
            and len(saved) == len(fresh) and not all(map(_plain, [*saved, *fresh])):
        for i, (a, b) in enumerate(zip(saved, fresh, strict=True)):
            found = _first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    if saved != fresh and not (saved != saved and fresh != fresh):  # NaN equals NaN here
        return f"{where}: {saved!r} in the file, {fresh!r} here"
    return None


_MAGIC = b"avalanche-gss checkpoint\n"
"""The first line of every checkpoint file; the second is the payload's SHA-256 (hex)."""


def _pack(payload: bytes) -> bytes:
    return _MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


_CLOCK_COUNTERS = (
    "train_iterations", "train_exp_counter", "train_exp_epochs", "train_exp_iterations",
    "train_epoch_iterations", "total_iterations",
)


def rng_state() -> dict[str, Any]:
    """The global generators' states: torch (CPU and, if initialised, CUDA), NumPy, Python.

    :return: tensors, numbers and tuples only (``weights_only``-loadable).
    """
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`'s output (the CUDA part only where CUDA is available).

    :param state: what :func:`rng_state` returned.
    """
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    npy = state["numpy"]
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _plugin_state(plugin: Any) -> dict[str, Any] | None:
    """A plugin's state: its own ``state_dict``, else its buffer's (``ReplayPlugin``)."""
    if callable(getattr(plugin, "state_dict", None)) and callable(
        getattr(plugin, "load_state_dict", None)
    ):
        return {"plugin": plugin.state_dict()}
    policy = getattr(plugin, "storage_policy", None)
    if isinstance(policy, OnlineBuffer):
        return {"storage_policy": policy.state_dict()}
    return None


def strategy_state_dict(strategy: SupervisedTemplate) -> dict[str, Any]:
    """Everything a strategy needs to continue a run exactly, as plain tensors and values.

    :param strategy: an Avalanche strategy (e.g. :class:`~avalanche_gss.methods.gss_iqp.GSSIQP`);
        call it between ``train`` calls, not inside the training loop.
    :return: ``{"format", "model", "optimizer", "plugins", "clock", "skipped_steps", "rng"}``.
    """
    plugins = []
    for plugin in strategy.plugins:
        state = _plugin_state(plugin)
        if state is not None:
            plugins.append({"name": type(plugin).__qualname__, **state})
    clock = strategy.clock
    return {
        "format": FORMAT_VERSION,
        "model": strategy.model.state_dict(),
        "optimizer": strategy.optimizer.state_dict(),
        "plugins": plugins,
        "clock": {name: int(getattr(clock, name)) for name in _CLOCK_COUNTERS},
        "skipped_steps": int(getattr(strategy, "skipped_steps", 0)),
        "rng": rng_state(),
    }


def load_strategy_state_dict(strategy: SupervisedTemplate, state: dict[str, Any]) -> None:
    """Restore :func:`strategy_state_dict`'s output into a strategy built the same way.

    The stored buffer tensors are moved to ``strategy.device``.

    :param strategy: a freshly built strategy with the same model, optimizer and plugins.
    :param state: what :func:`strategy_state_dict` returned (or :func:`load_state` read).
    :raises ValueError: another format version, or the plugins that hold state differ.
    """
    if state.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"checkpoint format {state.get('format')!r}; this version reads {FORMAT_VERSION}"
        )
    stateful = [p for p in strategy.plugins if _plugin_state(p) is not None]
    names = [type(p).__qualname__ for p in stateful]
    saved = [entry["name"] for entry in state["plugins"]]
    if names != saved:
        raise ValueError(f"the checkpoint holds the state of plugins {saved}, "
                         f"this strategy has {names}")
    strategy.model.load_state_dict(state["model"])
    if getattr(strategy, "optimized_param_id", None) is None and callable(
        getattr(strategy, "make_optimizer", None)
    ):
        # Avalanche's first make_optimizer() registers the parameters and empties their
        # optimizer state (e.g. momentum): do it now, before the state is restored.
        strategy.make_optimizer()
    strategy.optimizer.load_state_dict(state["optimizer"])
    device = getattr(strategy, "device", "cpu")
    for plugin, entry in zip(stateful, state["plugins"], strict=True):
        if "plugin" in entry:
            plugin.load_state_dict(entry["plugin"])
        else:
            plugin.storage_policy.load_state_dict(entry["storage_policy"])
        policy = getattr(plugin, "storage_policy", None)
        if isinstance(policy, OnlineBuffer):
            policy.to(device)
    for name, value in state["clock"].items():
        setattr(strategy.clock, name, int(value))
    if hasattr(strategy, "skipped_steps"):
        strategy.skipped_steps = int(state["skipped_steps"])
    set_rng_state(state["rng"])


def save_state(strategy: SupervisedTemplate, path: str | os.PathLike[str], *,
               experiences: int, stream_length: int | None = None,
               identity: dict[str, Any] | None = None) -> None:
    """Write the strategy's state, position, configuration and checksum to ``path``.

    The state is :func:`strategy_state_dict`'s, the configuration
    :func:`strategy_config`'s. The file is written under a temporary name in the same
    folder, flushed to disk and renamed over ``path``: at every moment ``path`` is either
    the previous checkpoint or the new one.

    :param strategy: the strategy, between ``train`` calls.
    :param path: checkpoint file (its folder is created if needed).
    :param experiences: how many experiences of the stream the strategy has learnt.
    :param stream_length: the stream's length, if known (part of the configuration).
    :param identity: more values identifying the run (see :func:`strategy_config`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent, f".{path.name}.", ".tmp")
    state = {**strategy_state_dict(strategy), "experiences": int(experiences),
             "config": strategy_config(strategy, stream_length=stream_length,
                                       identity=identity)}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = _pack(buffer.getvalue())
    atomic_write(path, lambda file: file.write(data), prefix=f".{path.name}.", suffix=".tmp",
                 sync_dir=True)


def read_state(source: str | os.PathLike[str] | bytes, *, name: str | None = None
               ) -> dict[str, Any]:
    """Read a :func:`save_state` file: check its checksum, then load it ``weights_only``.

    The file is a header line, the SHA-256 of the rest, and ``torch.save``'s output: any
    changed byte (a flip, a truncation) is refused before the payload is unpickled.

    :param source: the file, or its bytes.
    :param name: how to name it in errors (default: its path).
    :return: the state, bit for bit what was saved.
    :raises FileNotFoundError: no such file.
    :raises CheckpointError: not a checkpoint of this format, or damaged or altered since
        it was saved; the message names the file.
    """
    if isinstance(source, bytes):
        label, data = name or "checkpoint", source
    else:
        label = name or os.fspath(source)
        if not Path(source).exists():
            raise FileNotFoundError(f"no such checkpoint: {label}")
        data = Path(source).read_bytes()
    if not data.startswith(_MAGIC):
        raise CheckpointError(f"{label}: not a checkpoint of format {FORMAT_VERSION} written "
                              "by save_state (no header; an older format or another file)")
    digest, newline, payload = data[len(_MAGIC):].partition(b"\n")
    if not newline or digest != hashlib.sha256(payload).hexdigest().encode():
        raise CheckpointError(f"{label}: its checksum does not match its content (the file "
                              f"is damaged, truncated or altered: {len(data)} bytes); delete "
                              "it to start over")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:  # an intact payload that torch cannot read: say why
        message = " ".join(str(err).split())[:300]
        raise CheckpointError(f"{label}: not a readable checkpoint ({type(err).__name__}: "
                              f"{message or 'no message'})") from err
    if not isinstance(state, dict) or "experiences" not in state or "config" not in state:
        raise CheckpointError(f"{label} is not a checkpoint written by save_state")
    if state.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{label}: checkpoint format {state.get('format')!r}; this "
                              f"version reads {FORMAT_VERSION}")
    return state


def load_state(strategy: SupervisedTemplate, path: str | os.PathLike[str], *,
               stream_length: int | None = None,
               identity: dict[str, Any] | None = None) -> int:
    """Load a :func:`save_state` checkpoint into ``strategy`` (``weights_only=True``).

    :param strategy: a freshly built strategy, configured as the one that was saved.
    :param path: the checkpoint file.
    :param stream_length: the stream's length, if known (compared with the file's).
    :param identity: compared with the file's (see :func:`strategy_config`).
    :return: the number of experiences the saved strategy had learnt.
    :raises FileNotFoundError: no such file.
    :raises CheckpointError: damaged or altered, of another format, or made by another
        configuration (the message names the file and the first difference).
    """
    state = read_state(path)
    saved = state["config"]
    fresh = strategy_config(strategy, stream_length=stream_length, identity=identity)
    if "stream_length" not in saved or stream_length is None:
        saved.pop("stream_length", None)
        fresh.pop("stream_length", None)
    difference = _first_difference(saved, fresh)
    if difference is not None:
        raise CheckpointError(f"{path} was made by another configuration: {difference}")
    load_strategy_state_dict(strategy, state)
    return int(state["experiences"])


def _chunks(stream: Iterable[Any], start: int, size: int) -> Iterator[Any]:
    """Consecutive pieces of ``size`` experiences of ``stream``, from experience ``start``."""
    sliceable: Any = stream
    if hasattr(sliceable, "__len__") and hasattr(sliceable, "__getitem__"):
        for first in range(start, len(sliceable), size):
            yield sliceable[first : first + size]
        return
    items = iter(stream)  # a lazy stream without slicing: walk it
    next(itertools.islice(items, start, start), None)
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def train_resumable(
    strategy: SupervisedTemplate,
    stream: Iterable[Any],
    path: str | os.PathLike[str],
    *,
    every: int = 100,
    identity: dict[str, Any] | None = None,
    **train_kwargs: Any,
) -> int:
    """Train ``stream`` with a checkpoint every ``every`` experiences; resume from ``path``.

    If ``path`` exists, the strategy is restored from it and training continues with the
    experience after the saved ones; if it already covers the whole stream, nothing is
    trained. Each chunk is one ``strategy.train`` call, which for
    :class:`~avalanche_gss.training.OnlineTemplate` strategies learns exactly what one
    call on the whole stream would. A run killed at any moment loses at most the
    ``every - 1`` experiences after its last checkpoint, which the next call relearns.

    :param strategy: a freshly built strategy (same model, optimizer, plugins and seeds on
        every call).
    :param stream: the experiences (a sliceable Avalanche stream, a list, or any iterable).
    :param path: the checkpoint file.
    :param every: experiences between checkpoints.
    :param identity: values that identify the run beyond the strategy (e.g. the data's
        hash); a checkpoint made with others is refused.
    :param train_kwargs: passed to ``strategy.train``.
    :return: the number of experiences learnt in total.
    :raises ValueError: ``every < 1``, or the checkpoint is ahead of the stream's end.
    :raises CheckpointError: the checkpoint is damaged or of another configuration.
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    path = Path(path)
    length = len(stream) if isinstance(stream, Sized) else None
    if path.exists():
        saved = read_state(path)
        if length is not None and saved["experiences"] > length:
            raise ValueError(f"{path} has learnt {saved['experiences']} experiences, the "
                             f"stream has only {length}")
    done = (load_state(strategy, path, stream_length=length, identity=identity)
            if path.exists() else 0)
    for chunk in _chunks(stream, done, every):
        strategy.train(chunk, **train_kwargs)
        done += len(chunk)
        save_state(strategy, path, experiences=done, stream_length=length, identity=identity)
    return done
