"""``python -m reproduce <experiment>``: the paper's tables and figures from this library.

The command line is parsed before torch or Avalanche is imported (``reproduce.cli``), so
``--help`` and a bad value answer at once; the experiments live in ``reproduce.tables``,
``reproduce.figures``, ``reproduce.composition`` and ``reproduce.which_buffer``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from reproduce.cli import parse_args


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m reproduce`` with ``argv`` (``sys.argv[1:]`` by default); exit status."""
    args = parse_args(argv)
    from reproduce.tables import run_experiment  # torch, Avalanche: only after parsing

    return run_experiment(args, argv)


if __name__ == "__main__":
    sys.exit(main())
