"""``which-buffer`` as an entry of the experiment registry.

The experiment keeps its own pipeline (:func:`~.which_buffer.which_buffer`): this adapter
runs it for the registry's :class:`~avalanche_gss.reproduce.runner.Experiment` interface.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from avalanche_gss.reproduce.json_types import JsonObject
from avalanche_gss.reproduce.reports.report import Report
from avalanche_gss.reproduce.runner import Experiment, Rendered

__all__ = ["WHICH_BUFFER", "WhichBuffer"]


class WhichBuffer(Experiment[None]):
    """``which-buffer``: its :meth:`run` is :func:`~.which_buffer.which_buffer`."""

    def plan(self, args: argparse.Namespace) -> None:
        """Not used: :meth:`run` runs the whole experiment.

        :param args: the parsed command line.
        """
        raise NotImplementedError("which-buffer runs through its own pipeline")

    def report(self, args: argparse.Namespace, argv: Sequence[str] | None, plan: None,
               results: Sequence[JsonObject]) -> Report:
        """Not used: :meth:`run` runs the whole experiment.

        :param args: the parsed command line.
        :param argv: the command line.
        :param plan: the plan.
        :param results: the runs' results.
        """
        raise NotImplementedError("which-buffer runs through its own pipeline")

    def render(self, report: Report, plan: None, paths: Mapping[str, str]) -> Rendered:
        """Not used: :meth:`run` runs the whole experiment.

        :param report: the report.
        :param plan: the plan.
        :param paths: the output files.
        """
        raise NotImplementedError("which-buffer runs through its own pipeline")

    def run(self, args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
        """Run the comparison; write and print its outputs; the exit status.

        :param args: the parsed command line.
        :param argv: the command line (for the record).
        """
        from avalanche_gss.reproduce.experiments.which_buffer import which_buffer

        return which_buffer(args, argv)


WHICH_BUFFER = WhichBuffer("which-buffer", "", stem="which_buffer")
"""The ``which-buffer`` experiment."""
