"""What a checkpoint must have been made with: the run's configuration, and its comparison."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from avalanche_gss._avalanche import criterion_of
from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.checkpoint._text import short
from avalanche_gss.checkpoint.state import _plugin_state

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["UNRECORDED_OPTIONS", "MODEL_RECORD", "model_record", "strategy_config",
           "first_difference"]

UNRECORDED_OPTIONS: Mapping[str, str] = {
    "device": "where the run computes; the state is moved to the strategy's device, and "
              "the bit-for-bit promise holds on one device",
    "evaluator": "metrics and loggers read the run and change nothing it learns",
    "eval_mb_size": "the size of evaluation mini-batches; training never uses it",
    "plugins": "the plugins that hold state are recorded by class (\"plugins\"); plugins "
               "without state (loggers, callbacks) may differ between a run and its resume",
}
"""Constructor options that the configuration does not record, and why: none of them
changes what a run learns. Every other option of the library's buffers, strategies,
plugins and retrievals is recorded (``tests/test_checkpoint_config.py`` walks their
signatures)."""

_MISSING = object()


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _describe(value: Any, names: Mapping[int, str], depth: int = 0) -> Any:
    """A plain description of an option's value, equal for equal settings.

    Plain values as they are; a model parameter by its name; a generator by its seed; a
    function by its dotted name; a module or another object by its class and its public
    plain attributes (a loss's ``reduction``, a retrieval's ``candidates``).
    """
    if _plain(value):
        return value
    if isinstance(value, torch.Generator):
        return int(value.initial_seed())
    if isinstance(value, torch.Tensor):
        if id(value) in names:
            return names[id(value)]
        if value.requires_grad or value.numel() > 16:  # a parameter (values change): its shape
            return f"<tensor {list(value.shape)}>"
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_describe(v, names, depth) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _describe(v, names, depth) for k, v in value.items()}
    if inspect.isroutine(value) or isinstance(value, type):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', value)}"
    described: dict[str, Any] = {"class": type(value).__qualname__}
    if depth == 0:
        for key, attr in sorted(getattr(value, "__dict__", {}).items()):
            if key.startswith("_") or (key == "training" and isinstance(value, nn.Module)):
                continue
            if _plain(attr) or (isinstance(attr, (list, tuple)) and all(map(_plain, attr))):
                described[key] = _describe(attr, names, depth + 1)
    return described


def _option(owner: Any, name: str) -> Any:
    """The value of constructor option ``name`` as ``owner`` keeps it (``_MISSING``: not kept).

    ``seed`` is the seed of the owner's ``generator``; an option kept by the owner's
    ``clustering`` (GSS-Clust's ``growth``) is read there.
    """
    generator = getattr(owner, "generator", None)
    if name == "seed" and isinstance(generator, torch.Generator):
        return int(generator.initial_seed())
    if name in getattr(owner, "__dict__", {}) or hasattr(type(owner), name):
        return getattr(owner, name)
    clustering = getattr(owner, "clustering", None)
    if clustering is not None and hasattr(clustering, name):
        return getattr(clustering, name)
    return _MISSING


def _options(owner: Any, names: Mapping[int, str], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``owner``'s class and every option of its constructor that it keeps, described."""
    recorded: dict[str, Any] = {"class": type(owner).__qualname__}
    try:
        parameters = inspect.signature(type(owner)).parameters.values()
    except (TypeError, ValueError):  # no readable signature: the class alone
        return recorded
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) \
                or parameter.name in skip or parameter.name in UNRECORDED_OPTIONS:
            continue
        value = _option(owner, parameter.name)
        if value is not _MISSING:
            recorded[parameter.name] = _describe(value, names)
    return recorded


def _plugin_options(plugins: list[Any], names: Mapping[int, str]) -> dict[str, Any]:
    """The options of the stateful plugins beside the buffer's, by class name.

    MKD's ``momentum``, ``temperature`` and ``weight``; ``"Name[2]"`` for a second plugin
    of one class; a plugin's own buffer of this library with its options under
    ``"storage_policy"``.
    """
    recorded: dict[str, Any] = {}
    for plugin in plugins:
        options = _options(plugin, names, skip=("storage_policy",))
        policy = getattr(plugin, "storage_policy", None)
        if isinstance(policy, OnlineBuffer):
            options["storage_policy"] = _options(policy, names)
        name = type(plugin).__qualname__
        key, count = name, 1
        while key in recorded:
            count += 1
            key = f"{name}[{count}]"
        recorded[key] = options
    return recorded


MODEL_RECORD = ("model_class", "model_options", "model_modules")
"""The configuration's keys that say what the model is, beside its tensor shapes
(``"model"``). Files saved before they were recorded lack them; such a file is compared on
its shapes alone."""

_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")  # an object's address: differs per process


