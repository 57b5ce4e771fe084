"""``which-buffer --compute-matched``: each policy again on the batches its compute affords.

The real-time rule of Ghunaim et al., CVPR 2023 (:mod:`avalanche_gss.reproduce.runs.budget`): a
policy's
relative cost ``C`` is its counted passes (forward + 2 x backward per sample) over its
as-measured run, over Reservoir's closed form
(:func:`~avalanche_gss.reproduce.runs.budget.rehearsal_passes`) on the same stream, buffer size and
seed;
it then trains only on the batches ``floor(j * C)``, the others unseen by the model and
the buffer (:func:`~avalanche_gss.reproduce.runs.jobs.matched_split`). The as-measured runs
count their passes into their results' extras (so the cache holds them); the
compute-matched runs record ``C`` (an exact fraction) and their kept batch count in their
job config, so their cache keys differ. A compute-matched run that keeps every batch (a
policy of ``C <= 1``) is its as-measured run again: its result is taken from that run
instead of training it twice (and with ``--tensorboard`` it writes no ``-matched`` logs:
the as-measured run's are its own).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, TypeAlias, TypedDict, cast

from avalanche_gss.reproduce.experiments.which_buffer_records import RowRecord
from avalanche_gss.reproduce.json_types import JsonObject, json_float, json_object
from avalanche_gss.reproduce.runs.budget import PassCount, relative_cost, trained_batches
from avalanche_gss.reproduce.runs.jobs import Matched, RunJob

__all__ = ["MATCHED_LEGEND", "JobConfig", "JobResult", "MatchedCell", "MatchedRun", "RunKey",
           "add_matched", "keeps_every_batch", "matched_jobs", "matched_results",
           "matched_rows", "relative_cost_of"]

MATCHED_LEGEND = (
    "C: a policy's relative cost, its forward plus twice its backward passes per sample "
    "counted over its as-measured run, over Reservoir's on the same stream, M and seed "
    "(C = 1 keeps pace with the stream). The rule (Ghunaim et al., CVPR 2023, real-time "
    "evaluation): a policy of cost C trains only on the stream's batches floor(j·C), "
    "j = 0, 1, ..., and the batches it skips are seen by neither its model nor its buffer.")
"""What the Markdown says C and the rule are."""

JobConfig: TypeAlias = JsonObject
"""A job's config (JSON), as :func:`~avalanche_gss.reproduce.runs.jobs.run_job` takes it (and the
cache stores it): that module's type, passed through here."""

JobResult: TypeAlias = JsonObject
"""A job's result (JSON), as :func:`~avalanche_gss.reproduce.runs.jobs.run_job` gives it (a
``RunResult`` as a dict): that module's type, passed through here."""

RunKey = tuple[str, str, int, int]
"""A run of the comparison: its policy, stream, buffer size and seed."""


class _Passes(TypedDict):
    """A counted run's ``extras["passes"]`` (see ``run_job``'s ``count_passes``)."""

    forward: int
    backward: int
    reservoir_forward: int
    reservoir_backward: int
    batches: int


@dataclass(frozen=True)
class MatchedRun:
    """One compute-matched run, for the CSV and its row.

    :param job: its job's ``matched``: ``C``, kept batches, batches.
    :param avg: its final average accuracy.
    :param train_seconds: its training time.
    """

    job: Matched
    avg: float
    train_seconds: float


@dataclass(frozen=True)
class MatchedCell:
    """A row's compute-matched runs, one per seed (in the row's seed order).

    :param runs: the runs.
    """

    runs: tuple[MatchedRun, ...]

    @property
    def relative_cost_mean(self) -> float:
        """The mean of ``C`` over seeds."""
        return statistics.fmean(float(r.job.c) for r in self.runs)

    @property
    def avg(self) -> list[float]:
        """Each seed's compute-matched final average accuracy."""
        return [r.avg for r in self.runs]

    @property
    def train_seconds(self) -> list[float]:
        """Each seed's compute-matched training time."""
        return [r.train_seconds for r in self.runs]


class _Cell(Protocol):
    """A row of the comparison, as :func:`add_matched` fills it (``PolicyRow``)."""

    matched: MatchedCell | None

    @property
    def policy(self) -> str: ...

    @property
    def stream(self) -> str: ...

    @property
    def buffer_size(self) -> int: ...

    @property
    def seeds(self) -> list[int]: ...


