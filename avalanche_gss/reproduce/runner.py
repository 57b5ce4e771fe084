"""One runner for every experiment: plan, sweep, report, write.

An :class:`Experiment` is a small object: :meth:`~Experiment.plan` lists its runs (its
jobs, typed: :class:`~avalanche_gss.reproduce.runs.planning.Job`),
:meth:`~Experiment.report` turns their results into a
:class:`~avalanche_gss.reproduce.reports.report.Report`, :meth:`~Experiment.render` into
its CSV and Markdown (and the figures it draws). :func:`run` does the rest for each: the
sweep (cached, resumable: :func:`~avalanche_gss.reproduce.runs.planning.sweep`), the
files (``OUT/<stem>.json``, ``.csv``, ``.md``, each written atomically) and what the
command prints. Experiments are found by name in
:data:`~avalanche_gss.reproduce.experiments.registry.EXPERIMENTS`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from avalanche_gss.reproduce.json_types import Json, JsonObject
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.program import prog_of
from avalanche_gss.reproduce.reports.outputs import show_outputs
from avalanche_gss.reproduce.reports.report import Report
from avalanche_gss.reproduce.reports.writing import output_paths, write_report
from avalanche_gss.reproduce.runs.jobs import run_job, run_logged_job
from avalanche_gss.reproduce.runs.planning import Job, sweep

__all__ = ["Experiment", "Rendered", "Stages", "run"]

P = TypeVar("P")

JobFunction = Callable[[Mapping[str, Json]], JsonObject]
"""A sweep's module-level job function: a job's config to its result."""

Stages = Generator[Sequence[Job], Sequence[JsonObject], None]
"""An experiment's stages (:meth:`Experiment.stages`): it yields a stage's jobs and
receives their results, in order, before it plans the next."""


@dataclass
class Rendered:
    """An experiment's report as text, and the other files it wrote.

    :param markdown: the ``.md`` file.
    :param csv: the ``.csv`` file (``None``: the experiment writes none).
    :param files: the other files written (a figure), in the order they are listed.
    """

    markdown: str
    csv: str | None
    files: dict[str, str] = field(default_factory=dict)


class Experiment(ABC, Generic[P]):
    """An experiment: what it plans, how it reports, how its report reads.

    :param name: its name on the command line (and its cache folder under ``--out``).
    :param summary: one line: what it shows (``--help``).
    :param stem: its output files' stem (default: ``name``).
    """

    def __init__(self, name: str, summary: str, stem: str | None = None) -> None:
        self.name = name
        self.summary = summary
        self._stem = stem

    @property
    def stem(self) -> str:
        """The output files' stem: ``OUT/<stem>.json``."""
        return self._stem or self.name

    def load(self) -> Experiment[P]:
        """The experiment itself (the registry's entries load theirs)."""
        return self

    @abstractmethod
    def plan(self, args: Options) -> P:
        """What to run, checked before any run starts.

        :param args: the parsed command line.
        :raises SystemExit: one line naming what the command line asks that cannot run.
        """

    def jobs(self, plan: P) -> Sequence[Job]:
        """The plan's jobs, in order (default: its ``jobs``; none: nothing to sweep).

        :param plan: :meth:`plan`'s result.
        """
        return list(getattr(plan, "jobs", ()))

    def job_function(self, args: Options) -> JobFunction:
        """The module-level function that runs one of the jobs in a worker.

        :param args: the parsed command line (``--tensorboard``: the logged job).
        """
        return run_logged_job if args.tensorboard else run_job

    def stages(self, args: Options, plan: P) -> Stages:
        """The plan's jobs, stage by stage: yield a stage's jobs, receive their results.

        A later stage is planned from the results of those before it (which-buffer's
        compute-matched runs, from the passes its as-measured runs counted). The runner
        sweeps each stage (cached, with ``--workers`` or the cluster) and hands
        :meth:`report` every stage's results, in order. Default: one stage, :meth:`jobs`,
        then :meth:`after_sweep`.

        :param args: the parsed command line.
        :param plan: :meth:`plan`'s result.
        """
        results = yield self.jobs(plan)
        self.after_sweep(args, plan, results)

    def after_sweep(self, args: Options, plan: P,
                    results: Sequence[JsonObject]) -> None:
        """What to do with the results before the report (default: nothing).

        :param args: the parsed command line.
        :param plan: the plan.
        :param results: each job's result, in order.
        """

    @abstractmethod
    def report(self, args: Options, argv: Sequence[str] | None, plan: P,
               results: Sequence[JsonObject]) -> Report:
        """The report of the runs.

        :param args: the parsed command line.
        :param argv: the command line (for the record).
        :param plan: the plan.
        :param results: each job's result, in the order of :meth:`jobs`.
        """

    @abstractmethod
    def render(self, report: Report, plan: P, paths: Mapping[str, str]) -> Rendered:
        """The report's CSV and Markdown; the figures it draws, written.

        :param report: the report.
        :param plan: the plan.
        :param paths: where the JSON, CSV and Markdown go (``json``, ``csv``, ``md``).
        """

    def run(self, args: Options, argv: Sequence[str] | None = None) -> int:
        """Run the experiment (:func:`run`); the exit status.

        :param args: the parsed command line.
        :param argv: the command line (for the record).
        """
        return run(self, args, argv)


def run(experiment: Experiment[P], args: Options,
        argv: Sequence[str] | None = None) -> int:
    """Plan, sweep (stage by stage), report and write one experiment; print it; the exit status.

    :param experiment: the experiment.
    :param args: the parsed command line (``out``, the sweep's options).
    :param argv: the command line (for the record; ``sys.argv`` by default).
    :return: 0, or 3 when a run diverged.
    """
    plan = experiment.plan(args)
    start = time.perf_counter()
    results: list[JsonObject] = []
    stages = experiment.stages(args, plan)
    jobs = next(stages, None)
    while jobs is not None:
        done = sweep(args, experiment.name, jobs, experiment.job_function(args)) if jobs else []
        results += done
        try:
            jobs = stages.send(done)
        except StopIteration:
            jobs = None
    report = experiment.report(args, argv, plan, results)
    report = report.timed(time.perf_counter() - start)
    paths = output_paths(args.out, experiment.stem, "json", "csv", "md")
    rendered = experiment.render(report, plan, paths)
    _check_rendered(experiment, rendered, prog_of(args))
    if rendered.csv is None:
        del paths["csv"]
    paths.update(rendered.files)
    write_report(paths, report.to_json(), rendered.csv, rendered.markdown)
    return show_outputs(paths, report.diverged, prog_of(args))


def _check_rendered(experiment: Experiment[Any], rendered: object, prog: str) -> None:
    """Refuse, in one line naming the experiment, a ``render`` result that is no report.

    :raises SystemExit: ``rendered`` is not a :class:`Rendered` of a ``str`` Markdown, a
        ``str`` or ``None`` CSV and a ``dict`` of files (an experiment of one's own may
        return anything).
    """
    if isinstance(rendered, Rendered):
        wrong = [f"{name} is {type(value).__name__}" for name, value, ok in (
            ("markdown", rendered.markdown, isinstance(rendered.markdown, str)),
            ("csv", rendered.csv, rendered.csv is None or isinstance(rendered.csv, str)),
            ("files", rendered.files, isinstance(rendered.files, dict))) if not ok]
        if not wrong:
            return
        what = f"a Rendered whose {', '.join(wrong)}"
    else:
        what = type(rendered).__name__
    raise SystemExit(f"{prog}: error: experiment {experiment.name!r}: render returned {what}, "
                     "not a Rendered(markdown: str, csv: str | None, files: dict)")
