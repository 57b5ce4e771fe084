"""The method registry: one entry per paper method, its presets and its ready strategy."""

import importlib
from pathlib import Path

import pytest
import torch
from torch import Tensor

from avalanche_gss import methods
from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.methods.gss_iqp import GSSIQPConstrained
from avalanche_gss.models import MLP
from avalanche_gss.reproduce.runs import training as experiments
from avalanche_gss.reproduce.runs.training import RunSettings, build_strategy, make_buffer
from avalanche_gss.streams import online_benchmark
from avalanche_gss.training import BufferStrategy, OnlineRehearsal


def _model_and_sgd():
    torch.manual_seed(0)
    model = MLP()
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def _loss(logits, y):
    return torch.nn.functional.cross_entropy(logits, y, reduction="none")


PAPER = ("Rand", "Reservoir", "GSS-Greedy", "GSS-IQP", "GSS-Clust", "FSS-Clust")
"""The paper's buffer methods, in its tables' order: the package's first ones."""

BUILTIN = methods.NAMES
"""The package's own methods, as its method files declare them (checked below)."""


def _builtin(names):
    """The package's own among ``names``: methods a user registers (an entry point, an
    imported module) come after them and are not this file's business."""
    return tuple(name for name in names if name in BUILTIN)


def test_registry_holds_the_papers_buffer_methods_in_table_order():
    assert methods.NAMES[:len(PAPER)] == PAPER
    assert {"CBRS", "GDumb", "CB-GSS", "OCS", "GCR"} <= set(methods.NAMES)
    assert tuple(methods.REGISTRY)[:len(BUILTIN)] == BUILTIN  # registered ones follow
    assert experiments.BUFFER_METHODS == tuple(methods.REGISTRY) == methods.names()
    assert _builtin(experiments.VARIANT_METHODS) == ("GSS-Greedy", "GSS-Clust", "FSS-Clust")
    assert _builtin(experiments.CONSTRAINED_METHODS) == ("GSS-IQP",)
    assert methods.REGISTRY.builtin_names() == BUILTIN
    for name in BUILTIN:
        method = methods.REGISTRY[name]
        assert method.name == name
        assert issubclass(method.buffer, OnlineBuffer)
        assert issubclass(method.strategy, OnlineRehearsal)


def test_an_unknown_method_names_the_choices():
    with pytest.raises(ValueError, match="unknown buffer method 'GSS'.*GSS-Greedy.*FSS-Clust"):
        methods.get("GSS")


# Every keyword option of each buffer, with a value other than its default; the ready
# strategy must hand each one to its buffer.
_PARAMS = [torch.nn.Parameter(torch.zeros(1))]
OPTIONS = {
    "Rand": {},
    "Reservoir": {},
    "GSS-Greedy": {"n": 7, "variant": "paper", "memory_grads": "groups", "gate": "batch",
                   "candidate_draw": "minmax", "group_size": 3, "loss_fn": _loss,
                   "params": _PARAMS},
    "GSS-IQP": {"recent_size": 7, "solver": "exact", "time_limit": 5.0, "restarts": 3,
                "slack": None, "loss_fn": _loss, "params": _PARAMS},
    "GSS-Clust": {"variant": "paper", "recent_size": 7, "growth": 1.5, "loss_fn": _loss,
                  "params": _PARAMS},
    "FSS-Clust": {"variant": "paper", "recent_size": 7, "features": "logits",
                  "squared": True, "growth": 3.0},
    "CBRS": {},
    "CB-GSS": {"n": 7, "victim": "random", "loss_fn": _loss, "params": _PARAMS,
               "score_from": "pass"},
    "GDumb": {},
    "OCS": {"k": 3, "n": 7, "tau": 0.5, "loss_fn": _loss, "params": _PARAMS},
    "GCR": {"recent_size": 7, "lam": 0.1, "positive": False, "per_class": False,
            "class_share": "seen", "loss_fn": _loss, "params": _PARAMS},
    "CSReL": {"refit_every": 7, "refit_steps": 3, "refit_batch_size": 5, "refit_lr": 0.5},
}


