"""A strategy's training state as tensors and plain values, and its restoration."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from avalanche_gss._avalanche import criterion_of
from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.checkpoint._text import short
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
           "load_strategy_state_dict", "check_tensors", "buffer_states", "BUFFER_DTYPES"]

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


def check_tensors(state: Any) -> None:
    """Refuse a tensor that holds fewer bytes than its elements take, anywhere in ``state``.

    A saved tensor is dense: its ``numel * element_size`` bytes are in its storage, whose
    bytes were read from the file. A tensor whose strides repeat its elements (a zero
    stride: a billion elements over four bytes) would allocate its full size when it is
    copied; it is refused before anything is. So is a tensor without storage (sparse,
    meta): a state never holds one. Each object is visited once (a file's pickle may share
    one list many times over).

    :param state: a state, as :func:`strategy_state_dict` returns it or a file holds it.
    :raises ValueError: one line naming the tensor's place in the state and its sizes.
    """
    pending: list[tuple[str, Any]] = [("", state)]
    seen: set[int] = set()
    while pending:
        where, value = pending.pop()
        if isinstance(value, torch.Tensor):
            name = where or "the state"
            if value.layout != torch.strided or value.is_meta:
                raise ValueError(f"{name}: a {short(value.layout)} tensor without data "
                                 "(a saved state holds dense tensors only)")
            need = value.numel() * value.element_size()
            held = value.untyped_storage().nbytes()
            if need > held:
                raise ValueError(
                    f"{name}: a tensor of shape {short(list(value.shape), 120)} takes "
                    f"{need:,} bytes but holds {held:,} (its elements repeat, strides "
                    f"{short(list(value.stride()), 120)}); refused before it is copied")
            continue
        if id(value) in seen or not isinstance(value, (Mapping, list, tuple)):
            continue
        seen.add(id(value))
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        for key, item in items:
            label = (f"[{key}]" if not isinstance(value, Mapping)
                     else f".{key[:60]}" if isinstance(key, str) else f".{short(key, 60)}")
            pending.append(((where + label).removeprefix(".")[:200], item))


def _policy_state(plugin: Any, entry: Any) -> tuple[OnlineBuffer, Any] | None:
    """A stateful plugin's buffer and that buffer's state in the plugin's saved ``entry``.

    ``None``: the plugin holds no buffer of this library.
    """
    policy = getattr(plugin, "storage_policy", None)
    if not isinstance(policy, OnlineBuffer) or not isinstance(entry, Mapping):
        return None
    own = entry.get("plugin", entry)
    if isinstance(own, Mapping) and "storage_policy" in own:
        return policy, own["storage_policy"]
    return None


def buffer_states(strategy: SupervisedTemplate, state: Mapping[str, Any]
                  ) -> list[tuple[OnlineBuffer, Any]]:
    """The strategy's buffers, each with its saved state in ``state`` (in plugin order).

    :param strategy: the strategy being loaded.
    :param state: what :func:`strategy_state_dict` returned (or a file holds).
    """
    stateful = [p for p in strategy.plugins if _plugin_state(p) is not None]
    entries = state.get("plugins")
    if not isinstance(entries, list):
        return []
    found = (_policy_state(p, e) for p, e in zip(stateful, entries, strict=False))
    return [pair for pair in found if pair is not None]


def _check_state(strategy: SupervisedTemplate, state: Mapping[str, Any]) -> None:
    """What :func:`load_strategy_state_dict` checks before it changes anything."""
    if not isinstance(state, Mapping) or state.get("format") != FORMAT_VERSION:
        found = state.get("format") if isinstance(state, Mapping) else state
        raise ValueError(f"checkpoint format {short(found)}; this version reads "
                         f"{FORMAT_VERSION}")
    check_tensors(state)
    stateful = [p for p in strategy.plugins if _plugin_state(p) is not None]
    names = [type(p).__qualname__ for p in stateful]
    entries = state.get("plugins")
    saved = ([e.get("name") if isinstance(e, Mapping) else e for e in entries]
             if isinstance(entries, list) else entries)
    if names != saved:
        raise ValueError(f"the checkpoint holds the state of plugins {short(saved)}, "
                         f"this strategy has {short(names)}")
    criterion_state = state.get("criterion", {})
    keys = sorted(map(str, criterion_state)) if isinstance(criterion_state, Mapping) else None
    own = sorted(_criterion_state(strategy))
    if keys != own:
        raise ValueError(f"the checkpoint holds criterion state {short(keys)}, "
                         f"this strategy's criterion has {short(own)}")


def _kind(dtype: torch.dtype) -> str:
    """A dtype's kind: ``"complex"``, ``"floating"`` (real), ``"bool"`` or ``"integer"``."""
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "floating"
    return "bool" if dtype == torch.bool else "integer"


