"""The experiments of ``python -m reproduce``, by name: the package's, then one's own.

:data:`EXPERIMENTS` is a :class:`~avalanche_gss.registry.Registry` of entries that name an
experiment and say in one line what it shows; the command line offers its names (those
registered by ``--import`` modules too). The package's own are :class:`LazyExperiment`
entries: this module imports neither torch nor Avalanche, so ``--help`` answers at once,
and an experiment's module is imported only when it runs. The tables are those of
:data:`~avalanche_gss.reproduce.experiments.protocols.PROTOCOLS`, each protocol naming its
table and its line. A module of one's own
registers an :class:`~avalanche_gss.reproduce.runner.Experiment` with :func:`register`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from avalanche_gss.registry import Registry
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
from avalanche_gss.reproduce.options import Options

__all__ = ["EXPERIMENTS", "ExperimentEntry", "LazyExperiment", "Runnable", "register",
           "table_names"]


class Runnable(Protocol):
    """An experiment as the command line runs it (a :class:`.runner.Experiment`)."""

    name: str

    def run(self, args: Options, argv: Sequence[str] | None = None) -> int:
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
    :param target: ``"module:attribute"``, the :class:`Experiment` object (with ``key``:
        a mapping that holds it).
    :param key: the experiment's key in that mapping; ``None``: the attribute is it.
    """

    summary: str
    target: str
    key: str | None = None

    def load(self) -> Runnable:
        """The experiment, its module imported."""
        module, attribute = self.target.split(":")
        found = getattr(importlib.import_module(module), attribute)
        return found if self.key is None else found[self.key]


EXPERIMENTS: Registry[ExperimentEntry] = Registry("experiment")
"""Every experiment, the package's first, with the line ``--help`` shows for it."""

_HERE = "avalanche_gss.reproduce.experiments"
for _table in PROTOCOLS.values():
    EXPERIMENTS.add(_table.name, LazyExperiment(_table.summary, f"{_HERE}.tables:TABLES",
                                                _table.name), builtin=True)
for _name, _summary, _target in (
    ("figure2", "surrogate vs Monte Carlo solid angle of random vector sets (paper Figure 2)",
     "figure2:FIGURE2_EXPERIMENT"),
    ("figure4", "test accuracy along disjoint MNIST vs GEM, iCaRL, i.i.d. (paper Figure 4a)",
     "figure4:FIGURE4_EXPERIMENT"),
    ("figure5", "GSS-Greedy vs n and vs batch size (paper Figure 5)",
     "figure5:FIGURE5_EXPERIMENT"),
    ("composition", "what each buffer holds along disjoint MNIST (our diagnosis, not the "
     "paper)", "composition:COMPOSITION"),
    ("which-buffer", "which buffer policy for which stream: accuracy beside train time (ours)",
     "which_buffer:WHICH_BUFFER"),
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


def table_names() -> tuple[str, ...]:
    """The table experiments, those that take ``--methods`` with options and ``--retrieval``.

    The paper's (:data:`~avalanche_gss.reproduce.experiments.protocols.PROTOCOLS`), then
    each registered experiment of one's own that runs a protocol (a
    :class:`~avalanche_gss.reproduce.experiments.tables.Table`: it has a ``protocol``).
    """
    return tuple(name for name, entry in EXPERIMENTS.items()
                 if name in PROTOCOLS or getattr(entry, "protocol", None) is not None)
