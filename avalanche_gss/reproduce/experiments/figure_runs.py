"""What the figures of ``python -m reproduce`` share: their settings, their job, their data.

Each figure's runs go through :func:`~avalanche_gss.reproduce.runs.sweep.run_sweep` with
:func:`figure_job`, so a stopped sweep resumes from ``--cache``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from avalanche_gss.reproduce.common import (
    data_identity,
    load_checked,
    prepare_job,
    prog_of,
    resolve_choices,
    resolve_data,
    settings_by_method,
    settings_from_dict,
)
from avalanche_gss.reproduce.experiments.protocols import (
    PAPER_DATA,
    PROTOCOLS,
    data_label,
    disjoint_stream,
)
from avalanche_gss.reproduce.runs.evaluation import run_curve
from avalanche_gss.reproduce.runs.planning import job_config, sweep
from avalanche_gss.reproduce.runs.sweep import job_name
from avalanche_gss.reproduce.runs.training import VARIANT_METHODS, VARIANTS
from avalanche_gss.reproduce.runs.training import run as run_one
from avalanche_gss.streams import ArrayDataset, TaskSplit

FIGURE2: dict[str, Any] = {
    "dim": 200, "ks": (5, 10, 20), "n_sets": 200, "n_samples": 1_000_000,
    "correlation_range": (0.0, 0.9), "jitter": 0.5, "seeds": (0,),
    "quick": {"ks": (5, 10), "n_sets": 60, "n_samples": 50_000},
}
"""Figure 2: vectors per set ``k`` (the buffer size of Eq. 4), sets, Monte Carlo draws."""

FIGURE4: dict[str, Any] = {
    "methods": ("GSS-Greedy", "GSS-IQP", "GEM", "iCaRL", "Single", "iid-online",
                "iid-offline"),
    "buffer_sizes": (300,), "seeds": (0, 1, 2), "samples_per_task": 1000,
    "every_samples": 100,
    "quick": {"seeds": (0,), "samples_per_task": 100, "every_samples": 50},
}
"""Figure 4 (disjoint MNIST, 1k samples per task, accuracy every 100 samples; ``--quick``:
100 samples per task, accuracy every 50)."""

FIGURE5: dict[str, Any] = {
    "methods": ("GSS-Greedy",), "buffer_sizes": (300,), "seeds": (0, 1, 2),
    "samples_per_task": 1000, "n_values": (1, 2, 5, 10, 20, 50),
    "batch_sizes": (1, 5, 10, 20, 50, 100), "n": 10, "batch_size": 10,
    "quick": {"seeds": (0,), "samples_per_task": 100, "n_values": (1, 10, 50),
              "batch_sizes": (1, 10, 50)},
}
"""Figure 5: ``n`` at batch size 10, batch size at ``n = 10`` (replay batches stay 10;
``--quick``: 100 samples per task, three values of each)."""

PAPER_FIGURE5_N = {1: 67.3}
"""The only number the paper's text gives for Figure 5 (GSS-Greedy, ``n = 1``)."""

DISJOINT = PROTOCOLS["table1"]  # lr, n_iter of the disjoint MNIST experiments


def _split(config: dict[str, Any], seed: int) -> TaskSplit:
    data = load_checked(config)
    return disjoint_stream(config["samples_per_task"])(data, seed, {})


def figure_job(config: dict[str, Any]) -> dict[str, Any]:
    """One run of a figure (module-level, so worker processes and submitit can pickle it).

    :param config: ``kind`` (``"curve"``: :func:`~avalanche_gss.reproduce.runs.evaluation.run_curve`
        every ``every_samples``; ``"final"``: :func:`~avalanche_gss.reproduce.runs.training.run`),
        ``data``, ``root``, ``download``, ``samples_per_task``, ``settings`` and
        ``label`` (the run's name in its log lines, unique in its sweep).
    :return: the :class:`CurveResult` or :class:`RunResult` as a dict.
    """
    prepare_job(config)  # a worker process: the user modules its method comes from
    settings = settings_from_dict(config["settings"])
    split = _split(config, settings.seed)
    if config["kind"] == "curve":
        return run_curve(settings, split, every_samples=config["every_samples"],
                         label=job_name(config)).to_dict()
    return run_one(settings, split, label=job_name(config)).to_dict()


def chosen_for(args: argparse.Namespace, spec: dict[str, Any]) -> dict[str, Any]:
    """The spec's settings, its ``quick`` ones under ``--quick``, then the command line's."""
    return resolve_choices(args, {k: v for k, v in spec.items() if k != "quick"},
                           spec["quick"], ("methods", "seeds", "buffer_sizes"))


def figure_sweep(args: argparse.Namespace, configs: list[dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """Run (or find in the cache) a figure's jobs (:func:`figure_job`); their results."""
    return sweep(args, args.experiment, configs, figure_job)


def base_config(args: argparse.Namespace, data_name: str, samples_per_task: int,
                data: ArrayDataset) -> dict[str, Any]:
    """What every job of a figure holds (:func:`.planning.job_config`)."""
    return job_config(args, args.experiment, data_name, data_identity(data),
                      samples_per_task=samples_per_task)


def figure_data_label(data: ArrayDataset) -> tuple[str, bool]:
    """How the data are named in titles; whether they were verified to be MNIST (or subset)."""
    return data_label(data), data.verified_as in PAPER_DATA["mnist"]


def stream_protocol(args: argparse.Namespace, data_name: str, samples_per_task: int,
                    seed: int) -> tuple[ArrayDataset, TaskSplit, dict[str, Any]]:
    """The data (checked for the disjoint protocol), the first seed's stream, its protocol.

    :raises SystemExit: one line naming the data, when they do not fit the protocol.
    """
    _, data = resolve_data(args, DISJOINT)  # one-line errors for data that cannot load
    try:
        DISJOINT.check(data)
    except ValueError as err:
        raise SystemExit(f"{prog_of(args)}: error: --data {data_name}: {err}") from None
    split = disjoint_stream(samples_per_task)(data, seed, {})
    stream = {k: v for k, v in split.protocol.items() if k != "deviations"}
    return data, split, {"stream": stream, "deviations": split.protocol.get("deviations", [])}


def method_overrides(configs: Sequence[dict[str, Any]], lr: float, n_iter: int
               ) -> dict[str, dict[str, Any]]:
    """Each method's learning rate and iterations per batch where they are not the figure's.

    The authors' scripts give GEM, iCaRL and the baselines their own.
    """
    by_method = settings_by_method([c["settings"] for c in configs])
    found = {m: {k: s[k] for k, base in (("lr", lr), ("n_iter", n_iter)) if s[k] != base}
             for m, s in by_method.items()}
    return {m: o for m, o in found.items() if o}


def row_label(method: str, keys: dict[str, Any]) -> str:
    """A row's method, with its variant in parentheses where it has one."""
    return method + (f" ({keys['variant']})" if "variant" in keys else "")


def flavours(args: argparse.Namespace, method: str) -> list[dict[str, Any]]:
    """A method with variants once per ``--variants`` entry; other methods once."""
    if method in VARIANT_METHODS:
        return [{"variant": v} for v in (getattr(args, "variants", None) or VARIANTS)]
    return [{}]
