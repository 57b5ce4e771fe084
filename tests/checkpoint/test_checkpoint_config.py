"""A checkpoint's configuration records every option that changes a result.

The test walks the constructor of every buffer, ready strategy and constrained strategy
of the registry, of the templates their ``**kwargs`` go to (``OnlineRehearsal``,
``OnlineTemplate``), of the rehearsal and constrained-update plugins, of every other
plugin that holds state (MKD), of every loss module and of every retrieval, and checks
that changing each option changes :func:`strategy_config`: an option added later and not
recorded fails here, unless :data:`UNRECORDED_OPTIONS` says why it changes no result.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from avalanche.core import SupervisedPlugin
from helpers import Tiny
from torch import nn

from avalanche_gss import training
from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.checkpoint import strategy_config
from avalanche_gss.checkpoint.config import UNRECORDED_OPTIONS, first_difference
from avalanche_gss.methods import REGISTRY
from avalanche_gss.methods.gss_iqp import GSSIQPBuffer
from avalanche_gss.methods.rand import RandBuffer
from avalanche_gss.methods.reservoir import ReservoirBuffer
from avalanche_gss.training import AsymmetricCrossEntropy, LogitAdjustedLoss, MKDPlugin
from avalanche_gss.training import retrieval as retrievals
from avalanche_gss.training.constrained import ConstrainedUpdatePlugin
from avalanche_gss.training.rehearsal import OnlineRehearsal, OnlineRehearsalPlugin
from avalanche_gss.training.template import OnlineTemplate


def other_loss(logits, y):
    return F.cross_entropy(logits, y, reduction="none", label_smoothing=0.1)


ALTERNATIVES: dict[str, Callable[[nn.Module], Any]] = {
    # a value other than the default for every option that changes a result
    "max_size": lambda m: 5, "mem_size": lambda m: 5, "seed": lambda m: 1,
    "n": lambda m: 3, "variant": lambda m: "paper", "memory_grads": lambda m: "samples",
    "gate": lambda m: "sample", "candidate_draw": lambda m: "proportional",
    "group_size": lambda m: 5, "recent_size": lambda m: 7, "solver": lambda m: "exact",
    "time_limit": lambda m: 5.0, "restarts": lambda m: 3, "slack": lambda m: 0.1,
    "growth": lambda m: 1.5, "features": lambda m: "penultimate", "squared": lambda m: False,
    "victim": lambda m: "random", "score_from": lambda m: "step", "loss_fn": lambda m: other_loss,
    "params": lambda m: list(m.classifier.parameters()),
    "replay_batch_size": lambda m: 4, "retrieval": lambda m: "mir", "joint": lambda m: True,
    "candidates": lambda m: 20, "margin": lambda m: 0.5, "ridge": lambda m: 0.01,
    "storage_policy": lambda m: RandBuffer(6),
    "model": lambda m: Tiny(hidden=7),
    "optimizer": lambda m: torch.optim.Adam(m.parameters(), lr=0.05),
    "criterion": lambda m: nn.CrossEntropyLoss(label_smoothing=0.1),
    "n_iter": lambda m: 2, "train_mb_size": lambda m: 5, "eval_every": lambda m: 1,
    "peval_mode": lambda m: "iteration",
    "k": lambda m: 3, "tau": lambda m: 10.0, "lam": lambda m: 0.1,
    "positive": lambda m: False, "per_class": lambda m: False, "class_share": lambda m: "seen",
    "replay_loss": lambda m: "uniform", "alpha": lambda m: 0.2, "beta": lambda m: 0.7,
    "refit_every": lambda m: 3, "refit_steps": lambda m: 7, "refit_batch_size": lambda m: 8,
    "refit_lr": lambda m: 0.5,
    "momentum": lambda m: 0.5, "temperature": lambda m: 2.0, "weight": lambda m: 1.0,
    "window": lambda m: 50, "reduction": lambda m: "sum",
}


def _init_options(cls: type, set_by_owner: tuple[str, ...] = ()) -> list[str]:
    """The named options of ``cls``'s constructor (where ``**kwargs`` go: see ``_owners``)."""
    return [p.name for p in inspect.signature(cls).parameters.values()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in set_by_owner]


def _template(plugin_or_policy: Any, **kw: Any) -> OnlineTemplate:
    model = kw.pop("model", None) or Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if isinstance(plugin_or_policy, OnlineBuffer):
        return OnlineRehearsal(storage_policy=plugin_or_policy, model=model, optimizer=optimizer)
    return OnlineTemplate(model=model, optimizer=optimizer, plugins=[plugin_or_policy])


def _strategy(cls: type) -> Callable[..., Any]:
    def build(model: nn.Module, **options: Any) -> Any:
        optimizer = options.pop("optimizer", None) or torch.optim.SGD(model.parameters(), lr=0.05)
        return cls(model=model, optimizer=optimizer, **{"mem_size": 6, **options})
    return build


