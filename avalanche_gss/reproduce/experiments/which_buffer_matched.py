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

import statistics
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from avalanche_gss.reproduce.runs.budget import PassCount, relative_cost, trained_batches

__all__ = ["MATCHED_LEGEND", "add_matched", "keeps_every_batch", "matched_configs",
           "matched_results", "matched_rows", "relative_cost_of"]

MATCHED_LEGEND = (
    "C: a policy's relative cost, its forward plus twice its backward passes per sample "
    "counted over its as-measured run, over Reservoir's on the same stream, M and seed "
    "(C = 1 keeps pace with the stream). The rule (Ghunaim et al., CVPR 2023, real-time "
    "evaluation): a policy of cost C trains only on the stream's batches floor(j·C), "
    "j = 0, 1, ..., and the batches it skips are seen by neither its model nor its buffer.")
"""What the Markdown says C and the rule are."""


def relative_cost_of(result: dict[str, Any]) -> tuple[Any, int, int]:
    """A counted run's ``C`` (a ``Fraction``), its kept batch count and the stream's.

    :param result: a job's result whose ``extras["passes"]`` the job counted
        (:func:`~avalanche_gss.reproduce.runs.jobs.run_job` with ``count_passes``).
    :raises ValueError: the result holds no pass counts.
    """
    passes = result["extras"].get("passes")
    if passes is None:
        raise ValueError("the run holds no pass counts; run it with count_passes")
    c = relative_cost(PassCount(passes["forward"], passes["backward"]),
                      PassCount(passes["reservoir_forward"], passes["reservoir_backward"]))
    return c, len(trained_batches(passes["batches"], c)), int(passes["batches"])


def matched_configs(configs: Sequence[dict[str, Any]],
                    results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compute-matched job of each as-measured job, from its counted result.

    :param configs: the as-measured jobs (with ``count_passes``).
    :param results: their results, in order.
    :return: each config without ``count_passes`` and ``trace``, with ``matched``:
        ``C`` (an exact fraction string), ``kept_batches`` and ``batches``, and its
        ``label`` ending in ``-matched``.
    """
    out = []
    for config, result in zip(configs, results, strict=True):
        c, kept, batches = relative_cost_of(result)
        job = {k: v for k, v in config.items() if k not in ("count_passes", "trace")}
        job["matched"] = {"C": str(c), "kept_batches": kept, "batches": batches}
        if job.get("label"):
            job["label"] = f"{job['label']}-matched"
        out.append(job)
    return out


def keeps_every_batch(config: dict[str, Any]) -> bool:
    """Whether a compute-matched job trains on every batch.

    True for ``C <= 1``, or too few batches for ``C`` to skip one: the job is then its
    as-measured run again, with the same result.
    """
    return bool(config["matched"]["kept_batches"] == config["matched"]["batches"])


def matched_results(configs: Sequence[dict[str, Any]], measured: Sequence[dict[str, Any]],
                    ran: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each compute-matched job's result, training only the jobs that skip batches.

    A job that keeps every batch (:func:`keeps_every_batch`) takes its as-measured run's
    result (the same run, not trained twice); every other job the next of ``ran``.

    :param configs: the compute-matched jobs (:func:`matched_configs`).
    :param measured: the as-measured results, in the same order.
    :param ran: the results of the jobs that skip batches, in order.
    :raises ValueError: ``ran`` holds another number of results than the jobs that skip.
    """
    skipping = sum(not keeps_every_batch(c) for c in configs)
    if len(ran) != skipping:
        raise ValueError(f"{len(ran)} compute-matched results for {skipping} runs that skip "
                         "batches")
    rest = iter(ran)
    return [m if keeps_every_batch(c) else next(rest)
            for c, m in zip(configs, measured, strict=True)]


def add_matched(records: list[dict[str, Any]], keys: Sequence[dict[str, Any]],
                configs: Sequence[dict[str, Any]],
                results: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Add the compute-matched results to the report's rows; each run's, by its keys.

    Each row gains, per seed, ``relative_cost`` (exact fraction strings), ``kept_batches``,
    ``batches``, ``matched_avg`` and ``matched_train_seconds``, and ``relative_cost_mean``,
    ``matched_avg_mean``, ``matched_avg_std``, ``matched_train_seconds_mean``.

    :param records: the rows (``policy``, ``stream``, ``buffer_size``, ``seeds``).
    :param keys: each matched run's ``policy``, ``stream``, ``buffer_size`` and ``seed``.
    :param configs: the matched jobs (:func:`matched_configs`).
    :param results: their results.
    :return: per ``(policy, stream, buffer size, seed)``: ``C``, ``kept_batches``,
        ``batches``, ``avg`` (for the CSV).
    """
    runs: dict[tuple[Any, ...], dict[str, Any]] = {}
    for k, config, result in zip(keys, configs, results, strict=True):
        runs[(k["policy"], k["stream"], k["buffer_size"], k["seed"])] = {
            **config["matched"], "avg": result["avg"],
            "train_seconds": result["train_seconds"]}
    for r in records:
        mine = [runs[(r["policy"], r["stream"], r["buffer_size"], s)] for s in r["seeds"]]
        avgs = [m["avg"] for m in mine]
        secs = [m["train_seconds"] for m in mine]
        r.update(relative_cost=[m["C"] for m in mine],
                 relative_cost_mean=statistics.fmean(float(Fraction(m["C"])) for m in mine),
                 kept_batches=[m["kept_batches"] for m in mine],
                 batches=[m["batches"] for m in mine],
                 matched_avg=avgs, matched_avg_mean=statistics.fmean(avgs),
                 matched_avg_std=statistics.pstdev(avgs) if len(avgs) > 1 else None,
                 matched_train_seconds=secs,
                 matched_train_seconds_mean=statistics.fmean(secs))
    return runs


def matched_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with the compute-matched accuracy and time in place of the measured ones.

    For :func:`~avalanche_gss.reproduce.experiments.which_buffer_report.ranking`: its second
    ranking.
    """
    return [{**r, "avg_mean": r["matched_avg_mean"], "avg_std": r["matched_avg_std"],
             "train_seconds_mean": r["matched_train_seconds_mean"]} for r in records]
