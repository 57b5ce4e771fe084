"""Helpers shared by test files: each is defined here once and imported where it is used.

Test files import them as ``from helpers import ...``: ``tests/`` is on ``sys.path`` because
``tests/conftest.py`` is a root-level conftest (pytest's default ``prepend`` import mode puts
its folder first). The gradient engine's oracle and models are in :mod:`helpers.gradients`.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from avalanche.core import SupervisedPlugin
from torch import Tensor, nn

from avalanche_gss.gradients import per_sample_grad_loop
from avalanche_gss.methods.reservoir import ReservoirBuffer
from avalanche_gss.models import MLP
from avalanche_gss.streams import TensorExperience

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"  # the first 8 bytes of every PNG file
D, C = 12, 4  # input features, classes of the small scoring model: keeps float64 loops cheap


def seeded(seed: int = 0) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def experiences(x: Tensor, y: Tensor, size: int = 10) -> list[TensorExperience]:
    """``x, y`` cut into online experiences of ``size`` samples, in order."""
    return [TensorExperience(x[i:i + size], y[i:i + size]) for i in range(0, len(y), size)]


def digits_mlp(seed: int = 0) -> MLP:
    """The library's default MLP (784 inputs, two hidden layers of 100, 10 classes), seeded."""
    torch.manual_seed(seed)
    return MLP()


def small_mlp(seed: int = 0) -> MLP:
    """The small scoring model (``D`` inputs, 16 hidden units, ``C`` classes), seeded."""
    torch.manual_seed(seed)
    return MLP(input_size=D, hidden_sizes=(16,), num_classes=C)


def small_data(n: int, seed: int) -> tuple[Tensor, Tensor]:
    """``n`` Gaussian samples of ``D`` features and uniform labels among ``C`` classes."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, D, generator=g), torch.randint(0, C, (n,), generator=g)


def loop_grads(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """Per-sample gradients from the float64 loop oracle, on a copy of ``model``."""
    return per_sample_grad_loop(copy.deepcopy(model).double(), x.double(), y)


def exactly(message: str) -> str:
    """A ``pytest.raises(match=...)`` pattern that matches ``message`` and nothing more."""
    return "^" + re.escape(message) + "$"


def sgd(model: nn.Module) -> torch.optim.SGD:
    """Plain SGD at the paper's learning rate, 0.05."""
    return torch.optim.SGD(model.parameters(), lr=0.05)


def image_batches(labels: Tensor, seed: int, batch: int = 10) -> Iterator[tuple[Tensor, Tensor]]:
    """Batches of Gaussian 1x28x28 images with the given labels, in order, seeded."""
    g = torch.Generator().manual_seed(seed)
    for k in range(len(labels) // batch):
        yield torch.randn(batch, 1, 28, 28, generator=g), labels[batch * k : batch * k + batch]


def filled_reservoir(n: int = 30, seed: int = 0, dim: int = 4, classes: int = 3
                     ) -> ReservoirBuffer:
    """A reservoir buffer of ``n`` slots, full of Gaussian samples of ``dim`` features."""
    buf = ReservoirBuffer(n, seed=seed)
    g = torch.Generator().manual_seed(seed)
    buf.add(torch.randn(n, dim, generator=g), torch.randint(0, classes, (n,), generator=g))
    return buf


class Tiny(nn.Module):
    """4 features -> ``hidden`` ReLU units -> 3 classes, with a ``features`` method."""

    def __init__(self, hidden=5):
        super().__init__()
        self.body = nn.Linear(4, hidden)
        self.classifier = nn.Linear(hidden, 3)

    def features(self, x):
        return torch.relu(self.body(x))

    def forward(self, x):
        return self.classifier(self.features(x))


def benchmark_script(name: str, register: bool = False) -> ModuleType:
    """``benchmarks/<name>.py`` loaded as module ``name`` (the scripts are not a package).

    :param register: also put it in ``sys.modules`` under ``name`` unless one is there
        (for a script whose objects must be found by module name, e.g. dataclasses).
    """
    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def importable_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                      source: str) -> ModuleType:
    """Module ``name`` written from ``source`` and importable here and in child processes.

    Spawned sweep workers and submitit jobs import job functions by module name, so the
    module's folder goes on ``sys.path`` and on ``PYTHONPATH`` (both undone after the test).
    """
    mod_dir = tmp_path / "mod"
    mod_dir.mkdir()
    (mod_dir / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(mod_dir))
    path = os.pathsep.join(filter(None, [str(mod_dir), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    return importlib.import_module(name)


def sigkill() -> None:
    """SIGKILL this process: no cleanup, no ``finally``, as when a machine dies."""
    os.kill(os.getpid(), signal.SIGKILL)


class StopAfter(SupervisedPlugin):
    """Call ``stop`` (it raises or kills the process) once ``k`` experiences were learnt.

    The strategy's buffer is updated by then: the call comes after the ``k``-th experience's
    ``after_training_exp`` of the plugins before this one.
    """

    def __init__(self, k: int, stop: Callable[[], None]):
        super().__init__()
        self.k, self.seen, self.stop = k, 0, stop

    def after_training_exp(self, strategy, **kwargs):
        self.seen += 1
        if self.seen == self.k:
            self.stop()


def trained_strategy(strategy_class: type, split, mem_size: int = 40, batches: int = 12):
    """A ready strategy (``n_iter=1``, seed 0) on a seeded :class:`MLP` with :func:`sgd`, after
    learning the first ``batches`` online batches of 10 samples of ``split``."""
    from avalanche_gss.streams import online_benchmark

    torch.manual_seed(0)
    model = MLP()
    strategy = strategy_class(model=model, optimizer=sgd(model), mem_size=mem_size, n_iter=1,
                              seed=0)
    strategy.train(online_benchmark(split, batch_size=10).train_stream[:batches])
    return strategy
