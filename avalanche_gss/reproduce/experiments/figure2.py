"""``python -m reproduce figure2``: surrogate against solid angle (paper Figure 2).

Surrogate (Eq. 5) against Monte Carlo solid angle (Eq. 4) of random vector sets in 200
dimensions, with their Pearson and Spearman correlations.
"""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from avalanche_gss.reproduce.common import Choices, command, prog_of
from avalanche_gss.reproduce.experiments.figure_runs import FIGURE2, chosen_for
from avalanche_gss.reproduce.json_types import JsonObject
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.reports.plotting import plot_surrogate_vs_solid_angle as plot_surrogate
from avalanche_gss.reproduce.reports.report import DataFacts, Report, jsonable
from avalanche_gss.reproduce.runner import Experiment, Rendered
from avalanche_gss.solid_angle import SurrogateStudy, surrogate_vs_solid_angle

log = logging.getLogger("reproduce")

SIGN_NOTE = ("+ (a smaller surrogate goes with a smaller solid angle: the monotonic relation "
             "the paper needs)")
"""What the protocol says the expected sign is."""


@dataclass
class SurrogateRow:
    """One study: ``k`` vectors per set in ``dim`` dimensions, one seed.

    :param k: vectors per set (the buffer size of Eq. 4).
    :param dim: their dimension.
    :param seed: the generator's seed.
    :param n_sets: the sets drawn.
    :param n_samples: the Monte Carlo draws per set.
    :param study: the study's correlations and records.
    """

    k: int
    dim: int
    seed: int
    n_sets: int
    n_samples: int
    study: SurrogateStudy

    def to_dict(self) -> JsonObject:
        """The row as the report records it."""
        study = self.study
        return {
            "method": "surrogate-vs-solid-angle", "buffer_size": self.k, "k": self.k,
            "dim": self.dim, "seeds": [self.seed], "n_sets": self.n_sets,
            "n_samples": self.n_samples, "pearson": study.pearson,
            "spearman": study.spearman, "log_pearson": study.log_pearson,
            "pearson_sign": study.pearson_sign, "spearman_sign": study.spearman_sign,
            "monotone_increasing": study.spearman > 0,
            "zero_estimates": sum(r["solid_angle"] <= 0 for r in study.records),
            "records": jsonable(study.records),
        }


@dataclass
class Figure2Plan:
    """Figure 2's choices: vectors per set, dimension, sets, draws, seeds.

    :param chosen: the choices.
    :param ks: the vectors per set.
    """

    chosen: Choices
    ks: tuple[int, ...]


class Figure2(Experiment[Figure2Plan]):
    """Surrogate vs solid angle of random vector sets (paper Figure 2, appendix A).

    ``--buffer-sizes`` sets the vectors per set ``k``; ``--seeds`` the generator seeds.
    """

    def plan(self, args: Options) -> Figure2Plan:
        """The studies to run (no sweep: each is a few seconds of arithmetic).

        :param args: the parsed command line.
        """
        chosen = chosen_for(args, FIGURE2)
        return Figure2Plan(chosen, tuple(args.buffer_sizes) if args.buffer_sizes
                           else chosen["ks"])

    def report(self, args: Options, argv: Sequence[str] | None,
               plan: Figure2Plan, results: Sequence[JsonObject]) -> Report:
        """Run the studies; their correlations.

        :param args: the parsed command line.
        :param argv: the command line.
        :param plan: the plan.
        :param results: none.
        """
        chosen = plan.chosen
        rows = [_study(chosen, k, seed) for seed in chosen["seeds"] for k in plan.ks]
        source = (f"synthetic: random vector sets in {chosen['dim']} dimensions "
                  "(avalanche_gss.solid_angle.shared_direction_set), no dataset")
        protocol: JsonObject = {**{k: jsonable(v) for k, v in chosen.items()},
                                "ks": list(plan.ks), "quick": args.quick,
                                "expected_sign": SIGN_NOTE}
        return Report("figure2", "surrogate (Eq. 5) vs Monte Carlo solid angle (Eq. 4) "
                      "(paper Figure 2)", DataFacts("synthetic", source, checked=False),
                      command(argv, prog_of(args)), protocol, rows)

    def render(self, report: Report, plan: Figure2Plan, paths: Mapping[str, str]) -> Rendered:
        """The plot, the records' CSV and the correlations' table.

        :param report: the report.
        :param plan: the plan.
        :param paths: the output files.
        """
        rows = [r for r in report.rows if isinstance(r, SurrogateRow)]
        chosen = plan.chosen
        studies = {f"k={r.k}" + (f", seed {r.seed}" if len(chosen["seeds"]) > 1 else ""):
                   r.study for r in rows}
        png = plot_surrogate(studies, os.path.join(os.path.dirname(paths["md"]), "figure2.png"),
                             title=f"Surrogate vs solid angle, {chosen['dim']} dimensions")
        return Rendered(_markdown(report, rows, chosen, png), _csv(rows), {"png": png})


