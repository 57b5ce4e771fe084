"""A strategy's training state as tensors and plain values, and its restoration."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from avalanche_gss._avalanche import criterion_of
from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.checkpoint.model import (
    grow_model,
    model_layout,
    optimizer_layout,
    restore_model_layout,
    restore_optimizer_params,
)

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["FORMAT_VERSION", "rng_state", "set_rng_state", "strategy_state_dict",
           "load_strategy_state_dict"]

FORMAT_VERSION = 3
"""Version of the checkpoint layout; :func:`load_state` refuses any other (1: no
configuration, no checksum; 2: a configuration without every option that changes a
result, no grown-model layout)."""


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


def _criterion_state(strategy: SupervisedTemplate) -> dict[str, Any]:
    """The loss module's own state, empty for a loss without one.

    An ``nn.Module`` criterion's ``state_dict`` (the window of labels of
    :class:`~avalanche_gss.training.LogitAdjustedLoss`; nothing for ``CrossEntropyLoss``).
    """
    criterion = criterion_of(strategy) if hasattr(strategy, "_criterion") else None
    if isinstance(criterion, torch.nn.Module):
        return dict(criterion.state_dict())
    return {}


def strategy_state_dict(strategy: SupervisedTemplate) -> dict[str, Any]:
    """Everything a strategy needs to continue a run exactly, as plain tensors and values.

    :param strategy: an Avalanche strategy (e.g. :class:`~avalanche_gss.methods.gss_iqp.GSSIQP`);
        call it between ``train`` calls, not inside the training loop.
    :return: ``{"format", "model", "model_layout", "optimizer", "plugins", "clock",
        "skipped_steps", "rng", "criterion"}``; ``model_layout`` holds what a model that
        grows keeps outside its ``state_dict`` and the names of the optimizer's parameters,
        in order; ``criterion`` the loss module's own state (empty for a stateless loss).
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
        "model_layout": {"task_modules": model_layout(strategy.model),
                         "optimizer_params": optimizer_layout(strategy.model,
                                                              strategy.optimizer)},
        "optimizer": strategy.optimizer.state_dict(),
        "plugins": plugins,
        "clock": {name: int(getattr(clock, name)) for name in _CLOCK_COUNTERS},
        "skipped_steps": int(getattr(strategy, "skipped_steps", 0)),
        "rng": rng_state(),
        "criterion": _criterion_state(strategy),
    }


def load_strategy_state_dict(strategy: SupervisedTemplate, state: dict[str, Any]) -> None:
    """Restore :func:`strategy_state_dict`'s output into a strategy built the same way.

    The stored buffer tensors are moved to ``strategy.device``. A model whose Avalanche
    heads grew during the run (``IncrementalClassifier``, ``MultiHeadClassifier``) is
    grown to the saved shapes first, and the optimizer given the grown parameters
    (:mod:`~avalanche_gss.checkpoint.model`).

    :param strategy: a freshly built strategy with the same model, optimizer and plugins.
    :param state: what :func:`strategy_state_dict` returned (or :func:`load_state` read).
    :raises ValueError: another format version, or the plugins that hold state differ, or
        the criterion's state does not fit this strategy's criterion.
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
    criterion_state, own = state.get("criterion", {}), sorted(_criterion_state(strategy))
    if sorted(criterion_state) != own:
        raise ValueError(f"the checkpoint holds criterion state {sorted(criterion_state)}, "
                         f"this strategy's criterion has {own}")
    grow_model(strategy.model, state["model"])
    strategy.model.load_state_dict(state["model"])
    layout = state["model_layout"]
    restore_model_layout(strategy.model, layout["task_modules"])
    restore_optimizer_params(strategy.model, strategy.optimizer, layout["optimizer_params"])
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
    if criterion_state:
        criterion_of(strategy).load_state_dict(criterion_state)
    for name, value in state["clock"].items():
        setattr(strategy.clock, name, int(value))
    if hasattr(strategy, "skipped_steps"):
        strategy.skipped_steps = int(state["skipped_steps"])
    set_rng_state(state["rng"])