_KIND_WORDS = {"floating": "real floating point", "integer": "integer", "bool": "bool",
               "complex": "complex"}


def _kinds(kinds: tuple[str, ...]) -> str:
    words = [_KIND_WORDS[k] for k in kinds]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


BUFFER_DTYPES: Mapping[str, tuple[str, ...]] = {
    "y": ("integer",), "t": ("integer",), "recent_y": ("integer",), "recent_t": ("integer",),
    "scores": ("floating",), "logits": ("floating",), "recent_logits": ("floating",),
    "x": ("floating", "integer", "bool"), "recent_x": ("floating", "integer", "bool"),
}
"""The kinds of dtype a saved buffer's columns may have, where a buffer's state holds them:
labels and task labels integers, scores and stored logits real floating point, inputs
real (never complex). ``None`` (no column yet) is accepted."""


def _check_columns(owner: str, saved: Any) -> None:
    """Refuse a saved buffer state whose columns are not tensors of :data:`BUFFER_DTYPES`."""
    if not isinstance(saved, Mapping):
        raise ValueError(f"{owner}'s saved state is {short(saved)}, not a dict")
    for name, kinds in BUFFER_DTYPES.items():
        column = saved.get(name)
        if column is None:
            continue
        if not isinstance(column, torch.Tensor):
            raise ValueError(f"{owner}'s saved column {name} is {short(column)}, not a "
                             "tensor")
        if _kind(column.dtype) not in kinds:
            raise ValueError(f"{owner}'s saved column {name} has dtype "
                             f"{str(column.dtype).removeprefix('torch.')}, not {_kinds(kinds)}")


def _check_module_state(where: str, saved: Any, live: Mapping[str, torch.Tensor], *,
                        empty: bool = False) -> None:
    """Refuse a saved ``state_dict`` that does not fit the live model's, tensor by tensor.

    The same names, each tensor of the live one's shape and of its kind of dtype (real
    floating point for weights: a complex tensor would lose its imaginary part).

    :param where: how to name the saved state in the error.
    :param saved: the saved ``state_dict``.
    :param live: the learner's ``state_dict`` (after its heads were grown).
    :param empty: whether an empty state is accepted (a teacher not made yet).
    :raises ValueError: one line naming the tensor, its shape or dtype and the model's.
    """
    if not isinstance(saved, Mapping):
        raise ValueError(f"{where} is {short(saved)}, not a state_dict")
    if empty and not saved:
        return
    names = [str(k) for k in saved]
    extra = [k for k in names if k not in live]
    missing = [k for k in live if k not in saved]
    if extra or missing:
        what = (f"holds {short(extra[0], 80)}, which the model lacks" if extra
                else f"lacks the model's {missing[0]}")
        raise ValueError(f"{where} {what}")
    for key, tensor in saved.items():
        own = live[key]
        if not isinstance(own, torch.Tensor):  # a module's extra state: its own to check
            continue
        label = f"{where}'s {key}"
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{label} is {short(tensor)}, not a tensor")
        if tensor.shape != own.shape:
            raise ValueError(f"{label} has shape {short(list(tensor.shape), 120)}, the "
                             f"model's {list(own.shape)}")
        if _kind(tensor.dtype) != _kind(own.dtype):
            raise ValueError(f"{label} has dtype {str(tensor.dtype).removeprefix('torch.')}, "
                             f"the model's {str(own.dtype).removeprefix('torch.')} "
                             f"({_KIND_WORDS[_kind(own.dtype)]})")


