"""A run's buffer composition at every task end, as a job records it (``trace``).

:func:`task_end_trace` is the plugin a job attaches; :func:`trace_records` its records
once the run ended (:func:`~avalanche_gss.reproduce.runs.jobs.run_job` puts them in the
result's ``extras["trace"]``).
"""

from __future__ import annotations

import math

from avalanche_gss.diagnostics import BufferTrace
from avalanche_gss.reproduce.json_types import JsonObject
from avalanche_gss.streams import TaskSplit

__all__ = ["task_end_trace", "trace_records"]


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
