"""Streams by name: each a :class:`StreamDefinition` that builds a :class:`TaskSplit`.

:data:`REGISTRY` maps a stream's name to its definition: this package's ``disjoint``,
``permuted``, ``imbalanced`` and ``blurry`` (``disjoint`` with blurred boundaries,
:func:`blurred`), then those registered from code of one's own with
:func:`register_stream` (a module given to ``avalanche-gss --import``)::

    from avalanche_gss.streams import REGISTRY, gradual_drift, register_stream

    register_stream("gradual", gradual_drift(REGISTRY["disjoint"], window=0.5))

A definition builds its split from an :class:`~avalanche_gss.streams.arrays.ArrayDataset`, a
seed and its options (``REGISTRY["disjoint"].build(data, seed=0, samples_per_task=50)``)
and describes itself: a one-line :attr:`~StreamDefinition.description` and
:attr:`~StreamDefinition.facts` for reports. Transforms (:func:`blurred`,
:func:`gradual_drift`) wrap a definition into a new one, so they compose.

Importing this module imports neither torch nor the stream generators: they are
imported when a stream is built, so that a command line can list the names at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from avalanche_gss.registry import Registry

if TYPE_CHECKING:
    from ._split import TaskSplit
    from .datasets import ArrayDataset

__all__ = ["BLURRY_KEEP", "REGISTRY", "OptionValue", "StreamDefinition", "blurred",
           "gradual_drift", "register_stream"]

OptionValue = int | float | str | bool | None
"""A stream option's value, or a fact's: a JSON scalar (a job's config records it)."""

BLURRY_KEEP = 0.9
"""Share of its own samples each task keeps in the ``blurry`` stream (paper appendix: 90%)."""


@dataclass(frozen=True)
class StreamDefinition:
    """A stream: how it builds its task split from data, and what it says of itself.

    :param build_split: ``build_split(data, seed=..., **options)`` returns the
        :class:`~avalanche_gss.streams.TaskSplit` (every option of :attr:`options` is
        passed, by name).
    :param description: one line saying what the stream is.
    :param options: the options it takes, with their defaults.
    :param facts: what a report states of it (``class_disjoint``, ``blur``: the share
        each task keeps, ``drift_window``...), beside the split's own ``protocol``.
    :raises ValueError: a description that is empty or not one line.
    """

    build_split: Callable[..., TaskSplit]
    description: str
    options: Mapping[str, OptionValue] = field(default_factory=dict)
    facts: Mapping[str, OptionValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not callable(self.build_split):
            raise TypeError(f"build_split must be callable, got {self.build_split!r}")
        if not isinstance(self.description, str) or not self.description.strip() \
                or "\n" in self.description:
            raise ValueError("a stream's description must be one non-empty line, got "
                             f"{self.description!r}")

    def resolve(self, options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
        """Its default options, replaced by ``options``.

        :param options: options to set (names among :attr:`options`).
        :raises ValueError: an option it does not take, in one line naming it and those it
            takes.
        """
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(f"stream option(s) {', '.join(map(repr, unknown))} unknown to "
                             f"{self.description!r}; it takes "
                             f"{', '.join(self.options) or 'none'}")
        return {**self.options, **options}

    def build(self, data: ArrayDataset, *, seed: int = 0, **options: OptionValue) -> TaskSplit:
        """Build the stream's split of ``data``.

        :param data: the dataset.
        :param seed: seeds every random choice of the stream.
        :param options: options that replace its defaults (:meth:`resolve`).
        :raises TypeError: ``build_split`` returned something other than a ``TaskSplit``,
            in one line naming its type.
        """
        from ._split import TaskSplit

        split = self.build_split(data, seed=seed, **self.resolve(options))
        if not isinstance(split, TaskSplit):
            raise TypeError(f"its build_split returned a {type(split).__name__}, not an "
                            "avalanche_gss.streams.TaskSplit")
        return split

    def describe(self) -> str:
        """One line: the description, then its default options."""
        settings = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{self.description} ({settings})" if settings else self.description


def _disjoint(data: ArrayDataset, **options: OptionValue) -> TaskSplit:
    from .disjoint import disjoint_tasks

    return disjoint_tasks(data, **cast("dict[str, Any]", options))  # each checks its own


def _permuted(data: ArrayDataset, **options: OptionValue) -> TaskSplit:
    from .permuted import permuted_tasks

    return permuted_tasks(data, **cast("dict[str, Any]", options))  # each checks its own


def _imbalanced(data: ArrayDataset, **options: OptionValue) -> TaskSplit:
    from .imbalanced import imbalanced_tasks

    return imbalanced_tasks(data, **cast("dict[str, Any]", options))  # each checks its own


def _transformed(definition: StreamDefinition, option: str, value: OptionValue
                 ) -> dict[str, OptionValue]:
    """``definition``'s options and the transform's ``option``, refused if it has it."""
    if option in definition.options:
        raise ValueError(f"{definition.description!r} already takes option {option!r}: "
                         "apply this transform to it once")
    return {**definition.options, option: value}


def blurred(definition: StreamDefinition, keep: float = BLURRY_KEEP) -> StreamDefinition:
    """``definition`` with blurred task boundaries (:func:`.blurry_tasks`).

    Its split is built, then each task keeps the share ``keep`` of its samples and swaps the
    rest with the other tasks, seeded by the same seed. The new definition takes the
    option ``keep`` besides ``definition``'s.

    :param definition: the stream to blur.
    :param keep: default share of its samples each task keeps, in ``(0, 1]``.
    :raises ValueError: ``keep`` out of range, or ``definition`` takes ``keep`` already.
    """
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep <= 1:
        raise ValueError(f"keep must be a number in (0, 1], got {keep!r}")
    options = _transformed(definition, "keep", keep)

    def build(data: ArrayDataset, *, seed: int, keep: float, **rest: OptionValue) -> TaskSplit:
        from .blurry import blurry_tasks

        return blurry_tasks(definition.build(data, seed=seed, **rest), keep=keep, seed=seed)

    return StreamDefinition(
        build, f"{definition.description}; boundaries blurred: each task keeps {keep:.0%} of "
        "its samples and takes the rest from the other tasks", options,
        {**definition.facts, "class_disjoint": False, "blur": keep})


def gradual_drift(definition: StreamDefinition, window: float = 0.5) -> StreamDefinition:
    """``definition`` drifting gradually from task to task (:func:`.gradual_tasks`).

    Its split is built, then around each boundary the two tasks blend over a window, the
    next task's share growing linearly, seeded by the same seed. The new definition takes
    the option ``window`` besides ``definition``'s.

    :param definition: the stream to blend.
    :param window: default share of the smaller neighbouring task that blends, in ``(0, 1]``.
    :raises ValueError: ``window`` out of range, or ``definition`` takes ``window`` already.
    """
    from .gradual import check_window

    options = _transformed(definition, "window", check_window(window))

    def build(data: ArrayDataset, *, seed: int, window: float, **rest: OptionValue
              ) -> TaskSplit:
        from .gradual import gradual_tasks

        return gradual_tasks(definition.build(data, seed=seed, **rest), window=window,
                             seed=seed)

    return StreamDefinition(
        build, f"{definition.description}; each task drifts into the next over "
        f"{window:.0%} of the smaller task's samples", options,
        {**definition.facts, "class_disjoint": False, "drift_window": window})


REGISTRY: Registry[StreamDefinition] = Registry("stream")
"""The streams by name: this package's, then those of :func:`register_stream`."""


def register_stream(name: str, definition: StreamDefinition, *, replace: bool = False
                    ) -> StreamDefinition:
    """Register a stream of one's own under ``name``; return its definition.

    From then on the name works wherever a stream's does: ``REGISTRY[name]``, and
    ``avalanche-gss --import FILE which-buffer --streams NAME`` with the module that calls
    this given to ``--import`` (worker processes import it again before their runs).

    :param name: the stream's name.
    :param definition: its definition (:class:`StreamDefinition`, or a transform's).
    :param replace: register a name taken by another stream of one's own again.
    :raises TypeError: ``definition`` is not a :class:`StreamDefinition`.
    :raises ValueError: an empty name, or one taken (this package's names always).
    """
    if not isinstance(definition, StreamDefinition):
        raise TypeError(f"stream {name!r}: register_stream takes a StreamDefinition, got "
                        f"{type(definition).__name__}")
    return REGISTRY.add(name, definition, replace=replace)


_DISJOINT = REGISTRY.add("disjoint", StreamDefinition(
    _disjoint, "class-disjoint tasks: 5 tasks of 2 consecutive classes, a random subset of "
    "each task's training samples (paper Sec. 5)",
    {"n_tasks": 5, "classes_per_task": 2, "samples_per_task": 1000},
    {"class_disjoint": True}), builtin=True)
REGISTRY.add("permuted", StreamDefinition(
    _permuted, "permuted tasks: every class under one fixed pixel permutation per task, "
    "task 0 unpermuted (paper Sec. 5)",
    {"n_tasks": 10, "samples_per_task": 1000, "identity_first": True,
     "permutation_seed": None},
    {"class_disjoint": False}), builtin=True)
REGISTRY.add("imbalanced", StreamDefinition(
    _imbalanced, "imbalanced class-disjoint tasks: task `sequence` has `major` samples, "
    "the others `minor` (paper Table 4)",
    {"sequence": 1, "major": 2000, "minor": 200, "n_tasks": 5, "classes_per_task": 2},
    {"class_disjoint": True}), builtin=True)
REGISTRY.add("blurry", blurred(_DISJOINT, BLURRY_KEEP), builtin=True)
