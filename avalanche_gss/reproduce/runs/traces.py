"""A run's buffer composition at every task end, as a job records it (``trace``).

:func:`task_end_trace` is the plugin a job attaches; :func:`trace_records` its records
once the run ended (:func:`~avalanche_gss.reproduce.runs.jobs.run_job` puts them in the
result's ``extras["trace"]``).
"""

from __future__ import annotations

import math
from typing import TypedDict

from avalanche_gss.diagnostics import BufferTrace
from avalanche_gss.reproduce.json_types import JsonObject
from avalanche_gss.streams import TaskSplit

__all__ = ["TraceRecord", "task_end_trace", "trace_records"]


class TraceRecord(TypedDict, total=False):
    """One record of a :class:`BufferTrace` (:meth:`BufferTrace.snapshot`), as JSON.

    :param samples: the stream's training samples seen so far.
    :param size: the samples the buffer stores.
    :param admitted_share: the share of the samples offered since the previous record that
        the buffer took in.
    :param task_counts: how many stored samples come from each task.
    :param score_q10_q50_q90: the stored samples' score quantiles (a method that scores).
    :param admitted_in_task: the share of its task's samples the buffer took in (added by
        :func:`~avalanche_gss.reproduce.experiments.composition.at_task_ends`).
    """

    samples: int
    size: int
    admitted_share: float
    task_counts: list[int]
    score_q10_q50_q90: list[float]
    admitted_in_task: float


def task_end_trace(split: TaskSplit) -> BufferTrace:
    """A :class:`BufferTrace` whose records fall on every task end of ``split``.

    It records every ``gcd`` of the task sizes (e.g. every 800 samples on 5 tasks of 800,
    every 80 on Table 4's 800/80 sequences), so each task end is a record.

    :param split: a class-disjoint split (the trace reads a sample's task from its label).
    """
    return BufferTrace(None, split.task_classes, every=math.gcd(*split.train_sizes))


def trace_records(trace: BufferTrace) -> list[JsonObject]:
    """The trace's records after a run, ending with the buffer at the end of the stream.

    :param trace: a trace that watched a finished run.
    """
    buf = trace.buffer
    if buf is not None and (not trace.records or trace.records[-1]["samples"] != buf.n_seen):
        trace.records.append(trace.snapshot())
    return trace.records
