"""The shape of ``which_buffer.json``: what ``which-buffer`` writes and reads back.

The report is written once, then read back by :func:`~avalanche_gss.reproduce.experiments.
which_buffer_statistics.restate` and :func:`~avalanche_gss.reproduce.experiments.
which_buffer_report.redraw` (a report of an earlier version, its statistics or figures
made again), so its parts are typed as the JSON they are: :class:`ReportRecord` and the
records it holds. Optional keys (a version's additions, ``--compute-matched``'s) may be
absent. The values are computed as dataclasses (:class:`~avalanche_gss.reproduce.
experiments.which_buffer_report.PolicyRow`, ``Ranking``, ``Statistics``) that write these.

The standard library only: :mod:`~avalanche_gss.reproduce.experiments.policies` reads
:data:`Json`.
"""

from __future__ import annotations

from typing import TypedDict

from avalanche_gss.reproduce.reports.comparisons import ComparisonRecord
from avalanche_gss.reproduce.reports.equivalence import ClassRecord, ContrastRecord

Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]
"""A JSON value, for the parts of a record that are written and read back as they are
(the provenance, a stream's description, a run's extras, a policy's settings)."""


class RowRecord(TypedDict, total=False):
    """A row of the report: one policy on one stream at one buffer size, over seeds.

    Written by :meth:`~avalanche_gss.reproduce.experiments.which_buffer_report.PolicyRow.
    record`: the keys of :meth:`~avalanche_gss.reproduce.reports.rows.Row.to_dict`, then
    ``family`` and the training seconds' mean and std, then (``--compute-matched``) the
    compute-matched runs' ``relative_cost`` ... ``matched_train_seconds_mean``.
    """

    method: str
    buffer_size: int
    policy: str
    stream: str
    seeds: list[int]
    task_accuracy: list[list[float]]
    avg: list[float]
    avg_mean: float
    avg_std: float | None
    train_seconds: list[float]
    extras: list[dict[str, Json]]
    skipped_steps: list[int]
    diverged: list[bool]
    family: str
    train_seconds_mean: float
    train_seconds_std: float | None
    relative_cost: list[str]
    relative_cost_mean: float
    kept_batches: list[int]
    batches: list[int]
    matched_avg: list[float]
    matched_avg_mean: float
    matched_avg_std: float | None
    matched_train_seconds: list[float]
    matched_train_seconds_mean: float


class RankRecord(TypedDict):
    """A policy's line of a ranking (``which_buffer_report.Placing``)."""

    policy: str
    mean_rank: float
    wins: int
    columns: int
    mean_accuracy: float
    mean_train_seconds: float
    time_vs_fastest: float
    place: str


class StreamRecord(TypedDict, total=False):
    """A stream as the comparison ran it: its protocol, its settings, its deviations."""

    name: str
    family: str
    protocol: str
    variant: dict[str, Json]
    blur: float | None
    traced: bool
    lr: float
    n_iter: int
    stream: dict[str, Json]
    deviations: list[str]
    description: str


class ProtocolRecord(TypedDict, total=False):
    """What the comparison ran: policies, streams, buffer sizes, seeds, shared settings."""

    policies: list[str]
    policy_settings: dict[str, dict[str, Json]]
    policies_left_out: dict[str, str]
    streams: list[StreamRecord]
    buffer_sizes: list[int]
    seeds: list[int]
    model: str
    batch_size: int | None
    replay_batch_size: int | None
    mir_candidates: int | None
    quick: bool
    workers: int
    train_seconds: str
    equivalence_margin: float
    family_weights: dict[str, float]
    lr_grid: list[float]
    tune_seeds: list[int]
    tuned_lr: dict[str, float]
    tuning: dict[str, dict[str, float]]
    sequential: bool


