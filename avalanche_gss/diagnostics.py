"""What a buffer policy did over a run: composition, scores and admissions over time.

:class:`BufferTrace` is a plugin that records, every ``every`` training samples, how many
stored samples belong to each task, the quantiles of the stored scores (GSS-Greedy), and
the share of the samples offered since the last record that the buffer took in. It reads
the task of a sample from its label (class-disjoint streams), never shown to the learner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from avalanche.core import SupervisedPlugin

from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.metrics import class_task_map, count_by_task, find_buffer

__all__ = ["BufferTrace"]


class BufferTrace(SupervisedPlugin):
    """Record the buffer's state every ``every`` training samples.

    Add it after the rehearsal plugin (the buffer has then seen the experience).

    :param buffer: the buffer to watch; found on the strategy when training starts if
        ``None`` (see :func:`~avalanche_gss.metrics.find_buffer`).
    :param task_classes: per task its classes (``TaskSplit.task_classes``), to count
        stored samples per task.
    :param every: training samples between records.
    """

    supports_distributed = False

    def __init__(self, buffer: OnlineBuffer | None, task_classes: Sequence[Sequence[int]],
                 every: int = 400) -> None:
        super().__init__()
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.buffer = buffer
        self.every = every
        self.task_of_class = class_task_map(task_classes)
        self.n_tasks = len(task_classes)
        self.records: list[dict[str, Any]] = []
        self._seen_at_record = 0
        self._admitted = 0

    def before_training(self, strategy: Any, **kwargs: Any) -> None:
        """Find the buffer on the strategy if none was given."""
        if self.buffer is None:
            self.buffer = find_buffer(strategy)

    def after_training_exp(self, strategy: Any, **kwargs: Any) -> None:
        """Count admissions; record when ``every`` samples have passed."""
        buf = self.buffer
        assert buf is not None
        last = getattr(buf, "last_slots", None)
        if last is not None:
            self._admitted += int((last >= 0).sum())
        if buf.n_seen - self._seen_at_record >= self.every:
            self.records.append(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """The buffer's state now, as a JSON-ready dict."""
        buf = self.buffer
        if buf is None:
            raise ValueError("no buffer yet: pass one, or train first")
        record: dict[str, Any] = {"samples": buf.n_seen, "size": len(buf)}
        offered = buf.n_seen - self._seen_at_record
        record["admitted_share"] = self._admitted / offered if offered else 0.0
        self._seen_at_record, self._admitted = buf.n_seen, 0
        record["task_counts"] = [0] * self.n_tasks
        if len(buf):
            _, y = buf.tensors()
            counts = count_by_task(y.tolist(), self.task_of_class)  # unknown (-1) left out
            record["task_counts"] = [counts.get(task, 0) for task in range(self.n_tasks)]
            if buf.scores is not None and getattr(buf, "scored", False):
                scores = buf.scores[: len(buf)].float().cpu()
                q = torch.quantile(scores, torch.tensor([0.1, 0.5, 0.9]))
                record["score_q10_q50_q90"] = [round(float(v), 4) for v in q]
        return record