def _owners() -> list[tuple[str, list[str], Callable[..., Any]]]:
    """(label, options, build(model, **options) -> strategy) for every constructor walked."""
    owners = []
    for name, method in REGISTRY.items():
        buffer = method.buffer
        owners.append((f"{name} buffer", _init_options(buffer),
                       lambda m, _b=buffer, **o: _template(_b(**{"max_size": 6, **o}), model=m)))
        owners.append((f"{name} strategy", _init_options(method.strategy, ("storage_policy",)),
                       _strategy(method.strategy)))
        if method.constrained is not None:
            owners.append((f"{name} constrained", _init_options(method.constrained),
                           _strategy(method.constrained)))
    # What the strategies' **kwargs go to, walked once: OnlineRehearsal's own options and
    # OnlineTemplate's (every ready strategy derives from both, GSSIQPConstrained from the
    # latter), each built through a ready strategy.
    for template in (OnlineRehearsal, OnlineTemplate):
        assert all(issubclass(m.strategy, template) for _, m in REGISTRY.items())
        owners.append((template.__name__, _init_options(template, ("storage_policy",)),
                       _strategy(REGISTRY["Reservoir"].strategy)))
    owners.append(("OnlineRehearsalPlugin", _init_options(OnlineRehearsalPlugin),
                   lambda m, **o: _template(OnlineRehearsalPlugin(
                       **{"storage_policy": ReservoirBuffer(6), **o}), model=m)))
    owners.append(("ConstrainedUpdatePlugin", _init_options(ConstrainedUpdatePlugin),
                   lambda m, **o: _template(ConstrainedUpdatePlugin(
                       **{"storage_policy": GSSIQPBuffer(6), **o}), model=m)))
    reservoir = REGISTRY["Reservoir"].strategy
    # the plugins beside the buffer's that hold state, and the losses, in a ready strategy
    owners.append(("MKDPlugin", _init_options(MKDPlugin),
                   lambda m, **o: _strategy(reservoir)(m, plugins=[MKDPlugin(**o)])))
    for loss in (LogitAdjustedLoss, AsymmetricCrossEntropy):
        owners.append((loss.__name__, _init_options(loss),
                       lambda m, _l=loss, **o: _strategy(reservoir)(m, criterion=_l(**o))))
    for cls in vars(retrievals).values():
        if isinstance(cls, type) and issubclass(cls, retrievals.Retrieval):
            owners.append((cls.__name__, _init_options(cls),
                           lambda m, _c=cls, **o: _template(OnlineRehearsalPlugin(
                               ReservoirBuffer(6), retrieval=_c(**o)), model=m)))
    return owners


OWNERS = _owners()
CASES = [(label, option) for label, options, _ in OWNERS for option in options
         if option not in UNRECORDED_OPTIONS]


def test_the_walk_finds_the_options_that_were_forgotten_once():
    walked = {option for _, options, _ in OWNERS for option in options}
    assert {"victim", "retrieval", "candidates", "joint", "margin", "n_iter"} <= walked
    assert len(OWNERS) >= 2 * len(REGISTRY) + 4 + 3


def test_every_plugin_and_loss_of_the_library_is_walked():
    # a plugin or a loss added to avalanche_gss.training later is walked, or fails here
    walked = {label for label, _, _ in OWNERS}
    exported = [getattr(training, name) for name in training.__all__]
    parts = [cls.__name__ for cls in exported if isinstance(cls, type)
             and (issubclass(cls, SupervisedPlugin) or issubclass(cls, nn.Module))]
    assert "MKDPlugin" in parts and "LogitAdjustedLoss" in parts
    assert not [name for name in parts if name not in walked]


def test_every_unrecorded_option_says_why():
    assert all(reason.strip() for reason in UNRECORDED_OPTIONS.values())


def _config(build: Callable[..., Any], option: str | None) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Tiny()
    options = {}
    if option is not None:
        value = ALTERNATIVES[option](model)
        if option == "model":
            model = value
        else:
            options[option] = value
    return strategy_config(build(model, **options))


@pytest.mark.parametrize(("owner", "option"), CASES, ids=[f"{o}-{n}" for o, n in CASES])
def test_every_option_that_changes_a_result_is_in_the_saved_configuration(owner, option):
    assert option in ALTERNATIVES, (
        f"{owner}: option {option!r} is new: record it in strategy_config and give it a "
        "value here (ALTERNATIVES), or add it to UNRECORDED_OPTIONS with the reason it "
        "changes no result")
    build = next(b for label, _, b in OWNERS if label == owner)
    difference = first_difference(_config(build, None), _config(build, option))
    assert difference is not None, (
        f"{owner}({option}=...) changes the run but not the saved configuration: a "
        "checkpoint would resume with it silently")
