"""The experiments of ``python -m reproduce``, by name: the package's, then one's own.

:data:`EXPERIMENTS` is a :class:`~avalanche_gss.registry.Registry` of entries that name an
experiment and say in one line what it shows; the command line offers its names (those
registered by ``--import`` modules too). The package's own are :class:`LazyExperiment`
entries: this module imports neither torch nor Avalanche, so ``--help`` answers at once,
and an experiment's module is imported only when it runs. A module of one's own
registers an :class:`~avalanche_gss.reproduce.runner.Experiment` with :func:`register`.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from avalanche_gss.registry import Registry

__all__ = ["EXPERIMENTS", "ExperimentEntry", "LazyExperiment", "Runnable", "register"]


class Runnable(Protocol):
    """An experiment as the command line runs it (a :class:`.runner.Experiment`)."""

    name: str

    def run(self, args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
        """Run it on the parsed command line; the exit status.

        :param args: the parsed command line.
        :param argv: the command line (for the record).
        """


class ExperimentEntry(Protocol):
    """What the registry holds: a line for ``--help`` and the experiment itself."""

    @property
    def summary(self) -> str:
        """One line: what the experiment shows."""

    def load(self) -> Runnable:
        """The experiment (its module imported)."""


@dataclass(frozen=True)
class LazyExperiment:
    """One of the package's experiments, imported only when it runs.

    :param summary: one line: what it shows.
    :param target: ``"module:attribute"``, the :class:`Experiment` object.
    """

    summary: str
    target: str

    def load(self) -> Runnable:
        """The experiment, its module imported."""
        module, attribute = self.target.split(":")
        return getattr(importlib.import_module(module), attribute)


EXPERIMENTS: Registry[ExperimentEntry] = Registry("experiment")
"""Every experiment, the package's first, with the line ``--help`` shows for it."""

_HERE = "avalanche_gss.reproduce.experiments"
for _name, _summary, _target in (
    ("table1", "disjoint MNIST, M = 300/400/500, average accuracy (paper Table 1)",
     "tables:TABLE1"),
    ("table2", "permuted MNIST, M = 300 (paper Table 2)", "tables:TABLE2"),
    ("table3", "disjoint CIFAR-10, M = 1000, ResNet-18 (paper Table 3)", "tables:TABLE3"),
    ("table4", "imbalanced disjoint MNIST, M = 300, five sequences (paper Table 4)",
     "tables:TABLE4"),
    ("blurry", "blurry disjoint CIFAR-10, M = 500 (paper appendix)", "tables:BLURRY"),
    ("constrained", "GSS-IQP constrained vs rehearsal update (paper appendix C)",
     "tables:CONSTRAINED"),
    ("figure2", "surrogate vs Monte Carlo solid angle of random vector sets (paper Figure 2)",
     "figure2:FIGURE2_EXPERIMENT"),
    ("figure4", "test accuracy along disjoint MNIST vs GEM, iCaRL, i.i.d. (paper Figure 4a)",
     "figure4:FIGURE4_EXPERIMENT"),
    ("figure5", "GSS-Greedy vs n and vs batch size (paper Figure 5)",
     "figure5:FIGURE5_EXPERIMENT"),
    ("composition", "what each buffer holds along disjoint MNIST (our diagnosis, not the "
     "paper)", "composition:COMPOSITION"),
    ("which-buffer", "which buffer policy for which stream: accuracy beside train time (ours)",
     "which_buffer_entry:WHICH_BUFFER"),
):
    EXPERIMENTS.add(_name, LazyExperiment(_summary, f"{_HERE}.{_target}"), builtin=True)


E = TypeVar("E", bound=ExperimentEntry)


def register(name: str, experiment: E, *, replace: bool = True) -> E:
    """Register an experiment of one's own under ``name``; return it.

    Its module, given to ``--import``, makes ``name`` an experiment of the command line.

    :param name: the name the command line runs it by (not one of the package's).
    :param experiment: the experiment
        (:class:`~avalanche_gss.reproduce.runner.Experiment`: its ``summary`` is its
        ``--help`` line).
    :param replace: allow the name to be registered again (the module imported twice).
    :raises ValueError: an empty name, or one of the package's experiments.
    """
    experiment.load().name = name
    EXPERIMENTS.add(name, experiment, replace=replace)
    return experiment
