"""The numbers the paper reports, to print beside ours (accuracies in percent).

Keys are ``(method, column)``; values ``(mean, std)`` or ``(mean, None)`` where the paper
gives no deviation. ``python -m reproduce`` shows them only beside runs on data verified to
be the paper's dataset (``ArrayDataset.verified_as``: torchvision's MNIST or CIFAR-10 files
by their MD5s, the 5,000 offline MNIST digits by their content hash). Sources: Tables 1-4
and the appendix tables of ``paper/gss-neurips2019.tex``.
"""

from __future__ import annotations

__all__ = ["PAPER_AVERAGES", "PAPER_TABLES"]

_Cell = tuple[float, float | None]

TABLE1: dict[tuple[str, int], _Cell] = {
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

TABLE2: dict[tuple[str, int], _Cell] = {
    ("Rand", 300): (72.54, 0.4), ("GSS-IQP", 300): (77.3, 0.5),
    ("GSS-Clust", 300): (79.74, 0.2), ("FSS-Clust", 300): (77.8, 0.3),
    ("GSS-Greedy", 300): (77.3, 0.5),
}
"""Table 2: permuted MNIST, M = 300, average accuracy (per-task columns omitted)."""

TABLE3: dict[tuple[str, int], _Cell] = {
    ("Rand", 1000): (28.6, 1.2), ("GSS-Clust", 1000): (22.5, 0.4),
    ("FSS-Clust", 1000): (26.7, 1.5), ("GSS-Greedy", 1000): (33.56, 1.7),
}
"""Table 3: disjoint CIFAR-10, M = 1000, average accuracy."""

TABLE4: dict[tuple[str, int], _Cell] = {
    ("Reservoir", 1): (63.7, 0.8), ("Reservoir", 2): (69.4, 0.7), ("Reservoir", 3): (66.8, 4.8),
    ("Reservoir", 4): (69.1, 2.4), ("Reservoir", 5): (76.6, 1.6),
    ("GSS-IQP", 1): (75.9, 3.2), ("GSS-IQP", 2): (76.2, 4.1), ("GSS-IQP", 3): (79.06, 0.7),
    ("GSS-IQP", 4): (76.6, 2.0), ("GSS-IQP", 5): (74.7, 1.8),
    ("GSS-Greedy", 1): (71.2, 3.6), ("GSS-Greedy", 2): (78.5, 2.7), ("GSS-Greedy", 3): (81.5, 2.3),
    ("GSS-Greedy", 4): (79.5, 0.6), ("GSS-Greedy", 5): (79.1, 0.7),
}
"""Table 4: imbalanced disjoint MNIST, M = 300, average accuracy per sequence."""

TABLE4_AVG: dict[str, _Cell] = {
    "Reservoir": (69.12, 4.3), "GSS-IQP": (76.49, 1.4), "GSS-Greedy": (77.96, 3.5),
}
"""Table 4's last column: the mean over the five sequences."""

BLURRY: dict[tuple[str, int], _Cell] = {
    ("Rand", 500): (29.0, None), ("GSS-IQP", 500): (29.6, None),
    ("GSS-Clust", 500): (25.0, None), ("FSS-Clust", 500): (26.0, None),
    ("GSS-Greedy", 500): (29.6, None),
}
"""Appendix: blurry disjoint CIFAR-10, M = 500, average accuracy (one run reported)."""

CONSTRAINED: dict[tuple[str, int], _Cell] = {
    ("GSS-IQP (constrained)", 100): (76.26, None), ("GSS-IQP (rehearsal)", 100): (71.3, None),
    ("GSS-IQP (constrained)", 200): (83.4, None), ("GSS-IQP (rehearsal)", 200): (78.9, None),
}
"""Appendix C: disjoint MNIST with 200 samples per task, average accuracy by buffer size."""

PAPER_TABLES = {"table1": TABLE1, "table2": TABLE2, "table3": TABLE3, "table4": TABLE4,
                "blurry": BLURRY, "constrained": CONSTRAINED}
"""The paper's cells by experiment, keyed ``(method, column)``."""

PAPER_AVERAGES = {"table4": TABLE4_AVG}
"""Experiments whose table has an ``Avg`` column over the other columns."""
