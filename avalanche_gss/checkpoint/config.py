"""What a checkpoint must have been made with: the run's configuration, and its comparison."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.checkpoint.state import _plugin_state

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["strategy_config", "first_difference"]

_BUFFER_OPTIONS = ("n", "variant", "memory_grads", "gate", "candidate_draw", "group_size",
                   "recent_size", "solver", "time_limit", "restarts", "slack", "features",
                   "squared")
"""Buffer attributes that configure a policy (recorded when present and plain values)."""


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


def first_difference(saved: Any, fresh: Any, where: str = "") -> str | None:
    """Where two configurations first differ, as ``"key: saved X, here Y"``; or ``None``."""
    if isinstance(saved, dict) and isinstance(fresh, dict):
        for key in [*saved, *(k for k in fresh if k not in saved)]:
            inner = f"{where}.{key}" if where else str(key)
            if key not in fresh or key not in saved:
                return f"{inner}: {saved.get(key, '(absent)')!r} in the file, " \
                       f"{fresh.get(key, '(absent)')!r} here"
            found = first_difference(saved[key], fresh[key], inner)
            if found:
                return found
        return None
    if isinstance(saved, (list, tuple)) and isinstance(fresh, (list, tuple)) \
            and len(saved) == len(fresh) and not all(map(_plain, [*saved, *fresh])):
        for i, (a, b) in enumerate(zip(saved, fresh, strict=True)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    if saved != fresh and not (saved != saved and fresh != fresh):  # NaN equals NaN here
        return f"{where}: {saved!r} in the file, {fresh!r} here"
    return None
