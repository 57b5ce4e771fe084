"""What a logged run records of its curves: every scalar its metrics emit, as data.

The job (:func:`~avalanche_gss.reproduce.runs.jobs.run_logged_job`) keeps them in its
result's :data:`RESULT_KEY` entry; the reports write them as TensorBoard event files
(:mod:`~avalanche_gss.reproduce.reports.event_logs`).
"""

from __future__ import annotations

from avalanche.evaluation.metric_results import AlternativeValues
from avalanche.logging import BaseLogger

from avalanche_gss.reproduce.json_types import Json

__all__ = ["RESULT_KEY", "ScalarRecorder"]

RESULT_KEY = "tensorboard"
"""The entry of a logged job's result that holds its scalars: ``[[tag, step, value], ...]``."""


class ScalarRecorder(BaseLogger):
    """An Avalanche logger that keeps every scalar it is given, in order.

    What TensorBoard's logger would write (``add_scalar(tag, value, step)``), as data.

    :attr scalars: ``[tag, step, value]`` of each, JSON-ready.
    """

    def __init__(self) -> None:
        super().__init__()
        self.scalars: list[list[Json]] = []

    def log_single_metric(self, name: str, value: object, x_plot: int) -> None:
        """Keep ``value`` under ``name`` at step ``x_plot`` when it is a number.

        :param name: the metric's full name (the TensorBoard tag).
        :param value: its value; anything but a number (an image, a tensor) is left out,
            as TensorBoard's logger would write it otherwise.
        :param x_plot: the step.
        """
        if isinstance(value, AlternativeValues):
            value = value.best_supported_value(float, int)
        if isinstance(value, (float, int)):
            self.scalars.append([name, int(x_plot), float(value)])
