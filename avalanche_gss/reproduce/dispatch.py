"""Run the experiment a parsed command line names (``python -m reproduce <experiment>``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import torch

from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.program import prog_of
from avalanche_gss.reproduce.runs.seeding import resolve_device


def run_experiment(args: Options, argv: Sequence[str] | None = None) -> int:
    """Run the experiment the parsed command line names; return the exit status.

    :param args: the parsed command line; ``args.prog`` names the program as the user ran
        it (``python -m reproduce`` when absent).
    :param argv: the command line (for the record; ``sys.argv`` by default).
    """
    prog = prog_of(args)
    try:  # before Avalanche loads (seconds): a device this machine lacks is refused at once
        args = dataclasses.replace(args, device=resolve_device(args.device))
    except ValueError as err:
        raise SystemExit(f"{prog}: error: argument --device: {err}") from None
    from avalanche_gss.reproduce.experiments.registry import EXPERIMENTS
    from avalanche_gss.reproduce.reports.outputs import (
        failed,
        interrupted,
        one_line_warnings,
        unwritten,
    )
    from avalanche_gss.reproduce.runs.sweep import SweepError, SweepInterrupted

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    one_line_warnings(prog)
    # The command line's own setting (--threads, default 1), not a library side effect.
    torch.set_num_threads(args.threads)
    try:
        return EXPERIMENTS.get(args.experiment).load().run(args, argv)
    except SweepError as err:
        return failed(err, prog)
    except SweepInterrupted as err:  # Ctrl-C during a sweep: no run started after it
        return interrupted(err, prog)
    except OSError as err:  # an output (or a cache folder) that cannot be written
        return unwritten(err, args.out, prog)
