"""The numbers the paper reports, to print beside ours (accuracies in percent).

Keys are ``(method, column)``; values ``(mean, std)`` or ``(mean, None)`` where the paper
gives no deviation. ``python -m reproduce`` shows them only beside runs on data verified to
be the paper's dataset (``ArrayDataset.verified_as``: torchvision's MNIST or CIFAR-10 files
by their MD5s, the 5,000 offline MNIST digits by their content hash). Sources: Tables 1-4
and the appendix tables of ``paper/gss-neurips2019.tex``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BLURRY", "CONSTRAINED", "PAPER_SEEDS", "PaperCell", "REPRODUCE_ALPHA", "TABLE1",
           "TABLE2", "TABLE3", "TABLE4", "TABLE4_AVG",
           "ReproduceTest", "reproduce_test"]

PaperCell = tuple[float, float | None]
"""One of the paper's cells: its mean and its sd (``None`` where the paper gives none)."""

TABLE1: dict[tuple[str, int], PaperCell] = {
    ("Rand", 300): (37.5, 1.3), ("Rand", 400): (45.9, 4.8), ("Rand", 500): (57.9, 4.1),
    ("GSS-IQP", 300): (75.9, 2.5), ("GSS-IQP", 400): (82.1, 0.6), ("GSS-IQP", 500): (84.1, 2.4),
    ("GSS-Clust", 300): (75.7, 2.2), ("GSS-Clust", 400): (81.4, 4.4),
    ("GSS-Clust", 500): (83.9, 1.6),
    ("FSS-Clust", 300): (75.8, 1.7), ("FSS-Clust", 400): (80.6, 2.7),
    ("FSS-Clust", 500): (83.4, 2.6),
    ("GSS-Greedy", 300): (82.6, 2.9), ("GSS-Greedy", 400): (84.6, 0.9),
    ("GSS-Greedy", 500): (84.8, 1.8),
}
"""Table 1: disjoint MNIST, average accuracy by buffer size."""

TABLE2: dict[tuple[str, int], PaperCell] = {
    ("Rand", 300): (72.54, 0.4), ("GSS-IQP", 300): (77.3, 0.5),
    ("GSS-Clust", 300): (79.74, 0.2), ("FSS-Clust", 300): (77.8, 0.3),
    ("GSS-Greedy", 300): (77.3, 0.5),
}
"""Table 2: permuted MNIST, M = 300, average accuracy (per-task columns omitted)."""

TABLE3: dict[tuple[str, int], PaperCell] = {
    ("Rand", 1000): (28.6, 1.2), ("GSS-Clust", 1000): (22.5, 0.4),
    ("FSS-Clust", 1000): (26.7, 1.5), ("GSS-Greedy", 1000): (33.56, 1.7),
}
"""Table 3: disjoint CIFAR-10, M = 1000, average accuracy."""

TABLE4: dict[tuple[str, int], PaperCell] = {
    ("Reservoir", 1): (63.7, 0.8), ("Reservoir", 2): (69.4, 0.7), ("Reservoir", 3): (66.8, 4.8),
    ("Reservoir", 4): (69.1, 2.4), ("Reservoir", 5): (76.6, 1.6),
    ("GSS-IQP", 1): (75.9, 3.2), ("GSS-IQP", 2): (76.2, 4.1), ("GSS-IQP", 3): (79.06, 0.7),
    ("GSS-IQP", 4): (76.6, 2.0), ("GSS-IQP", 5): (74.7, 1.8),
    ("GSS-Greedy", 1): (71.2, 3.6), ("GSS-Greedy", 2): (78.5, 2.7), ("GSS-Greedy", 3): (81.5, 2.3),
    ("GSS-Greedy", 4): (79.5, 0.6), ("GSS-Greedy", 5): (79.1, 0.7),
}
"""Table 4: imbalanced disjoint MNIST, M = 300, average accuracy per sequence."""

TABLE4_AVG: dict[str, PaperCell] = {
    "Reservoir": (69.12, 4.3), "GSS-IQP": (76.49, 1.4), "GSS-Greedy": (77.96, 3.5),
}
"""Table 4's last column: the mean over the five sequences."""

BLURRY: dict[tuple[str, int], PaperCell] = {
    ("Rand", 500): (29.0, None), ("GSS-IQP", 500): (29.6, None),
    ("GSS-Clust", 500): (25.0, None), ("FSS-Clust", 500): (26.0, None),
    ("GSS-Greedy", 500): (29.6, None),
}
"""Appendix: blurry disjoint CIFAR-10, M = 500, average accuracy (one run reported)."""

CONSTRAINED: dict[tuple[str, int], PaperCell] = {
    ("GSS-IQP (constrained)", 100): (76.26, None), ("GSS-IQP (rehearsal)", 100): (71.3, None),
    ("GSS-IQP (constrained)", 200): (83.4, None), ("GSS-IQP (rehearsal)", 200): (78.9, None),
}
"""Appendix C: disjoint MNIST with 200 samples per task, average accuracy by buffer size."""

