"""The command line as one typed value: what every experiment and the engine read of it.

The command line (:func:`~avalanche_gss.reproduce.cli.parse_args`) turns argv into an
:class:`Options` once; the experiments, the runner and the sweep read its fields and never
see argparse. Standard library only, at the bottom of the harness's layers. Each field is
the option of the same name (``--buffer-sizes`` is ``buffer_sizes``); its meaning and
checks are the command line's (``--help``, :doc:`guide/cli`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from avalanche_gss.reproduce.program import PROG

__all__ = ["Options"]


@dataclass(frozen=True)
class Options:
    """A parsed command line: the experiment and every option, typed.

    :param experiment: the experiment to run.
    :param data: ``--data`` (``None``: the experiment's own dataset).
    :param root: ``--root``.
    :param download: ``--download``.
    :param imports: ``--import`` modules.
    :param methods: ``--methods``.
    :param policies: ``--policies`` (which-buffer).
    :param streams: ``--streams`` (which-buffer).
    :param compute_matched: ``--compute-matched`` (which-buffer).
    :param equivalence_margin: ``--equivalence-margin`` (which-buffer).
    :param family_weights: ``--family-weights``, as ``(family, weight)`` pairs (which-buffer).
    :param lr_grid: ``--lr-grid`` (which-buffer).
    :param tune_seeds: ``--tune-seeds`` (which-buffer).
    :param sequential: ``--sequential`` (which-buffer).
    :param seeds: ``--seeds``.
    :param buffer_sizes: ``--buffer-sizes``.
    :param n_iter: ``--n-iter``.
    :param lr: ``--lr``.
    :param replay_batch_size: ``--replay-batch-size``.
    :param variants: ``--variants``.
    :param retrieval: ``--retrieval``.
    :param mir_candidates: ``--mir-candidates``.
    :param out: ``--out``.
    :param quick: ``--quick``.
    :param device: ``--device`` (resolved to a device before the runs).
    :param threads: ``--threads``.
    :param workers: ``--workers``.
    :param cache: ``--cache``.
    :param launcher: ``--launcher``.
    :param cluster: ``--cluster``.
    :param runs_per_job: ``--runs-per-job``.
    :param partition: ``--partition``.
    :param time_min: ``--time``.
    :param mem_gb: ``--mem``.
    :param cpus_per_job: ``--cpus-per-job``.
    :param gpus_per_job: ``--gpus-per-job``.
    :param tensorboard: ``--tensorboard``.
    :param prog: the program as the user ran it (every message names it).
    """

    experiment: str = ""
    data: str | None = None
    root: str | None = None
    download: bool = False
    imports: list[str] | None = None
    methods: list[str] | None = None
    policies: list[str] | None = None
    streams: list[str] | None = None
    compute_matched: bool = False
    equivalence_margin: float | None = None
    family_weights: list[tuple[str, float]] | None = None
    lr_grid: list[float] | None = None
    tune_seeds: list[int] | None = None
    sequential: bool = False
    seeds: list[int] | None = None
    buffer_sizes: list[int] | None = None
    n_iter: int | None = None
    lr: float | None = None
    replay_batch_size: int | None = None
    variants: list[str] = field(default_factory=lambda: ["paper", "authors"])
    retrieval: list[str] | None = None
    mir_candidates: int | None = None
    out: str = "results"
    quick: bool = False
    device: str = "auto"
    threads: int = 1
    workers: int = 1
    cache: str | None = None
    launcher: Literal["local", "submitit"] = "local"
    cluster: str | None = None
    runs_per_job: int = 1
    partition: str | None = None
    time_min: int | None = None
    mem_gb: float | None = None
    cpus_per_job: int | None = None
    gpus_per_job: int | None = None
    tensorboard: str | None = None
    prog: str = PROG