def _study(chosen: Choices, k: int, seed: int) -> SurrogateRow:
    """One study of ``k`` vectors per set, its log lines."""
    log.info("figure2: %d sets of %d vectors in %d dims, %d draws each (seed %d)",
             chosen["n_sets"], k, chosen["dim"], chosen["n_samples"], seed)
    study = surrogate_vs_solid_angle(
        chosen["n_sets"], k, chosen["dim"], chosen["n_samples"],
        torch.Generator().manual_seed(seed),
        correlation_range=chosen["correlation_range"], jitter=chosen["jitter"])
    log.info("figure2 k=%d: Pearson %+.3f, Spearman %+.3f", k, study.pearson, study.spearman)
    return SurrogateRow(k, chosen["dim"], seed, chosen["n_sets"], chosen["n_samples"], study)


def _csv(rows: Sequence[SurrogateRow]) -> str:
    """One line per vector set of every study."""
    with io.StringIO(newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["k", "seed", "set", "target_correlation", "surrogate", "solid_angle",
                         "stderr", "span_dim"])
        for row in rows:
            for i, r in enumerate(row.study.records):
                writer.writerow([row.k, row.seed, i, f"{r['correlation']:.4f}",
                                 f"{r['surrogate']:.4f}", f"{r['solid_angle']:.6g}",
                                 f"{r['stderr']:.3g}", int(r["span_dim"])])
        return f.getvalue()


def _markdown(report: Report, rows: Sequence[SurrogateRow], chosen: Choices, png: str) -> str:
    """The correlations' table, with what its columns are."""
    lines = [
        "# figure2: surrogate vs solid angle (paper Figure 2)", "",
        f"Data: {report.data.source}", "",
        f"{chosen['n_sets']} sets per row; solid angle by Monte Carlo with "
        f"{chosen['n_samples']:,} Gaussian draws in the span (standard error <= "
        f"{0.5 / chosen['n_samples'] ** 0.5:.1e}, appendix A). The paper reports a monotonic "
        "relation (log scale); a positive Spearman correlation is that relation.", "",
        "Columns: k: vectors per set (the buffer size of Eq. 4); dim: their dimension; "
        "Pearson and Spearman (rank) correlations of the surrogate with the solid angle; "
        "Pearson (surrogate, log10 angle): with the angle's logarithm (estimates of 0 left "
        "out); sign: of the Pearson and Spearman correlations; estimates = 0: sets whose "
        "Monte Carlo estimate is 0.", "",
        "| k (vectors) | dim | Pearson | Spearman (rank) | Pearson (surrogate, log10 angle) "
        "| sign (Pearson / Spearman) | estimates = 0 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        s, zeros = row.study, sum(r["solid_angle"] <= 0 for r in row.study.records)
        lines.append(
            f"| {row.k} | {row.dim} | {s.pearson:+.3f} | {s.spearman:+.3f} | "
            f"{s.log_pearson:+.3f} | {s.pearson_sign:+d} / {s.spearman_sign:+d} | {zeros} |")
    lines += ["", f"Plot: `{png}`", "", f"Command: `{report.command}`", ""]
    return "\n".join(lines)


FIGURE2_EXPERIMENT = Figure2("figure2", "")
"""The ``figure2`` experiment."""
