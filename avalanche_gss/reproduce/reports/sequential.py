"""Only the runs the answer needs: seeds added in rounds until every policy is classed.

The fixed design runs every policy at every seed. The sequential design starts with
``start`` seeds and, after each round, classes each policy still open against the best
(:func:`~avalanche_gss.reproduce.reports.equivalence.classify`); a policy shown equivalent
or worse is decided and runs no more seeds; the best and the undecided ones run the next
seed. It stops when no policy is undecided, or at the cap (the last seed), where the
undecided ones stay undecided.

**Error control.** Every look is a test; looking up to ``L`` times at level ``alpha``
would let an error in at any of them. Each look therefore tests at ``alpha / L``
(Bonferroni over the looks, ``L`` = the rounds the cap allows), on top of the split over
the policies compared with the best, so the chance that a policy is ever wrongly classed
stays at most ``alpha``. A policy decided early keeps its class; the best may change in a
later round, and the decided policies are not re-tested against a new best (they were
decided against the best of their round: a stated limit). The error rates and the runs
saved are measured on synthetic runs of known answer in
``tests/reproduce/test_sequential.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from avalanche_gss.reproduce.reports.equivalence import ALPHA, DELTA, Classed, classify

__all__ = ["SequentialResult", "looks", "run_sequential", "step"]


@dataclass
class SequentialResult:
    """What the sequential design decided and what it ran.

    :param classes: each policy's class (decided, or undecided at the cap), by policy.
    :param seeds: the seeds each policy ran, by policy.
    :param rounds: the rounds run.
    :param runs: the runs made, counted as policy x seed (a column count times it is the
        number of training runs).
    :param fixed_runs: the fixed design's: every policy at every seed up to the cap.
    """

    classes: dict[str, Classed] = field(default_factory=dict)
    seeds: dict[str, list[int]] = field(default_factory=dict)
    rounds: int = 0
    runs: int = 0
    fixed_runs: int = 0

    @property
    def saved(self) -> float:
        """The share of the fixed design's runs not made."""
        return 1 - self.runs / self.fixed_runs if self.fixed_runs else 0.0


def looks(seeds: Sequence[int], start: int) -> int:
    """The rounds the cap allows: one look at ``start`` seeds, then one per added seed.

    :param seeds: every seed up to the cap, in the order they are added.
    :param start: the seeds of the first round (>= 2).
    """
    if start < 2 or start > len(seeds):
        raise ValueError(f"the first round needs 2 to {len(seeds)} seeds, got {start}")
    return len(seeds) - start + 1


def step(means: Mapping[str, Mapping[int, float]], decided: Mapping[str, Classed],
         n_looks: int, delta: float = DELTA, alpha: float = ALPHA) -> dict[str, Classed]:
    """One look: class the open policies (those not in ``decided``) on their seeds.

    :param means: every open policy's accuracy per seed (the same seeds each).
    :param decided: the policies decided in earlier rounds (left out of this look).
    :param n_looks: the rounds the design allows (:func:`looks`): each look tests at
        ``alpha / n_looks``.
    :param delta: the practical margin.
    :param alpha: the error rate of the whole design, per policy.
    :return: every policy's class after this look (the decided ones unchanged).
    """
    open_ = {p: v for p, v in means.items() if p not in decided}
    classed = {c.policy: c for c in classify(open_, delta=delta, alpha=alpha / n_looks)}
    return {**classed, **decided}


def run_sequential(policies: Sequence[str], seeds: Sequence[int],
                   run: Callable[[int, Sequence[str]], Mapping[str, float]], start: int = 2,
                   delta: float = DELTA, alpha: float = ALPHA) -> SequentialResult:
    """Run seeds in rounds until every policy is classed against the best, or the cap.

    :param policies: the policies compared.
    :param seeds: every seed up to the cap, in the order they are added.
    :param run: ``run(seed, policies)``: each policy's accuracy at that seed (its runs'
        mean over the columns, as :func:`~.equivalence.seed_means` weighs them).
    :param start: the seeds of the first round.
    :param delta: the practical margin.
    :param alpha: the error rate of the whole design, per policy.
    """
    n_looks = looks(seeds, start)
    result = SequentialResult(fixed_runs=len(policies) * len(seeds))
    means: dict[str, dict[int, float]] = {p: {} for p in policies}
    decided: dict[str, Classed] = {}
    active = list(policies)
    for i, seed in enumerate(seeds):
        for p, value in run(seed, active).items():
            means[p][seed] = value
            result.seeds.setdefault(p, []).append(seed)
        result.runs += len(active)
        if i + 1 < start:
            continue
        result.rounds += 1
        classes = step({p: means[p] for p in active}, {}, n_looks, delta, alpha)
        best = next(c.policy for c in classes.values() if c.verdict == "best")
        for p, c in classes.items():
            if c.verdict in ("equivalent", "worse"):
                decided[p] = c
        result.classes = {**classes, **decided}
        active = [p for p in active if p not in decided]
        if active == [best] or i + 1 == len(seeds):
            break
    return result
