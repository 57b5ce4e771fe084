"""How the command is named in usage, error lines and recorded commands (standard library only).

At the bottom of the harness's layers: the engine (``runs/``), the reports and the
experiments name the program without importing the command line.
"""

from __future__ import annotations

__all__ = ["PROG", "prog_of"]

PROG = "python -m reproduce"
"""The command as usage and error lines name it (the ``avalanche-gss`` script passes its own)."""


def prog_of(args: object) -> str:
    """The program as the user ran it (``args.prog``, set by the entry point).

    :param args: the parsed command line (an :class:`~.options.Options`), or anything with
        a ``prog``.

    ``python -m reproduce`` from a checkout, ``python -m avalanche_gss.reproduce`` or
    ``avalanche-gss``; every message and recorded command names it so.
    """
    return str(getattr(args, "prog", PROG))