def relative_cost_of(result: JobResult) -> tuple[Fraction, int, int]:
    """A counted run's ``C``, its kept batch count and the stream's.

    :param result: a job's result whose ``extras["passes"]`` the job counted
        (:func:`~avalanche_gss.reproduce.runs.jobs.run_job` with ``count_passes``).
    :raises ValueError: the result holds no pass counts.
    """
    passes = cast("_Passes | None", json_object(result["extras"]).get("passes"))
    if passes is None:
        raise ValueError("the run holds no pass counts; run it with count_passes")
    c = relative_cost(PassCount(passes["forward"], passes["backward"]),
                      PassCount(passes["reservoir_forward"], passes["reservoir_backward"]))
    return c, len(trained_batches(passes["batches"], c)), int(passes["batches"])


def matched_jobs(jobs: Sequence[RunJob], results: Sequence[JobResult]) -> list[RunJob]:
    """The compute-matched job of each as-measured job, from its counted result.

    :param jobs: the as-measured jobs (with ``count_passes``).
    :param results: their results, in order.
    :return: each job without ``count_passes`` and the trace, with ``matched``
        (:class:`~avalanche_gss.reproduce.runs.jobs.Matched`), its label ending in
        ``-matched``.
    """
    out = []
    for job, result in zip(jobs, results, strict=True):
        c, kept, batches = relative_cost_of(result)
        out.append(dataclasses.replace(
            job, count_passes=False, stream=dataclasses.replace(job.stream, trace=False),
            matched=Matched(c, kept, batches),
            label=f"{job.label}-matched" if job.label else job.label))
    return out


def keeps_every_batch(job: RunJob) -> bool:
    """Whether a compute-matched job trains on every batch.

    True for ``C <= 1``, or too few batches for ``C`` to skip one: the job is then its
    as-measured run again, with the same result.

    :param job: a compute-matched job (:func:`matched_jobs`).
    :raises ValueError: the job is not compute-matched.
    """
    if job.matched is None:
        raise ValueError(f"job {job.label!r} is not compute-matched")
    return job.matched.kept_batches == job.matched.batches


def matched_results(jobs: Sequence[RunJob], measured: Sequence[JobResult],
                    ran: Sequence[JobResult]) -> list[JobResult]:
    """Each compute-matched job's result, training only the jobs that skip batches.

    A job that keeps every batch (:func:`keeps_every_batch`) takes its as-measured run's
    result (the same run, not trained twice); every other job the next of ``ran``.

    :param jobs: the compute-matched jobs (:func:`matched_jobs`).
    :param measured: the as-measured results, in the same order.
    :param ran: the results of the jobs that skip batches, in order.
    :raises ValueError: ``ran`` holds another number of results than the jobs that skip.
    """
    skipping = sum(not keeps_every_batch(j) for j in jobs)
    if len(ran) != skipping:
        raise ValueError(f"{len(ran)} compute-matched results for {skipping} runs that skip "
                         "batches")
    rest = iter(ran)
    return [m if keeps_every_batch(j) else next(rest)
            for j, m in zip(jobs, measured, strict=True)]


def add_matched(rows: Sequence[_Cell], keys: Sequence[RunKey], jobs: Sequence[RunJob],
                results: Sequence[JobResult]) -> dict[RunKey, MatchedRun]:
    """Give each row its compute-matched runs (``PolicyRow.matched``), by run key.

    Each row's record then holds, per seed, ``relative_cost`` (exact fraction strings),
    ``kept_batches``, ``batches``, ``matched_avg`` and ``matched_train_seconds``, and
    ``relative_cost_mean``, ``matched_avg_mean``, ``matched_avg_std``,
    ``matched_train_seconds_mean``.

    :param rows: the rows.
    :param keys: each matched run's policy, stream, buffer size and seed.
    :param jobs: the matched jobs (:func:`matched_jobs`).
    :param results: their results.
    :return: each matched run by its key (for the CSV).
    """
    runs = {k: MatchedRun(_matched(job), json_float(result["avg"]),
                          json_float(result["train_seconds"]))
            for k, job, result in zip(keys, jobs, results, strict=True)}
    for r in rows:
        r.matched = MatchedCell(tuple(runs[(r.policy, r.stream, r.buffer_size, s)]
                                      for s in r.seeds))
    return runs


def _matched(job: RunJob) -> Matched:
    if job.matched is None:
        raise ValueError(f"job {job.label!r} is not compute-matched")
    return job.matched


def matched_rows(records: Sequence[RowRecord]) -> list[RowRecord]:
    """The rows with the compute-matched accuracy and time in place of the measured ones.

    For :func:`~avalanche_gss.reproduce.experiments.which_buffer_report.ranking`: its second
    ranking.

    :param records: the report's rows, with their compute-matched runs.
    """
    out = []
    for r in records:
        m = r.copy()
        m["avg_mean"] = r["matched_avg_mean"]
        m["avg_std"] = r["matched_avg_std"]
        m["train_seconds_mean"] = r["matched_train_seconds_mean"]
        out.append(m)
    return out