def model_record(model: nn.Module, names: Mapping[int, str] | None = None) -> dict[str, Any]:
    """What the model is beyond its tensor shapes: its class, options and submodules.

    ``model_class`` is its class's module and qualified name; ``model_options`` every
    option of its constructor that it keeps as an attribute of the same name (described
    as the strategy's options are: the reduced ResNet-18's ``in_channels`` and
    ``image_size``); ``model_modules`` every submodule, by name (``"(model)"`` for the
    model itself), as its class and its ``extra_repr()``: a ``Dropout``'s ``p``, a
    ``BatchNorm``'s ``eps`` and ``momentum``, an activation's options, which change what
    the model learns and no tensor shape shows. Object addresses in an ``extra_repr`` are
    left out (they differ in every process).

    :param model: the model.
    :param names: the model's parameters by ``id``, to name a parameter option (default:
        the model's own ``named_parameters``).
    :return: plain values only.
    """
    if names is None:
        names = {id(p): name for name, p in model.named_parameters()}
    options = _options(model, names)
    options.pop("class")
    modules = {name or "(model)": _ADDRESS.sub("0x...", f"{type(module).__qualname__}("
                                                       f"{module.extra_repr()})")
               for name, module in model.named_modules()}
    kind = type(model)
    return {"model_class": f"{kind.__module__}.{kind.__qualname__}", "model_options": options,
            "model_modules": modules}


def strategy_config(strategy: SupervisedTemplate, *, stream_length: int | None = None,
                    identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a checkpoint must have been made with to be loaded into ``strategy``.

    Every option that changes what the run learns: the strategy's class, the classes of
    its plugins that hold state, iterations, mini-batch size and epochs, the loss and
    periodic evaluation; the buffer's class and every option of its constructor (size,
    seed, ``n``, ``victim``, ...), those of the plugin that holds it (replay batch size
    and seed, the retrieval and its options such as MIR's ``candidates``, ``joint``, the
    constrained update's ``margin``); the options of every other plugin that holds state
    (``plugin_options``: :class:`~avalanche_gss.training.MKDPlugin`'s ``momentum``,
    ``temperature`` and ``weight``); the model's class, the options it keeps, its
    submodules with their ``extra_repr()`` (:func:`model_record`: a ``Dropout``'s
    ``p``) and its tensor shapes; the optimizer's class and hyper-parameters. Options
    are read from the objects' attributes of the same name as the constructor's
    parameters; a function (``loss_fn``) is recorded by its dotted name, parameters
    (``params``) by their names in the model. Not recorded: :data:`UNRECORDED_OPTIONS`.

    :param strategy: a strategy (fresh, or the one being saved).
    :param stream_length: the number of experiences of the stream it learns, if known.
    :param identity: more values that identify the run (e.g. the data's hash); compared
        as they are.
    :return: plain values only (strings, numbers, lists, dicts).
    """
    names = {id(p): name for name, p in strategy.model.named_parameters()}
    config: dict[str, Any] = {"strategy": type(strategy).__qualname__}
    config["plugins"] = [type(p).__qualname__ for p in strategy.plugins
                         if _plugin_state(p) is not None]
    config["n_iter"] = getattr(strategy, "n_iter", None)
    config["train_mb_size"] = getattr(strategy, "train_mb_size", None)
    config["train_epochs"] = getattr(strategy, "train_epochs", None)
    config["criterion"] = _describe(criterion_of(strategy) if hasattr(strategy, "_criterion")
                                    else None, names)
    config["eval_every"] = getattr(strategy, "eval_every", None)
    config["peval_mode"] = next((p.peval_mode for p in strategy.plugins
                                 if hasattr(p, "peval_mode")), None)  # Avalanche's PeriodicEval
    buffer_plugin = None
    for plugin in strategy.plugins:
        policy = getattr(plugin, "storage_policy", None)
        if isinstance(policy, OnlineBuffer):
            config["buffer"] = _options(policy, names)
            config["buffer_plugin"] = _options(plugin, names, skip=("storage_policy",))
            buffer_plugin = plugin
            break
    others = _plugin_options([p for p in strategy.plugins if p is not buffer_plugin
                              and _plugin_state(p) is not None], names)
    if others:  # absent without such a plugin: files of such runs compare as before
        config["plugin_options"] = others
    record = model_record(strategy.model, names)
    config["model_class"] = record.pop("model_class")  # first: another class is said as such
    config["model"] = {name: list(t.shape) for name, t in strategy.model.state_dict().items()}
    config.update(record)
    optimizer = strategy.optimizer
    config["optimizer"] = {
        "class": type(optimizer).__qualname__,
        "param_groups": [{k: _describe(v, names) for k, v in group.items() if k != "params"}
                         for group in optimizer.param_groups],
    }
    if stream_length is not None:
        config["stream_length"] = int(stream_length)
    if identity:
        config["identity"] = dict(identity)
    return config


def first_difference(saved: Any, fresh: Any, where: str = "") -> str | None:
    """Where two configurations first differ, as ``"key: saved X, here Y"``; or ``None``.

    Values (and keys) are described in a few hundred characters at most, on one line: a
    file's configuration may hold anything.
    """
    if isinstance(saved, dict) and isinstance(fresh, dict):
        for key in [*saved, *(k for k in fresh if k not in saved)]:
            label = key[:80] if isinstance(key, str) else short(key, 80)
            inner = f"{where}.{label}" if where else label
            if key not in fresh or key not in saved:
                return f"{inner}: {short(saved.get(key, '(absent)'))} in the file, " \
                       f"{short(fresh.get(key, '(absent)'))} here"
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
        return f"{where}: {short(saved)} in the file, {short(fresh)} here"
    return None
