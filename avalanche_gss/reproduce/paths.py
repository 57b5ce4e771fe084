"""Output folders the command line checks before any run (standard library only)."""

from __future__ import annotations

import argparse
import os

from avalanche_gss.reproduce.options import Options

__all__ = ["check_paths", "unwritable"]


def unwritable(folder: str) -> str | None:
    """Say why files cannot be written in ``folder``, or return ``None`` if they can.

    Missing folders are created for the test and removed again, so that a command refused
    later, before any run, leaves nothing behind; the test writes and removes a probe file
    (permission bits alone say nothing when running as root).

    :param folder: the output, cache or TensorBoard folder a command names.
    """
    created = []
    parent = os.path.abspath(folder)
    while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        created.append(parent)
        parent = os.path.dirname(parent)
    try:
        if os.path.lexists(folder) and not os.path.isdir(folder):
            return "exists and is not a directory"
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".avalanche-gss-probe-{os.getpid()}")
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"probe")
        finally:
            os.close(fd)
            os.unlink(probe)
    except NotADirectoryError:
        return "not a directory (a part of the path is a file)"
    except OSError as err:
        return f"not writable ({err.strerror or err})"
    finally:
        for path in created:  # innermost first
            try:
                os.rmdir(path)
            except OSError:
                break
    return None


def check_paths(parser: argparse.ArgumentParser, args: Options) -> None:
    """Refuse, before any run, an output, cache or TensorBoard folder that cannot be written.

    :param parser: reports the refusal (one line, naming the option and the folder).
    :param args: the parsed command line.
    """
    folders = [("--out", args.out)]
    if args.cache is not None:
        folders.append(("--cache", args.cache))
    elif args.experiment != "composition":  # the default cache: OUT/cache/EXPERIMENT
        folders.append(("--out", os.path.join(args.out, "cache", args.experiment)))
    if args.tensorboard is not None:
        folders.append(("--tensorboard", args.tensorboard))
    for flag, folder in folders:
        why = unwritable(folder)
        if why is not None:
            parser.error(f"{flag} {folder}: {why}")