def _value(buffer, name):
    return buffer.clustering.growth if name == "growth" else getattr(buffer, name)


@pytest.mark.parametrize("name", methods.NAMES)
def test_ready_strategy_forwards_every_buffer_option(name):
    method = methods.get(name)
    options = OPTIONS[name]
    # The table covers every keyword option the buffer declares (a new one needs a row).
    import inspect
    declared = {p.name for p in inspect.signature(method.buffer).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "seed"}
    assert declared == set(options)
    model, sgd = _model_and_sgd()
    strategy = method.strategy(model=model, optimizer=sgd, mem_size=11, seed=5, **options)
    buffer = strategy.storage_policy
    assert type(buffer) is method.buffer and buffer.max_size == 11
    assert buffer.generator.initial_seed() == 5
    for option, value in options.items():
        assert _value(buffer, option) is value or _value(buffer, option) == value, option


def test_a_misspelt_option_is_refused_with_its_name():
    model, sgd = _model_and_sgd()
    strategy_class = methods.get("GSS-Greedy").strategy
    with pytest.raises(TypeError, match="gat"):
        strategy_class(model=model, optimizer=sgd, mem_size=10, gat="batch")


def test_constrained_strategy_forwards_buffer_options():
    model, sgd = _model_and_sgd()
    strategy = GSSIQPConstrained(model=model, optimizer=sgd, mem_size=9, recent_size=4,
                                 solver="exact", time_limit=2.0, margin=0.25)
    buffer = strategy.storage_policy
    assert (buffer.recent_size, buffer.solver, buffer.time_limit) == (4, "exact", 2.0)
    assert strategy.constrained.margin == 0.25


@pytest.mark.parametrize("name", _builtin(experiments.VARIANT_METHODS))
@pytest.mark.parametrize("variant", ["paper", "authors"])
def test_a_variant_sets_its_presets_and_an_explicit_option_wins(name, variant):
    method = methods.get(name)
    buffer = method.buffer(10, variant=variant)
    preset = method.presets[variant]
    for option, value in preset.items():
        assert _value(buffer, option) == value, option
    option, value = next(iter(preset.items()))
    other = method.presets["paper" if variant == "authors" else "authors"][option]
    if other == value:  # both presets agree on this option: pick a value of its own
        other = 3.0
    assert _value(method.buffer(10, variant=variant, **{option: other}), option) == other


def test_an_unknown_variant_is_refused():
    for name in _builtin(experiments.VARIANT_METHODS):
        with pytest.raises(ValueError, match="variant must be 'paper' or 'authors', got 'x'"):
            methods.get(name).buffer(10, variant="x")


@pytest.mark.parametrize(("settings", "expected"), [
    (dict(method="GSS-IQP", options={"solver": "exact", "time_limit": 5.0, "recent_size": 7}),
     {"solver": "exact", "time_limit": 5.0, "recent_size": 7}),
    (dict(method="GSS-Clust", options={"variant": "paper"}),
     {"growth": 2.0, "variant": "paper"}),
    (dict(method="GSS-Clust", options={"growth": 1.5}), {"growth": 1.5, "variant": "authors"}),
    (dict(method="FSS-Clust", options={"variant": "paper", "squared": True}),
     {"features": "penultimate", "squared": True, "growth": 2.0}),
    (dict(method="GSS-Greedy", options={"n": 4, "variant": "paper"}),
     {"n": 4, "gate": "sample"}),
    (dict(method="OCS", options={"k": 3, "tau": 0.5}), {"k": 3, "tau": 0.5}),
])
def test_run_settings_reach_the_buffer(settings, expected):
    buffer = make_buffer(RunSettings(buffer_size=12, seed=2, **settings))
    assert type(buffer) is methods.get(settings["method"]).buffer
    assert buffer.max_size == 12 and buffer.generator.initial_seed() == 2
    for option, value in expected.items():
        assert _value(buffer, option) == value, option


