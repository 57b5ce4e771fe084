"""``python -m reproduce figure2``: surrogate against solid angle (paper Figure 2).

Surrogate (Eq. 5) against Monte Carlo solid angle (Eq. 4) of random vector sets in 200
dimensions, with their Pearson and Spearman correlations.
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import os
import time
from collections.abc import Sequence

import torch

from avalanche_gss.reproduce.common import command, prog_of
from avalanche_gss.reproduce.experiments.figure_runs import FIGURE2, chosen_for
from avalanche_gss.reproduce.reports.outputs import show_outputs
from avalanche_gss.reproduce.reports.plotting import plot_surrogate_vs_solid_angle as plot_surrogate
from avalanche_gss.reproduce.reports.writing import output_paths, write_report
from avalanche_gss.solid_angle import SurrogateStudy, surrogate_vs_solid_angle

log = logging.getLogger("reproduce")


def figure2(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Surrogate vs solid angle of random vector sets (paper Figure 2, appendix A).

    ``--buffer-sizes`` sets the vectors per set ``k``; ``--seeds`` the generator seeds.

    :param args: the parsed command line.
    :param argv: the command line (for the record; ``sys.argv`` by default).
    :return: the exit status.
    """
    chosen = chosen_for(args, FIGURE2)
    ks = tuple(args.buffer_sizes) if args.buffer_sizes else chosen["ks"]
    start = time.perf_counter()
    studies: dict[str, SurrogateStudy] = {}
    rows = []
    for seed in chosen["seeds"]:
        for k in ks:
            log.info("figure2: %d sets of %d vectors in %d dims, %d draws each (seed %d)",
                     chosen["n_sets"], k, chosen["dim"], chosen["n_samples"], seed)
            study = surrogate_vs_solid_angle(
                chosen["n_sets"], k, chosen["dim"], chosen["n_samples"],
                torch.Generator().manual_seed(seed),
                correlation_range=tuple(chosen["correlation_range"]), jitter=chosen["jitter"])
            label = f"k={k}" + (f", seed {seed}" if len(chosen["seeds"]) > 1 else "")
            studies[label] = study
            log.info("figure2 k=%d: Pearson %+.3f, Spearman %+.3f", k, study.pearson,
                     study.spearman)
            rows.append({
                "method": "surrogate-vs-solid-angle", "buffer_size": k, "k": k,
                "dim": chosen["dim"], "seeds": [seed], "n_sets": chosen["n_sets"],
                "n_samples": chosen["n_samples"], "pearson": study.pearson,
                "spearman": study.spearman, "log_pearson": study.log_pearson,
                "pearson_sign": study.pearson_sign, "spearman_sign": study.spearman_sign,
                "monotone_increasing": study.spearman > 0,
                "zero_estimates": sum(r["solid_angle"] <= 0 for r in study.records),
                "records": study.records,
            })
    paths = output_paths(args.out, "figure2", "json", "csv", "md")
    paths["png"] = plot_surrogate(
        studies, os.path.join(args.out, "figure2.png"),
        title=f"Surrogate vs solid angle, {chosen['dim']} dimensions")
    with io.StringIO(newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["k", "seed", "set", "target_correlation", "surrogate", "solid_angle",
                         "stderr", "span_dim"])
        for row in rows:
            for i, r in enumerate(row["records"]):
                writer.writerow([row["k"], row["seeds"][0], i, f"{r['correlation']:.4f}",
                                 f"{r['surrogate']:.4f}", f"{r['solid_angle']:.6g}",
                                 f"{r['stderr']:.3g}", int(r["span_dim"])])
        csv_text = f.getvalue()
    cmd = command(argv, prog_of(args))
    source = (f"synthetic: random vector sets in {chosen['dim']} dimensions "
              "(avalanche_gss.solid_angle.shared_direction_set), no dataset")
    report = {
        "experiment": "figure2",
        "title": "surrogate (Eq. 5) vs Monte Carlo solid angle (Eq. 4) (paper Figure 2)",
        "dataset": "synthetic", "data_source": source, "command": cmd,
        "protocol": {**{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items()},
                     "ks": list(ks), "quick": args.quick,
                     "expected_sign": "+ (a smaller surrogate goes with a smaller solid "
                                      "angle: the monotonic relation the paper needs)"},
        "rows": rows,
        "wall_seconds": time.perf_counter() - start,
    }
    lines = [
        "# figure2: surrogate vs solid angle (paper Figure 2)", "", f"Data: {source}", "",
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
        lines.append(
            f"| {row['k']} | {row['dim']} | {row['pearson']:+.3f} | {row['spearman']:+.3f} | "
            f"{row['log_pearson']:+.3f} | {row['pearson_sign']:+d} / {row['spearman_sign']:+d} "
            f"| {row['zero_estimates']} |")
    lines += ["", f"Plot: `{paths['png']}`", "", f"Command: `{cmd}`", ""]
    write_report(paths, report, csv_text, "\n".join(lines))
    return show_outputs(paths, prog=prog_of(args))
