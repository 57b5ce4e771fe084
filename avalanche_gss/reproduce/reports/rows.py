"""Rows of a report: the runs of one method, buffer size and row keys, grouped over seeds.

:func:`group_rows` turns ``(row keys, result)`` pairs into :class:`Row` objects;
:meth:`Row.to_dict` is the row as every report's JSON records it (:func:`rows_from_runs`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from avalanche_gss.reproduce.json_types import Json, JsonObject, Scalar
from avalanche_gss.reproduce.runs.planning import RowKeys
from avalanche_gss.reproduce.runs.training import RunResult

__all__ = ["DIVERGED_SHARE", "Row", "RowKeys", "diverged", "group_rows", "rows_from_runs"]

DIVERGED_SHARE = 0.1
"""A run that skipped more than this share of its training iterations has diverged."""


def _count(value: object) -> int:
    """A count an ``extras`` record holds (0 where it holds none)."""
    return int(value) if isinstance(value, (int, float)) else 0


def diverged(extras: Mapping[str, object]) -> bool:
    """Whether a run skipped more than :data:`DIVERGED_SHARE` of its iterations.

    :param extras: the run's ``extras`` (``skipped_steps``, ``train_iterations``).
    """
    skipped = _count(extras.get("skipped_steps", 0))
    iterations = _count(extras.get("train_iterations", 0))
    return skipped > 0 and skipped > DIVERGED_SHARE * max(iterations, 1)


def _std(values: Sequence[float]) -> float | None:
    """Population std; ``None`` for fewer than two values (one value has no spread)."""
    return statistics.pstdev(values) if len(values) > 1 else None


@dataclass
class Row:
    """The runs of one method at one buffer size and row keys, one entry per seed.

    :param method: the method's name.
    :param buffer_size: the buffer size ``M``.
    :param keys: what tells the row from its siblings beyond method and buffer size
        (e.g. ``{"sequence": 2}``, ``{"variant": "authors"}``), in the order they show.
    :param seeds: the seeds, ascending; the lists below follow them.
    :param task_accuracy: each run's final accuracy per task.
    :param avg: each run's final average accuracy.
    :param train_seconds: each run's training time.
    :param extras: the runs' ``extras``, those that have any.
    :param skipped_steps: each run's skipped steps, when the runs count them.
    :param diverged: whether each run diverged (:func:`diverged`), when they count steps.
    """

    method: str
    buffer_size: int
    keys: dict[str, Scalar]
    seeds: list[int]
    task_accuracy: list[list[float]]
    avg: list[float]
    train_seconds: list[float]
    extras: list[JsonObject] = field(default_factory=list)
    skipped_steps: list[int] | None = None
    diverged: list[bool] | None = None

    @property
    def avg_mean(self) -> float:
        """The mean of :attr:`avg` over seeds."""
        return statistics.fmean(self.avg)

    @property
    def avg_std(self) -> float | None:
        """The population std of :attr:`avg` over seeds; ``None`` with one seed."""
        return _std(self.avg)

    @property
    def any_diverged(self) -> bool:
        """Whether a run of the row diverged."""
        return any(self.diverged or ())

    def get(self, key: str) -> Scalar:
        """A row key's value, ``None`` where the row has no such key.

        :param key: a row key (``"variant"``, ``"sequence"``...).
        """
        return self.keys.get(key)

    def to_dict(self) -> JsonObject:
        """The row as reports record it.

        ``method``, ``buffer_size``, the keys, ``seeds``, ``task_accuracy``, ``avg``,
        ``avg_mean``, ``avg_std``, ``train_seconds`` and, where there are any, ``extras``,
        ``skipped_steps`` and ``diverged``.
        """
        row: JsonObject = {
            "method": self.method, "buffer_size": self.buffer_size, **self.keys,
            "seeds": self.seeds, "task_accuracy": self.task_accuracy, "avg": self.avg,
            "avg_mean": self.avg_mean, "avg_std": self.avg_std,
            "train_seconds": self.train_seconds,
        }
        if self.extras:
            row["extras"] = list[Json](self.extras)
        if self.skipped_steps is not None:
            row["skipped_steps"] = list[Json](self.skipped_steps)
            row["diverged"] = list[Json](self.diverged or [])
        return row


def warning_lines(rows: Sequence[RowT], label: Callable[[RowT], str]) -> list[str]:
    """The warnings the rows' runs reported (each run's ``extras["warnings"]``).

    For a report: a heading and one line per warning, naming its row; none without any.

    :param rows: the report's rows (:meth:`Row.to_dict`, with ``extras`` where any).
    :param label: a function of a row: the row's name in the lines.
    """
    lines = []
    for row in rows:
        runs = row.get("extras", [])
        for extras in runs if isinstance(runs, list) else []:
            warnings = extras.get("warnings", []) if isinstance(extras, Mapping) else []
            lines += [f"- {label(row)}: {w}" for w in
                      (warnings if isinstance(warnings, list) else [])]
    return ["", "Warnings of the runs:", "", *lines] if lines else []


R = TypeVar("R", bound=Row)
RowT = TypeVar("RowT", bound=Mapping[str, object])


@overload
def group_rows(runs: Sequence[tuple[RowKeys, RunResult]]) -> list[Row]: ...


@overload
def group_rows(runs: Sequence[tuple[RowKeys, RunResult]], row: type[R]) -> list[R]: ...


def group_rows(runs: Sequence[tuple[RowKeys, RunResult]],
               row: type[Row] = Row) -> list[Any]:
    """Group runs into rows, one per (method, buffer size, row keys), in first-seen order.

    :param runs: ``(row_keys, result)`` pairs; ``row_keys`` holds the keys that tell a
        row from its siblings beyond method and buffer size (e.g. ``{"sequence": 2}``).
    :param row: the row class to build (a :class:`Row` subclass, e.g. with more outputs).
    :raises ValueError: a seed given twice for the same row.
    """
    groups: dict[tuple[object, ...], list[tuple[RowKeys, RunResult]]] = {}
    for keys, result in runs:
        ident = (result.settings.method, result.settings.buffer_size, *sorted(keys.items()))
        groups.setdefault(ident, []).append((keys, result))
    rows = []
    for members in groups.values():
        members.sort(key=lambda m: m[1].settings.seed)
        seeds = [r.settings.seed for _, r in members]
        if len(set(seeds)) != len(seeds):
            repeated = sorted({s for s in seeds if seeds.count(s) > 1})
            first_settings = members[0][1].settings
            raise ValueError(f"{first_settings.method} at M={first_settings.buffer_size}: "
                             f"seed(s) {repeated} given more than once; each seed must count "
                             "once in the mean and std")
        first_keys, first = members[0]
        counted = any("skipped_steps" in r.extras for _, r in members)
        rows.append(row(
            method=first.settings.method, buffer_size=first.settings.buffer_size,
            keys=dict(first_keys), seeds=seeds,
            task_accuracy=[r.task_accuracy for _, r in members],
            avg=[r.avg for _, r in members],
            train_seconds=[r.train_seconds for _, r in members],
            extras=[r.extras for _, r in members if r.extras],
            skipped_steps=([r.skipped_steps for _, r in members]
                           if counted else None),
            diverged=[diverged(r.extras) for _, r in members] if counted else None))
    return rows


def rows_from_runs(runs: Sequence[tuple[RowKeys, RunResult]]) -> list[JsonObject]:
    """:func:`group_rows`' rows as reports record them (:meth:`Row.to_dict`).

    :param runs: ``(row_keys, result)`` pairs (see :func:`group_rows`).
    """
    return [r.to_dict() for r in group_rows(runs)]

