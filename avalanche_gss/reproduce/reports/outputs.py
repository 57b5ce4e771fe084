"""How every experiment's outputs are written and shown, and its failures said.

Every experiment writes through :func:`avalanche_gss.reproduce.reports.writing.write_report` (its
report,
rows as :meth:`~avalanche_gss.reproduce.reports.rows.Row.to_dict` records them, its CSV and
Markdown, beside
the PNG of its figure); :func:`show_outputs` prints the Markdown and names the files. The
messages name the program as the user ran it (``prog``).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence

from avalanche_gss._files import read_regular
from avalanche_gss.reproduce.json_types import Json, json_object
from avalanche_gss.reproduce.program import PROG
from avalanche_gss.reproduce.reports.writing import DIVERGED_SHARE
from avalanche_gss.reproduce.runs.cache import IgnoredResultWarning
from avalanche_gss.reproduce.runs.settings import settings_from_dict
from avalanche_gss.reproduce.runs.sweep import (
    SweepError,
    SweepInterrupted,
    UncachedResultWarning,
    config_key,
    job_name,
)
from avalanche_gss.reproduce.runs.training import run_label
from avalanche_gss.streams.datasets import OfflineDigitsWarning

log = logging.getLogger("reproduce")


SHOWN_BYTES = 64 * 2**20
"""The largest Markdown report :func:`show_outputs` reads back to print it."""


def show_outputs(paths: dict[str, str], diverged: Sequence[str] = (),
                 prog: str = PROG) -> int:
    """Print the Markdown report and one line naming the files written; flag divergence.

    :param paths: the files written, the Markdown one under ``"md"``.
    :param diverged: a label for each run that diverged.
    :param prog: the program, as the user ran it.
    :return: the exit status: 3 if a run diverged, else 0.
    :raises OSError: the Markdown file is no longer the regular file written (a link, a
        FIFO put in its place), or is over :data:`SHOWN_BYTES`: one line naming it.
    """
    print(read_regular(paths["md"], limit=SHOWN_BYTES, what="report").decode())
    print("Wrote " + ", ".join(paths.values()))
    if diverged:
        print(f"{prog}: error: {len(diverged)} run(s) diverged (more than "
              f"{DIVERGED_SHARE:.0%} of their steps skipped): {', '.join(diverged)}",
              file=sys.stderr)
        return 3
    return 0


_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)


def unwritten(err: OSError, out: str, prog: str) -> int:
    """Report, in one line naming the file, an output that could not be written; exit status.

    :raises OSError: ``err`` again when it names no file and is no disk or permission error.
    """
    where = err.filename2 or err.filename
    reason = " ".join((err.strerror or str(err)).split())
    if where is not None:
        line = f"{os.fsdecode(where)}: {reason}"
    elif reason.startswith("cannot write "):  # the atomic writer names its file
        line = reason
    elif err.errno in _DISK_ERRORS:
        line = f"--out {out}: {reason}"
    else:
        raise err
    print(f"{prog}: error: {line}", file=sys.stderr)
    return 1


class _OneLineWarnings:
    """``warnings.formatwarning`` that writes the harness's warnings as ``PROG: warning: ...``.

    :param prog: the command's name.
    :param shown_before: the function it replaced, which formats every other warning.
    """

    def __init__(self, prog: str, shown_before: Callable[..., str]) -> None:
        self.prog = prog
        self.shown_before = shown_before

    def __call__(self, message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, line: str | None = None) -> str:
        if issubclass(category, (UncachedResultWarning, IgnoredResultWarning,
                                 OfflineDigitsWarning)):
            return f"{self.prog}: warning: {message}\n"
        return self.shown_before(message, category, filename, lineno, line)


def one_line_warnings(prog: str) -> None:
    """Show the harness's warnings as one line each (command line only).

    Those of a result that could not be cached, of a stored one that is not believed (its
    job runs again), and of the shipped digits standing in for a missing MNIST.
    """
    shown = warnings.formatwarning
    if isinstance(shown, _OneLineWarnings):  # installed by an earlier command
        shown = shown.shown_before
    warnings.formatwarning = _OneLineWarnings(prog, shown)


INTERRUPTED = 130
"""The exit status of a command stopped by ``Ctrl-C`` (128 + SIGINT, as a shell reports it)."""


def interrupted(err: SweepInterrupted, prog: str) -> int:
    """Say, in one line, that the sweep was interrupted and what is kept; the exit status.

    :param err: the interrupted sweep (how many of its runs are cached, and where).
    :param prog: the program, as the user ran it.
    :return: :data:`INTERRUPTED`.
    """
    print(f"{prog}: interrupted; {err.cached} of {err.total} run(s) are cached in "
          f"{err.cache_dir}; run the same command again to continue", file=sys.stderr)
    return INTERRUPTED


def _label(config: Mapping[str, Json]) -> str:
    """A job's name: its ``label``, else its settings' :func:`run_label`, else its key."""
    named = job_name(config)
    if named is not None:
        return named
    try:
        return run_label(settings_from_dict(json_object(config["settings"])))
    except (KeyError, TypeError, ValueError):
        return f"job {config_key(config)[:12]}"


def failed(err: SweepError, prog: str) -> int:
    """Report each failed run's own error, one line each; return the exit status."""
    log.error("%d run(s) failed:", len(err.failures))
    for cfg, exc in err.failures:
        log.error("  %s: %s: %s", _label(cfg), type(exc).__name__, exc)
    first_cfg, first = err.failures[0]
    message = " ".join(str(first).split())
    print(f"{prog}: error: {len(err.failures)} run(s) failed; first: {_label(first_cfg)}: "
          f"{type(first).__name__}: {message}", file=sys.stderr)
    return 1
