"""Plugin dispatch that skips the plugins with nothing to do on an event.

Avalanche calls every plugin's callback on every event, no-op defaults included; with
10-sample experiences and a few iterations each, that loop is a large share of an online
run. :class:`FastHooks` overrides the per-iteration trigger methods of Avalanche's
templates (``_before_forward`` and the others below: underscore-named, but the only place
the dispatch happens) to call the callbacks that act on the event only.
"""

from __future__ import annotations

from typing import Any

from avalanche.core import BasePlugin, BaseSGDPlugin, SupervisedPlugin
from avalanche.evaluation.metric_definitions import PluginMetric
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.templates.strategy_mixin_protocol import SGDStrategyProtocol

from avalanche_gss._avalanche import is_active

__all__ = ["FastHooks", "acts_on"]

_EVENTS = (
    "before_train_dataset_adaptation", "after_train_dataset_adaptation",
    "after_training_exp", "before_training_epoch", "after_training_epoch",
    "before_training_iteration", "before_forward", "after_forward", "before_backward",
    "after_backward", "before_update", "after_update", "after_training_iteration",
)
_NO_OPS = {event: {getattr(c, event, None) for c in (BasePlugin, BaseSGDPlugin, SupervisedPlugin,
                                                     PluginMetric)} for event in _EVENTS}


def acts_on(plugin: Any, event: str) -> bool:
    """Whether ``plugin`` does anything on ``event`` (Avalanche's no-op defaults do not).

    :param plugin: a plugin (an ``EvaluationPlugin`` acts if one of its metrics or
        loggers does).
    :param event: a callback name, e.g. ``"before_forward"``.
    """
    if isinstance(plugin, EvaluationPlugin):
        if not is_active(plugin):
            return False
        parts = [*plugin.metrics, *plugin.loggers]
        return any(getattr(type(p), event, None) not in _NO_OPS[event] for p in parts)
    return getattr(type(plugin), event, None) not in _NO_OPS[event]


def _trigger(event: str) -> Any:
    def trigger(self: FastHooks, **kwargs: Any) -> None:
        for hook in self._hooks(event):
            hook(self, **kwargs)

    trigger.__doc__ = f"Call the plugins that act on ``{event}``."
    return trigger


class FastHooks(SGDStrategyProtocol[Any, Any, Any]):
    """Mixin for an Avalanche template: per-event plugin lists, built once per ``train``.

    Call :meth:`_reset_hooks` when the plugins may have changed (the template does at the
    start of every ``train`` call). The template's ``plugins`` are typed by Avalanche's
    ``SGDStrategyProtocol``.
    """

    def _reset_hooks(self) -> None:
        self._hook_cache: dict[str, list[Any]] = {}

    def _hooks(self, event: str) -> list[Any]:
        """The bound callbacks of the plugins that act on ``event`` (cached)."""
        cache = self.__dict__.setdefault("_hook_cache", {})
        hooks = cache.get(event)
        if hooks is None:
            hooks = [getattr(p, event) for p in self.plugins if acts_on(p, event)]
            cache[event] = hooks
        return hooks

    _before_train_dataset_adaptation = _trigger("before_train_dataset_adaptation")
    _after_train_dataset_adaptation = _trigger("after_train_dataset_adaptation")
    _before_training_epoch = _trigger("before_training_epoch")
    _after_training_epoch = _trigger("after_training_epoch")
    _before_training_iteration = _trigger("before_training_iteration")
    _before_forward = _trigger("before_forward")
    _after_forward = _trigger("after_forward")
    _before_backward = _trigger("before_backward")
    _after_backward = _trigger("after_backward")
    _before_update = _trigger("before_update")
    _after_update = _trigger("after_update")
    _after_training_iteration = _trigger("after_training_iteration")
    _after_training_exp = _trigger("after_training_exp")
