"""The paper's figures (``figure2``, ``figure4``, ``figure5``) for ``python -m reproduce``.

Each is an experiment of the registry
(:data:`~avalanche_gss.reproduce.experiments.registry.EXPERIMENTS`) that writes
``<experiment>.json/.md/.csv/.png`` into ``--out`` and prints the markdown.
Runs go through :func:`~avalanche_gss.reproduce.runs.sweep.run_sweep` with :func:`figure_job`, so a
stopped sweep resumes from ``--cache``.

- ``figure2``: surrogate (Eq. 5) against Monte Carlo solid angle (Eq. 4) of random vector
  sets in 200 dimensions, with their Pearson and Spearman correlations
  (:mod:`~avalanche_gss.reproduce.experiments.figure2`).
- ``figure4``: test accuracy every 100 training samples on disjoint MNIST, M = 300, for
  GSS-Greedy, GSS-IQP, GEM, iCaRL (task ends), Single and the i.i.d. baselines (end)
  (:mod:`~avalanche_gss.reproduce.experiments.figure4`).
- ``figure5``: GSS-Greedy's final average accuracy on disjoint MNIST against ``n`` and
  against the batch size (M = 300) (:mod:`~avalanche_gss.reproduce.experiments.figure5`).

Their settings (:data:`FIGURE2`, :data:`FIGURE4`, :data:`FIGURE5`) and their job live in
:mod:`~avalanche_gss.reproduce.experiments.figure_runs`.
"""

from __future__ import annotations

from avalanche_gss.reproduce.experiments.figure_runs import (
    FIGURE2,
    FIGURE4,
    FIGURE5,
    PAPER_FIGURE5_N,
    FigureJob,
    figure_job,
)

__all__ = ["FIGURE2", "FIGURE4", "FIGURE5", "PAPER_FIGURE5_N", "FigureJob", "figure_job"]