def _check_contents(strategy: SupervisedTemplate, state: Mapping[str, Any]) -> None:
    """What :func:`load_strategy_state_dict` checks on the grown model, before any load.

    The model's state against the model; every saved copy of the model's state that a
    plugin or a buffer declares (``model_states``: MKD's teacher, CSReL's coreset model)
    against the model too; each buffer's columns' dtypes (:data:`BUFFER_DTYPES`).
    """
    live = strategy.model.state_dict()
    _check_module_state("the saved model", state.get("model"), live)
    stateful = [p for p in strategy.plugins if _plugin_state(p) is not None]
    for plugin, entry in zip(stateful, state["plugins"], strict=True):
        name = type(plugin).__qualname__
        own = entry.get("plugin", {}) if isinstance(entry, Mapping) else None
        for key in getattr(plugin, "model_states", ()):
            if not isinstance(own, Mapping) or key not in own:
                raise ValueError(f"the {name}'s saved state has no {key}")
            _check_module_state(f"the {name}'s saved {key}", own[key], live, empty=True)
    for policy, saved in buffer_states(strategy, state):
        name = type(policy).__qualname__
        _check_columns(f"the {name}", saved)
        for key in getattr(policy, "model_states", ()):
            if key not in saved:
                raise ValueError(f"the {name}'s saved state has no {key}")
            _check_module_state(f"the {name}'s saved {key}", saved[key], live, empty=True)


def _attributes(obj: Any) -> Callable[[], None]:
    """Undo for a load that assigns ``obj``'s attributes and sets its generators' states."""
    attrs = dict(vars(obj))
    generators = {name: value.get_state() for name, value in attrs.items()
                  if isinstance(value, torch.Generator)}

    def restore() -> None:
        for name in [name for name in vars(obj) if name not in attrs]:
            delattr(obj, name)
        vars(obj).update(attrs)
        for name, generator_state in generators.items():
            attrs[name].set_state(generator_state)

    return restore