class DecisionRecord(TypedDict):
    """The recommendation: the pick, and the classes against the best it was made from.

    :param data: the data it is for, as the report names them.
    :param weights: each stream family's share of the mix it is for.
    :param delta: the practical margin, in points.
    :param alpha: each one-sided test's level before the Bonferroni split.
    :param seeds: the seeds, the replicates.
    :param best: the policy of the highest weighted mean.
    :param pick: the cheapest of the group.
    :param group: the best, then the policies shown equivalent to it.
    :param undecided: the policies neither shown equivalent nor shown worse.
    :param worse: the policies shown worse.
    :param classes: every policy's class with its interval, the best first.
    :param mean_cost: each policy's cost.
    :param cost: what the cost is (``"C"``, or the training seconds without pass counts).
    :param cost_tolerance: the share within which costs count as equal.
    :param rule: the rule, in words.
    """

    data: str
    weights: dict[str, float]
    delta: float
    alpha: float
    seeds: int
    best: str
    pick: str
    group: list[str]
    undecided: list[str]
    worse: list[str]
    classes: list[ClassRecord]
    mean_cost: dict[str, float]
    cost: str
    cost_tolerance: float
    rule: str


class AblationRecord(ContrastRecord):
    """An ablation: what it asks, and its contrast."""

    question: str


class StabilityRecord(TypedDict):
    """The recommendation made on each half of the seeds (``Stability``)."""

    halves: list[list[int]]
    picks: list[str]
    groups: list[list[str]]
    holds: bool


class HeadRecord(TypedDict):
    """What both of the comparison's JSON files open with: experiment, data, command.

    :class:`ReportRecord` and ``which_buffer_composition.CompositionRecord`` extend it.
    """

    experiment: str
    title: str
    dataset: str
    data_source: str
    data_sha256: str | None
    data_verified_as: str | None
    data_verification: str | None
    command: str


class ScopeRecord(TypedDict):
    """The equivalence classes of one scope: a stream family, or the mix of them.

    :param scope: ``"mix"`` or the family.
    :param weights: each family's weight in it.
    :param best: the policy of the highest weighted mean.
    :param pick: the cheapest of the best and those equivalent to it.
    :param classes: each policy's class, the best first.
    """

    scope: str
    weights: dict[str, float]
    best: str
    pick: str
    classes: list[ClassRecord]


class EquivalenceRecord(TypedDict):
    """Equivalence to the best, per stream family and for their mix.

    :param delta: the practical margin, in points.
    :param alpha: each one-sided test's level before the Bonferroni split.
    :param cost: what the pick's cost is (``"C"`` or ``"seconds"``).
    :param cost_tolerance: the share within which costs count as equal.
    :param rule: the rule, in words.
    :param scopes: the mix, then each family.
    """

    delta: float
    alpha: float
    cost: str
    cost_tolerance: float
    rule: str
    scopes: list[ScopeRecord]


class SequentialRecord(TypedDict):
    """What ``--sequential`` ran and decided.

    :param start: the seeds of the first round.
    :param looks: the rounds the cap allows (each look tests at ``alpha / looks``).
    :param rounds: the rounds run.
    :param delta: the practical margin.
    :param runs: the training runs made.
    :param fixed_runs: the fixed design's (every policy at every seed up to the cap).
    :param saved: the share of the fixed design's runs not made.
    :param seeds: the seeds each policy ran.
    :param classes: each policy's class when it was decided, or at the last look.
    """

    start: int
    looks: int
    rounds: int
    delta: float
    runs: int
    fixed_runs: int
    saved: float
    seeds: dict[str, list[int]]
    classes: list[ClassRecord]


class ReportRecord(HeadRecord, total=False):
    """``which_buffer.json``.

    With ``--compute-matched`` the statistics' keys each have a ``_compute_matched`` twin.
    """

    protocol: ProtocolRecord
    provenance: dict[str, Json]
    rows: list[RowRecord]
    best: dict[str, list[str]]
    ranking: list[RankRecord]
    compute_matched: str
    ranking_compute_matched: list[RankRecord]
    best_compute_matched: dict[str, list[str]]
    wall_seconds: float
    recommendation: DecisionRecord | None
    comparisons: list[ComparisonRecord]
    ablations: list[AblationRecord]
    stability: StabilityRecord | None
    recommendation_compute_matched: DecisionRecord | None
    comparisons_compute_matched: list[ComparisonRecord]
    ablations_compute_matched: list[AblationRecord]
    stability_compute_matched: StabilityRecord | None
    equivalence: EquivalenceRecord | None
    equivalence_compute_matched: EquivalenceRecord | None
    sequential: SequentialRecord
    recommendation_note: str
