"""What every ``python -m reproduce`` experiment shares: data, run settings, the command."""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

from avalanche_gss.reproduce.experiments.protocols import METHOD_OVERRIDES, Protocol, Variant
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.program import PROG, prog_of  # noqa: F401 (re-exported)
from avalanche_gss.reproduce.runs.identity import STANDIN, load
from avalanche_gss.reproduce.runs.settings import (
    BUFFER_METHODS,
    RunSettings,
    make_settings,
    split_keywords,
)
from avalanche_gss.streams import ArrayDataset

log = logging.getLogger("reproduce")


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def resolve_data(args: Options, protocol: Protocol) -> tuple[str, ArrayDataset]:
    """The dataset to use: ``--data``, the protocol's, or (``--quick`` only) the stand-in.

    :raises SystemExit: with a one-line message naming the data, when they cannot be
        loaded or are not valid.
    """
    name = args.data or protocol.dataset
    prog = prog_of(args)
    try:
        return name, load(name, args.root, args.download)
    except FileNotFoundError as err:
        if name.lower().endswith(".npz"):
            raise SystemExit(f"{prog}: error: --data: {_one_line(err)}") from None
        if not (protocol.standin and args.quick and args.data is None):
            # The loader's message says what to pass, as download=True and as --download
            raise SystemExit(f"{prog}: error: --data {name}: {_one_line(err).rstrip('.')}"
                             ) from None
        log.warning("%s; --quick runs on a generated stand-in instead (not CIFAR-10)",
                    _one_line(err).rstrip("."))
        return STANDIN, load(STANDIN, None, False)
    except ValueError as err:
        raise SystemExit(f"{prog}: error: --data {name}: {_one_line(err)}") from None


class Choices(TypedDict, total=False):
    """An experiment's choices (:func:`resolve_choices`); each experiment has some of them.

    :param methods: the methods (``METHOD`` or ``METHOD:OPTION=VALUE,...``).
    :param policies: which-buffer's selection policies.
    :param streams: which-buffer's streams.
    :param buffer_sizes: the buffer sizes ``M``.
    :param seeds: the seeds.
    :param variants: the rows' stream variants (Table 4: its sequences).
    :param samples_per_task: training samples per task.
    :param every: composition: training samples between two records.
    :param every_samples: figure 4: training samples between two evaluations.
    :param n_values: figure 5: the ``n`` (gradient-memory size) values.
    :param batch_sizes: figure 5: the batch sizes.
    :param n: figure 5: ``n`` where the batch size varies.
    :param batch_size: figure 5: the batch size where ``n`` varies.
    :param dim: figure 2: the vectors' dimension.
    :param ks: figure 2: the subset sizes ``k``.
    :param n_sets: figure 2: vector sets per ``k``.
    :param n_samples: figure 2: Monte-Carlo samples of each solid angle.
    :param correlation_range: figure 2: the range of the sets' correlations.
    :param jitter: figure 2: the sets' jitter.
    """

    methods: tuple[str, ...]
    policies: tuple[str, ...]
    streams: tuple[str, ...]
    buffer_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    variants: tuple[Variant, ...]
    samples_per_task: int
    every: int
    every_samples: int
    n_values: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    n: int
    batch_size: int
    dim: int
    ks: tuple[int, ...]
    n_sets: int
    n_samples: int
    correlation_range: tuple[float, float]
    jitter: float


def resolve_choices(args: Options, defaults: Mapping[str, object],
                    quick: Mapping[str, object], options: Sequence[str]) -> Choices:
    """What an experiment runs: its defaults, ``--quick``'s, then the command line's.

    The command line's ``options`` replace the choice of the same name where it is given
    and the defaults have that choice.

    :param args: the parsed command line.
    :param defaults: the experiment's choices (methods, buffer sizes, seeds...), in the
        order its report lists them.
    :param quick: those ``--quick`` replaces or adds.
    :param options: the command-line options that replace a choice of the same name.
    """
    chosen = dict(defaults)
    if args.quick:
        chosen.update(quick)
    for key in options:
        if getattr(args, key, None) is not None and key in chosen:
            chosen[key] = tuple(getattr(args, key))
    return cast(Choices, chosen)


def settings_for(args: Options, protocol: Protocol, method: str,
                 **fields: Any) -> RunSettings:
    """Return a run's settings.

    The protocol's, then the authors' per-method overrides, then the command line's
    ``--lr``/``--n-iter``/``--replay-batch-size`` (the buffer methods')/``--device``, then
    ``fields``: settings by their flat or namespaced names (``lr``, ``training.lr``) and
    the method's options, each read as
    :func:`~avalanche_gss.reproduce.runs.settings.split_keywords` reads it.
    """
    values: dict[str, object] = {"training.lr": protocol.lr, "training.n_iter": protocol.n_iter,
                                 "training.device": args.device,
                                 "training.model": protocol.model}
    values.update(split_keywords(method, METHOD_OVERRIDES.get(method, {}))[0])
    if args.n_iter is not None and method in BUFFER_METHODS:
        values["training.n_iter"] = args.n_iter
    if args.lr is not None:
        values["training.lr"] = args.lr
    replay = getattr(args, "replay_batch_size", None)
    if replay is not None and method in BUFFER_METHODS:
        values["replay.batch_size"] = replay
    settings, options = split_keywords(method, fields)
    return make_settings(method, options=options, **{**values, **settings})


def command(argv: Sequence[str] | None = None, prog: str = PROG) -> str:
    """The command line, as it is recorded in every output.

    :param argv: the arguments after the program (``sys.argv[1:]`` by default).
    :param prog: the program, as the user ran it (:func:`prog_of`).
    """
    words = sys.argv[1:] if argv is None else argv
    return f"{prog} " + " ".join(shlex.quote(a) for a in words)