def _optimizer_undo(optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    """Undo for a load that replaces, or edits in place, the optimizer's groups and state.

    Its ``load_state_dict`` replaces them, Avalanche's ``make_optimizer`` edits them.
    """
    groups = optimizer.param_groups
    contents = [(group, {**group, "params": list(group["params"])}) for group in groups]
    state = optimizer.state
    per_param = {param: dict(value) for param, value in state.items()}

    def restore() -> None:
        for group, saved in contents:
            group.clear()
            group.update(saved)
        groups[:] = [group for group, _ in contents]
        state.clear()
        for param, value in per_param.items():
            state[param] = value
        optimizer.__dict__.update(param_groups=groups, state=state)

    return restore


def _undo_load(strategy: SupervisedTemplate, stateful: list[Any]) -> Callable[[], None]:
    """Everything :func:`_assign` may change, taken before it runs; the function restores it.

    The model's tensors (copies) and its task modules' counters; the optimizer's groups and
    state; each stateful plugin's attributes and generators, its retrieval's and its
    buffer's (the buffer's own snapshot, which covers its columns, clustering and logits);
    the criterion's state; the clock, the strategy's counters and the global generators.
    """
    model = strategy.model
    tensors = {name: value.detach().clone() for name, value in model.state_dict().items()}
    layout = model_layout(model)
    steps: list[Callable[[], None]] = [_optimizer_undo(strategy.optimizer)]
    for plugin in stateful:
        steps.append(_attributes(plugin))
        retrieval = getattr(plugin, "retrieval", None)
        if retrieval is not None and hasattr(retrieval, "__dict__"):
            steps.append(_attributes(retrieval))
        policy = getattr(plugin, "storage_policy", None)
        if isinstance(policy, OnlineBuffer):
            steps.append(functools.partial(policy._rollback, policy._snapshot()))
    criterion = criterion_of(strategy) if hasattr(strategy, "_criterion") else None
    if isinstance(criterion, torch.nn.Module):
        own = {name: value.detach().clone() for name, value in criterion.state_dict().items()}
        steps.append(lambda: criterion.load_state_dict(own))
    clock = {name: getattr(strategy.clock, name) for name in _CLOCK_COUNTERS}
    counters = {name: getattr(strategy, name) for name in ("skipped_steps", "optimized_param_id")
                if name in vars(strategy)}
    generators = rng_state()

    def restore() -> None:
        for step in reversed(steps):
            step()
        model.load_state_dict(tensors)
        restore_model_layout(model, layout)
        for name, value in clock.items():
            setattr(strategy.clock, name, value)
        vars(strategy).update(counters)
        set_rng_state(generators)

    return restore


def load_strategy_state_dict(strategy: SupervisedTemplate, state: dict[str, Any]) -> None:
    """Restore :func:`strategy_state_dict`'s output into a strategy built the same way.

    The stored buffer tensors are moved to ``strategy.device``. A model whose Avalanche
    heads grew during the run (``IncrementalClassifier``, ``MultiHeadClassifier``) is
    grown to the saved shapes first, and the optimizer given the grown parameters
    (:mod:`~avalanche_gss.checkpoint.model`). Before anything is loaded, every tensor is
    checked to hold the bytes its elements take (:func:`check_tensors`), the plugins and
    the criterion to be this strategy's, the model's state and every saved copy of it
    that a plugin or a buffer declares in its ``model_states`` (MKD's teacher, CSReL's
    coreset model) to have the (grown) model's names, shapes and kinds of dtype (real
    floating-point weights), and each buffer's columns their kinds of dtype
    (:data:`BUFFER_DTYPES`: integer labels); a load that fails after that (a state that
    does not fit the optimizer, a buffer or a generator) is undone: a refused state
    leaves the model, optimizer, plugins, buffers, criterion, clock and global
    generators as they were.

    :param strategy: a freshly built strategy with the same model, optimizer and plugins.
    :param state: what :func:`strategy_state_dict` returned (or :func:`load_state` read).
    :raises ValueError: another format version, or the plugins that hold state differ, or
        the criterion's state does not fit this strategy's criterion, or a tensor holds
        fewer bytes than its shape takes, or a model state (the model's, a teacher's, a
        coreset model's) has another tensor name, shape or kind of dtype than the model's,
        or a buffer column another kind of dtype than :data:`BUFFER_DTYPES` allows (all
        in one line, before anything is loaded).
    :raises Exception: whatever a part of the strategy raises on a state that does not
        fit it (``RuntimeError`` from the model's ``load_state_dict``, ...), after the
        strategy was put back as it was.
    """
    _check_state(strategy, state)
    stateful = [p for p in strategy.plugins if _plugin_state(p) is not None]
    shrink = grow_model(strategy.model, state["model"])
    try:
        _check_contents(strategy, state)  # on the grown model, before anything is loaded
        restore = _undo_load(strategy, stateful)
    except BaseException:
        shrink()
        raise
    try:
        _assign(strategy, stateful, state)
    except BaseException:
        restore()
        shrink()
        raise


def _assign(strategy: SupervisedTemplate, stateful: list[Any], state: dict[str, Any]) -> None:
    """Load a checked ``state`` into the (grown) ``strategy``."""
    criterion_state = state.get("criterion", {})
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
    clock = state["clock"]
    for name in _CLOCK_COUNTERS:  # these names only: a file sets no other attribute
        setattr(strategy.clock, name, int(clock[name]))
    if hasattr(strategy, "skipped_steps"):
        strategy.skipped_steps = int(state["skipped_steps"])
    set_rng_state(state["rng"])