def test_the_runner_builds_the_users_strategies():
    model, sgd = _model_and_sgd()
    rehearsal = build_strategy(RunSettings(method="GSS-Greedy", replay_batch_size=7),
                               model, sgd)
    assert type(rehearsal) is methods.get("GSS-Greedy").strategy
    assert rehearsal.rehearsal.replay_batch_size == 7
    constrained = build_strategy(RunSettings(method="GSS-IQP", update="constrained",
                                             constraint_margin=0.5), model, sgd)
    assert type(constrained) is GSSIQPConstrained
    assert constrained.constrained.margin == 0.5


class _Newest(OnlineBuffer):
    """A toy policy: keep the newest ``max_size`` samples (oldest slots overwritten)."""

    def _assign(self, rows, model):
        b, m = len(rows), self.max_size
        position = torch.arange(self.n_seen, self.n_seen + b)
        slots = position % m
        slots[: max(0, b - m)] = -1  # a batch larger than the buffer keeps its tail
        return slots, None


class _NewestStrategy(BufferStrategy):
    buffer_class = _Newest


def test_a_new_policy_is_one_class_with_one_decision(tiny_split):
    # Given a policy written against the template alone (one _assign) and its strategy
    model, sgd = _model_and_sgd()
    strategy = _NewestStrategy(model=model, optimizer=sgd, mem_size=25, n_iter=1)
    # When it learns the stream
    strategy.train(online_benchmark(tiny_split, batch_size=10).train_stream)
    # Then the buffer holds exactly the last 25 samples of the stream, as the rule says
    x, y = tiny_split.stream_tensors()
    stored_x, stored_y = strategy.storage_policy.tensors()
    order = torch.arange(len(y) - 25, len(y)) % 25  # slot of each of the last 25 samples
    assert torch.equal(stored_y[order], y[-25:])
    assert torch.equal(stored_x[order], x[-25:])


def test_a_policy_that_breaks_the_storage_invariants_is_refused():
    class Holes(OnlineBuffer):
        def _assign(self, rows, model) -> tuple[Tensor, None]:
            return torch.arange(len(rows)) + 1, None  # slot 0 left empty

    with pytest.raises(RuntimeError, match="hole"):
        Holes(5).add(torch.randn(2, 3), torch.tensor([0, 1]))


def test_a_builtin_that_names_a_class_its_file_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(methods, "BUILTIN", (methods.Builtin("Rand", "rand", "RandomBuffer",
                                                             "Rand"),))
    with pytest.raises(ImportError, match="avalanche_gss.methods.rand has no class "
                                          "RandomBuffer, which the method 'Rand' names"):
        methods._load()


def test_every_method_file_of_the_folder_is_declared_with_each_buffer_it_defines():
    # A method's file added without its line in BUILTIN would never reach the registry:
    # every module of the folder that defines a buffer is one of MODULES, and each buffer
    # it defines (a public OnlineBuffer subclass, its files' shared bases aside) is a
    # method's, with its ready strategy.
    folder = Path(methods.__file__).parent
    defined = {}
    for path in sorted(folder.glob("[!_]*.py")):
        module = importlib.import_module(f"avalanche_gss.methods.{path.stem}")
        buffers = {name for name, obj in vars(module).items()
                   if isinstance(obj, type) and issubclass(obj, OnlineBuffer)
                   and obj.__module__ == module.__name__ and not name.startswith("_")}
        bases = {base.__name__ for name in buffers for base in getattr(module, name).__mro__[1:]}
        if buffers:
            defined[path.stem] = buffers - bases  # a base of the file's buffers is no method
    assert set(defined) == set(methods.MODULES)
    declared = {m.module: set() for m in methods.BUILTIN}
    for m in methods.BUILTIN:
        declared[m.module].add(m.buffer)
    assert defined == declared
    # and what is declared is what the registry holds, exported under the same names
    exported = methods.exported_classes()
    for m in methods.BUILTIN:
        loaded = methods.get(m.name)
        classes = [c for c in (loaded.buffer, loaded.strategy, loaded.constrained) if c]
        assert [c.__name__ for c in classes] == list(m.classes)
        assert all(exported[c.__name__] == c.__module__ for c in classes)
