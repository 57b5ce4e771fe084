"""``python -m reproduce <experiment>``: the paper's tables and figures from this library.

The command line is parsed before torch or Avalanche is imported (``cli``), so ``--help``
and a bad value answer at once; the experiments live in ``tables``, ``figures``,
``composition`` and ``which_buffer`` of this package. Installed, it is
``python -m avalanche_gss.reproduce`` or the ``avalanche-gss`` command; from a checkout,
``python -m reproduce`` too.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence

from avalanche_gss.reproduce.cli import DATA_COMMAND, PROG, data_main, parse_args

SCRIPT = "avalanche-gss"
"""The console script that ``pip install`` puts on the path (``[project.scripts]``)."""

MODULE = "python -m avalanche_gss.reproduce"
"""This package run as a module."""

CHECKOUT = PROG
"""The checkout's shim (``reproduce/__main__.py``): ``python -m reproduce``."""


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run ``python -m reproduce`` with ``argv`` (``sys.argv[1:]`` by default); exit status.

    :param argv: the arguments after the command.
    :param prog: the command as the user ran it: usage, error lines and the command each
        output records name it so (:data:`MODULE`, :data:`SCRIPT` or :data:`CHECKOUT`).
    """
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        if argv[:1] == [DATA_COMMAND]:  # python -m reproduce data fetch ...
            return data_main(argv[1:], prog)
        args = dataclasses.replace(parse_args(argv, prog=prog), prog=prog)
        # torch, Avalanche: only after parsing
        from avalanche_gss.reproduce.dispatch import run_experiment

        return run_experiment(args, argv)
    except KeyboardInterrupt:  # Ctrl-C outside a sweep (a sweep's says what it kept)
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def script() -> int:
    """The ``avalanche-gss`` command: :func:`main` on ``sys.argv[1:]``, named as typed.

    The current folder is importable first, as ``python -m`` makes it (the command's own
    ``sys.path``, which its worker processes start with): ``--import mymodule`` finds
    ``mymodule.py`` there under both forms of the command.
    """
    here = os.getcwd()
    if os.path.realpath(sys.path[0] if sys.path else "") != os.path.realpath(here):
        sys.path.insert(0, here)
    return main(prog=SCRIPT)


if __name__ == "__main__":
    sys.exit(main(prog=MODULE))
