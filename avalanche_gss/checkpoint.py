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
loaded. A file is written to a temporary name in the same folder, synced and renamed over
the previous one (``os.replace``), so a process killed while saving leaves the previous
checkpoint intact (and at most a ``.<name>.*.tmp`` file behind).

Avalanche's ``save_checkpoint``/``maybe_load_checkpoint`` also work on this library's
strategies; they pickle the whole strategy with ``dill``, so loading one of their files
runs whatever code it names: load only files you trust (README, "Reliability").
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Iterable, Iterator, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from avalanche_gss._atomic import atomic_write
from avalanche_gss.storage import OnlineBuffer

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = [
    "FORMAT_VERSION",
    "load_state",
    "load_strategy_state_dict",
    "rng_state",
    "save_state",
    "set_rng_state",
    "strategy_state_dict",
    "train_resumable",
]

FORMAT_VERSION = 1
"""Version of the checkpoint layout; :func:`load_state` refuses any other."""

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

    :param strategy: an Avalanche strategy (e.g. :class:`~avalanche_gss.strategies.GSSIQP`);
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
               experiences: int) -> None:
    """Write :func:`strategy_state_dict` and the stream position to ``path``, atomically.

    The file is written under a temporary name in the same folder, flushed to disk and
    renamed over ``path``: at every moment ``path`` is either the previous checkpoint or
    the new one.

    :param strategy: the strategy, between ``train`` calls.
    :param path: checkpoint file (its folder is created if needed).
    :param experiences: how many experiences of the stream the strategy has learnt.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {**strategy_state_dict(strategy), "experiences": int(experiences)}
    atomic_write(path, lambda file: torch.save(state, file), prefix=f".{path.name}.",
                 suffix=".tmp", sync_dir=True)


def load_state(strategy: SupervisedTemplate, path: str | os.PathLike[str]) -> int:
    """Load a :func:`save_state` checkpoint into ``strategy`` (``weights_only=True``).

    :param strategy: a freshly built strategy, configured as the one that was saved.
    :param path: the checkpoint file.
    :return: the number of experiences the saved strategy had learnt.
    :raises FileNotFoundError: no such file.
    :raises ValueError: not a checkpoint of this format, or of a strategy with other plugins.
    """
    state = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or "experiences" not in state:
        raise ValueError(f"{path} is not a checkpoint written by save_state")
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
    **train_kwargs: Any,
) -> int:
    """Train ``stream`` with a checkpoint every ``every`` experiences; resume from ``path``.

    If ``path`` exists, the strategy is restored from it and training continues with the
    experience after the saved ones; if it already covers the whole stream, nothing is
    trained. Each chunk is one ``strategy.train`` call, which for
    :class:`~avalanche_gss.strategies.OnlineTemplate` strategies learns exactly what one
    call on the whole stream would. A run killed at any moment loses at most the
    ``every - 1`` experiences after its last checkpoint, which the next call relearns.

    :param strategy: a freshly built strategy (same model, optimizer, plugins and seeds on
        every call).
    :param stream: the experiences (a sliceable Avalanche stream, a list, or any iterable).
    :param path: the checkpoint file.
    :param every: experiences between checkpoints.
    :param train_kwargs: passed to ``strategy.train``.
    :return: the number of experiences learnt in total.
    :raises ValueError: ``every < 1``, or the checkpoint is ahead of the stream's end.
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    path = Path(path)
    done = load_state(strategy, path) if path.exists() else 0
    length = len(stream) if isinstance(stream, Sized) else None
    if length is not None and done > length:
        raise ValueError(f"{path} has learnt {done} experiences, the stream has only {length}")
    for chunk in _chunks(stream, done, every):
        strategy.train(chunk, **train_kwargs)
        done += len(chunk)
        save_state(strategy, path, experiences=done)
    return done
