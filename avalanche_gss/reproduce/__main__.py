"""``python -m reproduce <experiment>``: the paper's tables and figures from this library.

The command line is parsed before torch or Avalanche is imported (``cli``), so ``--help``
and a bad value answer at once; the experiments live in ``tables``, ``figures``,
``composition`` and ``which_buffer`` of this package. Installed, it is
``python -m avalanche_gss.reproduce``; from a checkout, ``python -m reproduce`` too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from avalanche_gss.reproduce.cli import parse_args


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m reproduce`` with ``argv`` (``sys.argv[1:]`` by default); exit status."""
    args = parse_args(argv)
    # torch, Avalanche: only after parsing
    from avalanche_gss.reproduce.tables import run_experiment

    return run_experiment(args, argv)


if __name__ == "__main__":
    sys.exit(main())