PAPER_SEEDS = 3
"""Runs behind each of the paper's ``mean ± sd`` (its tables average three seeds)."""

REPRODUCE_ALPHA = 0.05
"""Level of the reproduce test: a cell reproduces unless Welch's test rejects at it."""


@dataclass(frozen=True)
class ReproduceTest:
    """Our cell against the paper's: Welch's two-sample t-test on the means.

    :param ours_mean: our mean over seeds.
    :param ours_sd: our sample standard deviation (``n - 1``); ``None`` below two seeds.
    :param ours_n: our seeds.
    :param paper_mean: the paper's mean.
    :param paper_sd: the paper's ``±``, read as the standard deviation over its runs
        (``None``: the paper gives none).
    :param paper_n: the paper's runs.
    :param difference: ours − paper.
    :param low: the lower end of the difference's ``1 - alpha`` interval (``None``: n/a).
    :param high: its upper end (``None``: n/a).
    :param t: the t statistic (``None``: n/a).
    :param df: the Welch–Satterthwaite degrees of freedom (``None``: n/a).
    :param p: the two-sided p-value (``None``: n/a).
    :param verdict: ``"reproduces"`` (``p >= alpha``), ``"does not reproduce"``
        (``p < alpha``) or ``"n/a"`` (fewer than two of our seeds, or no spread on either
        side).
    :param test: ``"welch"`` (the paper gives a spread) or ``"one run"`` (it reports one
        run: see :func:`reproduce_test`).
    """

    ours_mean: float
    ours_sd: float | None
    ours_n: int
    paper_mean: float
    paper_sd: float | None
    paper_n: int
    difference: float
    low: float | None
    high: float | None
    t: float | None
    df: float | None
    p: float | None
    verdict: str
    test: str = "welch"


def reproduce_test(ours: Sequence[float], paper_mean: float, paper_sd: float | None, *,
                   paper_n: int = PAPER_SEEDS, alpha: float = REPRODUCE_ALPHA
                   ) -> ReproduceTest:
    """Whether our runs reproduce the paper's ``mean ± sd``: Welch's t-test, two-sided.

    The difference ours − paper, its ``1 - alpha`` confidence interval
    ``d ± t(1 - alpha/2, df) * se`` with ``se² = s_o²/n_o + s_p²/n_p`` and the
    Welch–Satterthwaite ``df``, and the p-value of ``t = d / se``; what
    ``scipy.stats.ttest_ind_from_stats(..., equal_var=False)`` computes.

    Where the paper gives no spread (its appendices report one run), its number is one
    run: Student's two-sample t-test with that run as a sample of one and our seeds' sample
    standard deviation standing for both sides' (``se = s_o sqrt(1/n_o + 1)``,
    ``df = n_o - 1``). It asks whether the paper's run lies in the ``1 - alpha``
    prediction interval of one more run of ours; ``paper_n`` is then 1 and ``test``
    ``"one run"``.

    :param ours: our value per seed (e.g. each seed's average accuracy).
    :param paper_mean: the paper's mean.
    :param paper_sd: the paper's ``±``, taken as the standard deviation over its
        ``paper_n`` runs (``None``: the paper gives none, and reports one run).
    :param paper_n: the paper's runs (:data:`PAPER_SEEDS`).
    :param alpha: the test's level (:data:`REPRODUCE_ALPHA`).
    :raises ValueError: no value of ours, ``paper_n`` below 2, a negative ``paper_sd`` or
        an ``alpha`` outside (0, 1) (one line naming it).
    """
    from scipy import stats  # here: the tables' module loads without scipy's start-up

    if not ours:
        raise ValueError("reproduce_test needs at least one value of ours, got none")
    if paper_n < 2:
        raise ValueError(f"paper_n must be at least 2, got {paper_n!r}")
    if paper_sd is not None and not paper_sd >= 0:
        raise ValueError(f"paper_sd must be >= 0, got {paper_sd!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    n = len(ours)
    mean = statistics.fmean(ours)
    sd = statistics.stdev(ours) if n > 1 else None
    difference = mean - paper_mean
    test = "welch"
    if paper_sd is None:  # one run of the paper's: our sd stands for both sides
        paper_n, test = 1, "one run"
    if sd is None or (sd == 0 and not paper_sd):
        return ReproduceTest(mean, sd, n, paper_mean, paper_sd, paper_n, difference,
                             None, None, None, None, None, "n/a", test)
    if paper_sd is None:
        se, df = sd * math.sqrt(1 / n + 1), float(n - 1)
    else:
        ours_var, paper_var = sd**2 / n, paper_sd**2 / paper_n
        se = math.sqrt(ours_var + paper_var)
        df = (ours_var + paper_var) ** 2 / (ours_var**2 / (n - 1)
                                            + paper_var**2 / (paper_n - 1))
    t = difference / se
    p = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    return ReproduceTest(mean, sd, n, paper_mean, paper_sd, paper_n, difference,
                         difference - half, difference + half, t, df, p,
                         "reproduces" if p >= alpha else "does not reproduce", test)
