"""``python -m reproduce which-buffer``: which buffer policy for which stream, and its cost.

Not a table of the paper: every policy of
:data:`~avalanche_gss.reproduce.experiments.policies.POLICIES`
on every chosen stream of :data:`~avalanche_gss.reproduce.experiments.policies.STREAMS` (by default
those on the digits: disjoint, permuted, imbalanced sequences 1-5, blurry; or Table 3's
CIFAR-10 streams, disjoint and blurry, with the ResNet-18: one kind per run) at every
buffer size and seed, each run with its stream's protocol (learning rate, iterations per
batch, model). A policy that cannot train its streams' model (``CB-GSS (step)`` reads
per-sample gradients off the training step, which the ResNet-18's train-mode BatchNorm
mixes) is refused before any run when ``--policies`` names it, and left out of the
default policies, with a log line and the report's ``policies_left_out`` saying why
(:func:`fit_model`). The runs go through the
tables' job (:func:`~avalanche_gss.reproduce.runs.jobs.run_job`) and
:func:`~avalanche_gss.reproduce.runs.sweep.run_sweep`, so they are cached and a stopped sweep
resumes.
Outputs, in ``--out``:

- ``which_buffer.md``: one table, rows = policies, columns = streams x buffer sizes, each
  cell the final average accuracy ``mean ± std`` over seeds and the mean training seconds
  of one run; the best policy of each column in bold; then the policies ranked by their
  mean rank across the columns.
- ``which_buffer.csv``: one line per run (policy, stream, buffer size, seed, accuracy per
  task, training seconds); ``which_buffer.json``: the same, grouped by seeds, with the
  ranking, each stream's protocol and the provenance (data source, seeds, command,
  versions).
- ``which_buffer.png``: accuracy against training seconds, one panel per stream family.
- ``which_buffer_composition.md`` / ``.json`` / ``.csv``: what each policy's buffer holds
  at every task end of the disjoint stream (the digits' or CIFAR-10's) and of the first
  imbalanced sequence run (each task's share of the stored samples), traced during the
  same runs.

With ``--compute-matched`` each run also counts its model's passes, and each policy runs
again on its compute-matched stream
(:mod:`~avalanche_gss.reproduce.experiments.which_buffer_matched`):
the rows gain its relative cost ``C`` and its compute-matched accuracy, the table a
compute-matched section and a second ranking, by compute-matched accuracy.

With ``--lr-grid`` a first stage tunes each policy's learning rate: every policy at every
value of the grid, on ``--tune-seeds`` (seeds apart from the reported ones) and every
chosen stream and buffer size; each policy then runs at the value of its best mean
accuracy there (each seed's accuracy the mix of the families, as the recommendation
weighs them), and the report's protocol stores the grid, the seeds, each policy's choice
and its tuning means (:func:`tuned_rates`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from avalanche_gss.reproduce.common import (
    command,
    prog_of,
    resolve_choices,
    resolve_data,
    settings_for,
)
from avalanche_gss.reproduce.experiments.policies import (
    BUILTIN_STREAMS,
    COMPOSITION_STREAMS,
    DEFAULT_STREAMS,
    KINDS,
    POLICIES,
    SEEDS,
    STREAMS,
    TUNE_SEEDS,
    expand_streams,
)
from avalanche_gss.reproduce.experiments.protocols import data_label
from avalanche_gss.reproduce.experiments.which_buffer_composition import (
    traced_streams,
    write_composition,
)
from avalanche_gss.reproduce.experiments.which_buffer_matched import (
    MATCHED_LEGEND,
    JobResult,
    MatchedRun,
    RunKey,
    add_matched,
    keeps_every_batch,
    matched_jobs,
    matched_results,
    matched_rows,
)
from avalanche_gss.reproduce.experiments.which_buffer_records import (
    ProtocolRecord,
    ReportRecord,
    SequentialRecord,
    StreamRecord,
)
from avalanche_gss.reproduce.experiments.which_buffer_report import (
    NAME,
    STEM,
    PolicyRow,
    draw,
    markdown,
    ranking,
    runs_csv,
)
from avalanche_gss.reproduce.experiments.which_buffer_statistics import add_statistics
from avalanche_gss.reproduce.json_types import JsonObject, Scalar, json_float
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.reports.equivalence import (
    DELTA,
    Classed,
    family_weights,
    seed_means,
)
from avalanche_gss.reproduce.reports.event_logs import write_event_logs
from avalanche_gss.reproduce.reports.report import DataFacts, Report, replay_protocol
from avalanche_gss.reproduce.reports.sequential import looks, step
from avalanche_gss.reproduce.reports.writing import group_rows, provenance
from avalanche_gss.reproduce.runner import Experiment, Rendered, Stages
from avalanche_gss.reproduce.runs.identity import code_identity, data_identity, run_code
from avalanche_gss.reproduce.runs.jobs import RunJob, StreamSpec, build_split
from avalanche_gss.reproduce.runs.planning import (
    CodeIdentity,
    DataSource,
    check_model,
    run_result,
    training_problems,
)
from avalanche_gss.reproduce.runs.settings import settings_from_dict
from avalanche_gss.reproduce.runs.sweep import config_key
from avalanche_gss.reproduce.runs.training import BUFFER_METHODS, RunResult, RunSettings
from avalanche_gss.streams import REGISTRY, ArrayDataset

__all__ = ["NAME", "STEM", "WHICH_BUFFER", "PolicyChoices", "WhichBuffer",
           "WhichBufferPlan", "check_family_weights", "check_policies", "check_streams",
           "choices", "fit_model", "plan", "policy_problem", "ranking", "stream_config",
           "traced_streams", "tuned_rates"]

log = logging.getLogger("reproduce")

_PER_RUN = ("method", "buffer_size", "seed", "device", "buffer.size", "training.device")
"""Run settings the experiment sets per run (flat or namespaced): a policy may not set them."""


# --------------------------------------------------------------------------- policies


def policy_problem(label: str) -> str | None:
    """What keeps policy ``label`` from running with this version, or ``None``.

    :param label: a key of :data:`~avalanche_gss.reproduce.experiments.policies.POLICIES`.
    :return: a few words: its method is not in the registry, it sets a keyword
        its method does not take (or one the experiment sets per run), or
        ``RunSettings`` refuses its values.
    """
    policy = POLICIES[label]
    method, keywords = policy.method, policy.settings
    if method not in BUFFER_METHODS:
        return f"no buffer method {method!r} in the registry"
    per_run = sorted(set(keywords) & set(_PER_RUN))
    if per_run:
        return f"it sets {', '.join(per_run)}, which {NAME} sets per run"
    try:
        settings_from_dict(policy.keywords())
    except (TypeError, ValueError) as err:
        return " ".join(str(err).split())
    return None


def check_policies(labels: Sequence[str], prog: str) -> None:
    """Refuse, before any run, policies this version cannot run; one line for all of them.

    :param labels: the chosen policies.
    :param prog: the program, as the user ran it.
    :raises SystemExit: naming each policy and what it lacks, the registry's methods and
        the policies that can run.
    """
    problems = [f"{label} ({problem})" for label in labels
                if (problem := policy_problem(label)) is not None]
    if problems:
        ready = [label for label in POLICIES if policy_problem(label) is None]
        raise SystemExit(f"{prog}: error: --policies: this version cannot run "
                         + ", ".join(problems)
                         + f"; its registry has {', '.join(BUFFER_METHODS)}; policies it can "
                         f"run: {', '.join(ready)}")


def check_family_weights(weights: Sequence[tuple[str, float]] | None,
                         streams: Sequence[str], prog: str) -> None:
    """Refuse, before any run, ``--family-weights`` that cannot weigh the chosen streams.

    A family that no chosen stream has, a family given twice, or every family at 0: one
    line naming the value.

    :param weights: the ``(family, weight)`` pairs given (``None``: equal weights).
    :param streams: the chosen streams.
    :param prog: the program, as the user ran it.
    :raises SystemExit: naming the bad family or the families there are.
    """
    if weights is None:
        return
    present = list(dict.fromkeys(STREAMS[s].family for s in streams))
    names = [f for f, _ in weights]
    unknown = [f for f in names if f not in present]
    twice = sorted({f for f in names if names.count(f) > 1})
    why = (f"{unknown[0]} is not a family of the chosen streams" if unknown
           else f"{twice[0]} given more than once" if twice
           else "every chosen family weighs 0" if not any(w > 0 for _, w in weights)
           else None)
    if why is not None:
        raise SystemExit(f"{prog}: error: argument --family-weights: {why}; the families "
                         f"are {', '.join(present)}")


def fit_model(args: Options, runs: list[PolicyRun], chosen: PolicyChoices,
              data: ArrayDataset) -> tuple[list[PolicyRun], dict[str, str]]:
    """Keep the policies that can train their streams' model on ``data``; refuse or leave out.

    The library says what a policy cannot train (:func:`~avalanche_gss.reproduce.runs.planning.
    training_problems`): a policy that scores by the training step (``CB-GSS (step)``)
    cannot train the CIFAR-10 streams' ResNet-18, whose BatchNorm runs in train mode.
    Policies chosen with ``--policies`` are refused; the default policies leave those out,
    with a log line naming them and why (``chosen.policies`` loses them too).

    :param args: the parsed command line (``policies``: whether they were chosen).
    :param runs: :func:`plan`'s runs.
    :param chosen: :func:`choices`' result.
    :param data: the loaded data.
    :return: the runs of the policies kept, and each policy left out with why.
    :raises SystemExit: a chosen policy that cannot train its model, in one line naming
        each such policy, the model and its streams; or no default policy left.
    """
    failing: dict[str, tuple[str, list[str], str]] = {}  # policy: model, streams, why
    for r, problem in zip(runs, training_problems(data, [r.settings for r in runs]),
                          strict=True):
        if problem is not None:
            model, streams, _ = failing.setdefault(r.keys["policy"],
                                                   (r.settings.model, [], problem))
            if r.keys["stream"] not in streams:
                streams.append(r.keys["stream"])
    if not failing:
        return runs, {}
    why = {p: f"cannot train the {model} model of {', '.join(streams)}: {problem}"
           for p, (model, streams, problem) in failing.items()}
    grouped: dict[str, list[str]] = {}  # one reason, the policies it stops
    for p, line in why.items():
        grouped.setdefault(line, []).append(p)
    said = "; ".join(f"{', '.join(ps)}: {line}" for line, ps in grouped.items())
    prog = prog_of(args)
    if args.policies is not None:
        raise SystemExit(f"{prog}: error: argument --policies: {said}")
    chosen.policies = tuple(p for p in chosen.policies if p not in failing)
    if not chosen.policies:
        raise SystemExit(f"{prog}: error: no default policy can run here: {said}")
    log.info("%s: leaving out default policies %s", NAME, said)
    return [r for r in runs if r.keys["policy"] not in failing], why


# --------------------------------------------------------------------------- plan


@dataclass
class PolicyChoices:
    """What a which-buffer command runs: :func:`choices`' result.

    :param policies: the policies (labels of
        :data:`~avalanche_gss.reproduce.experiments.policies.POLICIES`), in row order.
    :param streams: the streams (names of
        :data:`~avalanche_gss.reproduce.experiments.policies.STREAMS`), in column order.
    :param buffer_sizes: the buffer sizes ``M``.
    :param seeds: the seeds.
    :param samples_per_task: ``--quick``'s samples per task, else ``None`` (the protocol's).
    """

    policies: tuple[str, ...]
    streams: tuple[str, ...]
    buffer_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    samples_per_task: int | None = None


def choices(args: Options) -> PolicyChoices:
    """The policies, streams, buffer sizes and seeds to run (defaults, ``--quick``, options).

    The streams' kind (:data:`~avalanche_gss.reproduce.experiments.policies.KINDS`: the digits', by
    default, or CIFAR-10's) gives the default buffer sizes and what ``--quick`` runs.

    :param args: the parsed command line.
    """
    streams = expand_streams(args.streams)
    kind = KINDS[STREAMS[streams[0]].data]
    chosen = resolve_choices(args, {"policies": tuple(POLICIES), "streams": DEFAULT_STREAMS,
                                    "buffer_sizes": kind.buffer_sizes, "seeds": SEEDS},
                             kind.quick, ("policies", "buffer_sizes", "seeds"))
    return PolicyChoices(policies=tuple(chosen["policies"]),
                   streams=streams if args.streams is not None else tuple(chosen["streams"]),
                   buffer_sizes=tuple(chosen["buffer_sizes"]), seeds=tuple(chosen["seeds"]),
                   samples_per_task=chosen.get("samples_per_task"))


def stream_config(name: str, chosen: PolicyChoices) -> StreamSpec:
    """The stream a job of stream ``name`` builds (see :func:`run_job`).

    Its protocol's counts, its row keys (and ``--quick``'s ``samples_per_task``), the
    registered stream it builds with its options beyond those, and whether it records the
    buffer's composition.

    Runs on every stream of
    :data:`~avalanche_gss.reproduce.experiments.policies.COMPOSITION_STREAMS` record the
    buffer's composition (a counter read per batch, a snapshot per task end), so the
    report can show any of them.

    :param name: a key of :data:`~avalanche_gss.reproduce.experiments.policies.STREAMS`.
    :param chosen: :func:`choices`' result (its ``samples_per_task`` under ``--quick``).
    """
    spec = STREAMS[name]
    variant: dict[str, Scalar] = dict(spec.variant)
    if chosen.samples_per_task is not None:
        variant["samples_per_task"] = chosen.samples_per_task
    counts = spec.protocol.stream
    # traced whichever streams are chosen: the same cache key
    return StreamSpec(counts, variant, stream=spec.registered,
                      stream_options=cast(dict[str, Scalar],
                                          counts.options_of(spec.registered, variant)),
                      trace=name in COMPOSITION_STREAMS or spec.family in COMPOSITION_STREAMS)


def plan(args: Options) -> tuple[list[PolicyRun], PolicyChoices]:
    """List the runs: every policy x stream x buffer size x seed.

    :param args: the parsed command line.
    :return: the runs (row keys ``policy`` and ``stream``, the job's
        :func:`stream_config`, and settings made by the stream's protocol, then the
        policy's settings) and :func:`choices`' result.
    :raises SystemExit: a chosen policy this version cannot run (:func:`check_policies`).
    """
    chosen = choices(args)
    check_policies(chosen.policies, prog_of(args))
    check_family_weights(args.family_weights, chosen.streams, prog_of(args))
    runs = []
    for stream in chosen.streams:
        protocol = STREAMS[stream].protocol
        spec = stream_config(stream, chosen)
        for seed in chosen.seeds:
            for label in chosen.policies:
                policy = POLICIES[label]
                for m in chosen.buffer_sizes:
                    settings = settings_for(args, protocol, policy.method,
                                            buffer_size=m, seed=seed, **policy.settings)
                    runs.append(PolicyRun(settings, {"policy": label, "stream": stream}, spec))
    return runs, chosen


def job_label(run: PolicyRun) -> str:
    """A run's name in its log line and in failure lines (its job's ``label``).

    Its policy's row label, its stream, buffer size and seed
    (``"GCR (selection)-disjoint-M300-seed0"``): two policies of one method stay apart.
    Its ``--tensorboard`` folder has the same name.

    :param run: one of :func:`plan`'s runs.
    """
    s = run.settings
    return f"{run.keys['policy']}-{run.keys['stream']}-M{s.buffer_size}-seed{s.seed}"


def _jobs(args: Options, runs: Sequence[PolicyRun], data_name: str,
          identity: Mapping[str, str]) -> list[RunJob]:
    """Each run's job: its stream, settings and label, the data, the code that runs it.

    With ``--compute-matched`` each counts its model's passes.
    """
    data = DataSource(data_name, args.root, args.download, dict(identity))
    count = bool(getattr(args, "compute_matched", False))
    return [RunJob(experiment=NAME, data=data, threads=args.threads, settings=r.settings,
                   label=job_label(r), stream=r.job, count_passes=count,
                   code=CodeIdentity.from_config({**code_identity(),
                                                  **run_code(r.settings.method, r.job.stream)}))
            for r in runs]


def _stream_record(data: ArrayDataset, runs: Sequence[PolicyRun], chosen: PolicyChoices,
                   name: str) -> StreamRecord:
    """Stream ``name``'s protocol as run, for the report.

    A ``--quick`` run of fewer samples per task than its kind's protocol
    (:attr:`~avalanche_gss.reproduce.experiments.policies.StreamKind.paper_samples_per_task`)
    says so among its deviations.
    """
    spec = STREAMS[name]
    stream = stream_config(name, chosen)
    split = build_split(data, stream, chosen.seeds[0])
    settings = next(r.settings for r in runs if r.keys["stream"] == name)
    deviations = list(split.protocol.get("deviations", []))
    full = KINDS[spec.data].paper_samples_per_task
    quick = stream.variant.get("samples_per_task")
    if full is not None and isinstance(quick, int) and quick < full:
        deviations.append(f"--quick: {quick:,} samples per task instead of "
                          f"{spec.protocol.paper_ref or 'its protocol'}'s {full:,}")
    record = StreamRecord(name=name, family=spec.family, protocol=spec.protocol.name,
                        variant=dict(stream.variant), blur=spec.blur,
                        traced=stream.trace, lr=settings.lr,
                        n_iter=settings.n_iter,
                        stream={k: v for k, v in split.protocol.items() if k != "deviations"},
                        deviations=deviations)
    if name not in BUILTIN_STREAMS:  # one's own: what it is, in its own words
        record["description"] = REGISTRY[spec.registered].description
    return record


# --------------------------------------------------------------------------- run


def _check_data(args: Options, runs: list[PolicyRun], chosen: PolicyChoices
                ) -> tuple[list[PolicyRun], dict[str, str], str, ArrayDataset]:
    """Load the data; keep the runs whose model they fit (:func:`fit_model`).

    :return: the runs kept, the policies left out with why, the data's name and the data.
    :raises SystemExit: data that do not fit a stream's protocol or model, in one line.
    """
    data_name, data = resolve_data(args, STREAMS[chosen.streams[0]].protocol)
    try:
        for s in chosen.streams:
            STREAMS[s].protocol.check(data)
        runs, left_out = fit_model(args, runs, chosen, data)
        check_model(data, [r.settings for r in runs])
    except ValueError as err:
        raise SystemExit(f"{prog_of(args)}: error: --data {data_name}: {err}") from None
    return runs, left_out, data_name, data


def check_streams(args: Options, chosen: PolicyChoices, data: ArrayDataset) -> None:
    """Build each chosen stream of one's own once, before any run; refuse one that fails.

    A stream registered from code of one's own (:func:`avalanche_gss.streams.register_stream`)
    is built for the first seed, as its runs build it, and its split checked
    (:meth:`~avalanche_gss.streams.TaskSplit.check_learnable`): a build that fails or
    returns no ``TaskSplit``, inputs of several shapes or of another dtype than float32,
    labels outside the output head, a stream without training samples, a task without test
    samples. This package's streams are not built here.

    :param args: the parsed command line.
    :param chosen: :func:`choices`' result.
    :param data: the loaded data.
    :raises SystemExit: the first such stream, in one line naming it, the task and what is
        wrong.
    """
    for name in chosen.streams:
        if name in BUILTIN_STREAMS:
            continue
        try:
            build_split(data, stream_config(name, chosen), chosen.seeds[0]).check_learnable()
        except Exception as err:  # code of one's own can fail in any way: one line naming it
            kind = "" if isinstance(err, (TypeError, ValueError)) else f"{type(err).__name__}: "
            raise SystemExit(f"{prog_of(args)}: error: argument --streams: stream {name!r} "
                             f"(seed {chosen.seeds[0]}): {kind}{' '.join(str(err).split())}"
                             ) from None


@dataclass(frozen=True)
class PolicyRun:
    """One run of the comparison, before its data are loaded.

    :param settings: its settings (its stream's protocol's, then its policy's).
    :param keys: its row keys, ``policy`` and ``stream``.
    :param job: its stream (:func:`stream_config`).
    """

    settings: RunSettings
    keys: dict[str, str]
    job: StreamSpec


@dataclass
class WhichBufferPlan:
    """What the comparison runs, and what its stages found.

    :param runs: every as-measured run (its settings, row keys and stream).
    :param chosen: the policies, streams, buffer sizes and seeds.
    :param left_out: the default policies left out, each with why.
    :param data: the loaded data.
    :param jobs: the as-measured runs' jobs, in the order of ``runs``.
    :param measured: their results (the first stage's).
    :param folders: their ``--tensorboard`` log folders (``None``: none).
    :param again: with ``--compute-matched``, each run's compute-matched job.
    :param ran: the results of the compute-matched jobs that skip batches (the second
        stage's).
    :param pairs: each as-measured run's row keys and result (the report's, for the CSV).
    :param matched: each compute-matched run by its key (the report's, for the CSV).
    :param sequential: with ``--sequential``, the record of its rounds.
    :param tuning: with ``--lr-grid``, the tuning runs (every policy at every value of the
        grid, on the tuning seeds).
    :param tuning_jobs: their jobs, in the order of ``tuning``.
    :param tuned: each policy's learning rate, chosen from them (:func:`tuned_rates`).
    :param tuning_means: each policy's mean tuning accuracy at each value (``str(lr)``).
    :param data_name: the data's name, as the jobs load it.
    """

    runs: list[PolicyRun]
    chosen: PolicyChoices
    left_out: dict[str, str]
    data: ArrayDataset
    jobs: list[RunJob]
    measured: list[JobResult] = field(default_factory=list)
    folders: list[str | None] = field(default_factory=list)
    again: list[RunJob] = field(default_factory=list)
    ran: list[JobResult] = field(default_factory=list)
    pairs: list[tuple[dict[str, str], RunResult]] = field(default_factory=list)
    matched: dict[RunKey, MatchedRun] | None = None
    sequential: SequentialRecord | None = None
    tuning: list[PolicyRun] = field(default_factory=list)
    tuning_jobs: list[RunJob] = field(default_factory=list)
    tuned: dict[str, float] = field(default_factory=dict)
    tuning_means: dict[str, dict[str, float]] = field(default_factory=dict)
    data_name: str = ""


def _at_rate(args: Options, lr: float, seeds: Sequence[int] | None = None,
             policies: Sequence[str] | None = None) -> Options:
    """The command line with ``--lr lr`` (and the given seeds and policies) instead."""
    return dataclasses.replace(
        args, lr=lr, lr_grid=None,
        seeds=args.seeds if seeds is None else list(seeds),
        policies=args.policies if policies is None else list(policies))


def _tuning_plan(args: Options, chosen: PolicyChoices, runs: Sequence[PolicyRun],
                 data_name: str, identity: Mapping[str, str]
                 ) -> tuple[list[PolicyRun], list[RunJob]]:
    """Every kept policy at every value of ``--lr-grid``, on the tuning seeds.

    :raises SystemExit: a tuning seed among the reported seeds, in one line.
    """
    seeds = list(args.tune_seeds or TUNE_SEEDS)
    shared = sorted(set(seeds) & set(chosen.seeds))
    if shared:
        raise SystemExit(f"{prog_of(args)}: error: argument --tune-seeds: seed "
                         f"{shared[0]} is also a reported seed (--seeds "
                         f"{' '.join(map(str, chosen.seeds))}); tune on other seeds")
    kept = list(dict.fromkeys(r.keys["policy"] for r in runs))
    tuning: list[PolicyRun] = []
    for lr in dict.fromkeys(args.lr_grid or ()):
        at, _ = plan(_at_rate(args, lr, seeds, kept))
        tuning += at
    jobs = [dataclasses.replace(j, label=f"{j.label}-lr{r.settings.lr:g}")  # one name a job
            for r, j in zip(tuning, _jobs(args, tuning, data_name, identity), strict=True)]
    return tuning, jobs


def tuned_rates(runs: Sequence[PolicyRun], results: Sequence[JsonObject],
                grid: Sequence[float], families: Mapping[str, float] | None = None
                ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each policy's learning rate: the value of the grid of its best mean tuning accuracy.

    Each tuning seed's accuracy is the weighted mean over the columns (stream x buffer
    size), each stream family weighing as ``families`` say (``None``: equal), as the
    recommendation weighs them; a value's score is the mean over the seeds. A run that gave
    no finite accuracy scores its value minus infinity. Ties go to the value first in the
    grid.

    :param runs: the tuning runs (:class:`PolicyRun`, their settings holding the rate).
    :param results: their results (``avg``), in the same order.
    :param grid: the learning rates tried, in the order given.
    :param families: each stream family's weight.
    :return: each policy's chosen rate, and each policy's score at each rate (``str(lr)``).
    """
    cells: dict[tuple[str, float], dict[tuple[str, int], float]] = {}
    columns: set[tuple[str, str]] = set()
    for r, result in zip(runs, results, strict=True):
        column = f"{r.keys['stream']}/{r.settings.buffer_size}"
        columns.add((column, STREAMS[r.keys["stream"]].family))
        value = result.get("avg")
        acc = float(value) if isinstance(value, (int, float)) else math.nan
        cells.setdefault((r.keys["policy"], float(r.settings.lr)), {})[
            (column, r.settings.seed)] = acc if math.isfinite(acc) else -math.inf
    weights = family_weights(sorted(columns), families)
    scores: dict[str, dict[str, float]] = {}
    chosen: dict[str, float] = {}
    for (policy, lr), cell in cells.items():
        seeds = sorted({s for _, s in cell})
        per_seed = [math.fsum(weights[c] * cell[(c, s)] for c, _ in columns
                              if weights[c] > 0 and (c, s) in cell) for s in seeds]
        scores.setdefault(policy, {})[str(lr)] = math.fsum(per_seed) / len(per_seed)
    order = list(dict.fromkeys(float(x) for x in grid))
    for policy, by_rate in scores.items():
        chosen[policy] = max(order, key=lambda lr: (by_rate.get(str(lr), -math.inf),
                                                    -order.index(lr)))
    return chosen, scores


def _at_tuned_rates(args: Options, plan_: WhichBufferPlan) -> None:
    """Replace the plan's runs and jobs by each policy's runs at its tuned rate."""
    by_key: dict[tuple[str, str, int, int], PolicyRun] = {}
    for lr in dict.fromkeys(plan_.tuned.values()):
        policies = [p for p, v in plan_.tuned.items() if v == lr]
        at, _ = plan(_at_rate(args, lr, None, policies))
        by_key.update({(r.keys["policy"], r.keys["stream"], r.settings.buffer_size,
                        r.settings.seed): r for r in at})
    plan_.runs = [by_key[(r.keys["policy"], r.keys["stream"], r.settings.buffer_size,
                          r.settings.seed)] for r in plan_.runs]
    plan_.jobs = _jobs(args, plan_.runs, plan_.data_name, data_identity(plan_.data))


def _measured_folders(args: Options, runs: Sequence[PolicyRun]) -> list[str | None]:
    """Each run's ``--tensorboard`` folder (``None``: no logs, or a run without a buffer)."""
    return [os.path.join(args.tensorboard, NAME, job_label(r))
            if args.tensorboard and r.settings.method in BUFFER_METHODS else None
            for r in runs]


def _matched_stage(plan: WhichBufferPlan) -> list[RunJob]:
    """The compute-matched jobs that skip batches, planned from the measured results.

    A run that keeps every batch is its as-measured run again: it takes that result.
    """
    plan.again = matched_jobs(plan.jobs, plan.measured)
    skipping = [j for j in plan.again if not keeps_every_batch(j)]
    to_train = len({config_key(j.config()) for j in skipping})
    log.info("%s: %d compute-matched runs (%d more keep every batch: their as-measured "
             "runs)", NAME, to_train, len({config_key(j.config()) for j in plan.again}) - to_train)
    return skipping


def _compute_matched(plan: WhichBufferPlan, rows: Sequence[PolicyRow]
                     ) -> dict[RunKey, MatchedRun]:
    """Give the rows their compute-matched runs; each by its key (for the CSV)."""
    keys = [(r.keys["policy"], r.keys["stream"], r.settings.buffer_size, r.settings.seed)
            for r in plan.runs]
    return add_matched(rows, keys, plan.again,
                       matched_results(plan.again, plan.measured, plan.ran))


def _report(args: Options, argv: Sequence[str] | None, data: ArrayDataset,
            runs: Sequence[PolicyRun], chosen: PolicyChoices, left_out: dict[str, str],
            rows: Sequence[PolicyRow]) -> ReportRecord:
    """The JSON report of the comparison (its statistics still to add)."""
    records = [r.record() for r in rows]
    columns = [(s, m) for s in chosen.streams for m in chosen.buffer_sizes]
    measured = ranking(records, chosen.policies, columns)
    sizes = "/".join(map(str, chosen.buffer_sizes))
    first = runs[0].settings
    facts = DataFacts.of(data)
    report: ReportRecord = {
        "experiment": NAME,
        "title": f"which buffer policy for which stream, on {data_label(data)}: final average "
                 f"accuracy and train time per run, M = {sizes} (ours, not a table of the "
                 "paper)",
        "dataset": facts.dataset, "data_source": facts.source, "data_sha256": facts.sha256,
        "data_verified_as": facts.verified_as, "data_verification": facts.verification,
        "command": command(argv, prog_of(args)),
        "protocol": ProtocolRecord(
            policies=list(chosen.policies),
            policy_settings={p: POLICIES[p].keywords() for p in chosen.policies},
            policies_left_out=left_out,
            streams=[_stream_record(data, runs, chosen, s) for s in chosen.streams],
            buffer_sizes=list(chosen.buffer_sizes), seeds=list(chosen.seeds),
            model=first.model,
            **cast(ProtocolRecord, replay_protocol([r.settings for r in runs])),
            quick=args.quick, workers=args.workers,
            equivalence_margin=(DELTA if args.equivalence_margin is None
                                else float(args.equivalence_margin)),
            **({} if args.family_weights is None
               else {"family_weights": dict(args.family_weights)}),
            sequential=bool(getattr(args, "sequential", False)),
            train_seconds="wall time of training one run (evaluation excluded), in its "
                          "worker; runs found in the cache keep the time they took then"),
        "provenance": provenance(args.device, args.threads),
        "rows": records,
        "best": measured.best,
        "ranking": measured.records(),
    }
    if getattr(args, "compute_matched", False):
        matched = ranking(matched_rows(records), chosen.policies, columns)
        report["compute_matched"] = MATCHED_LEGEND
        report["ranking_compute_matched"] = matched.records()
        report["best_compute_matched"] = matched.best
    return report


_REPORT_KEYS = ("experiment", "title", "command", "protocol", "provenance", "rows",
                "dataset", "data_source", "data_sha256", "data_verified_as",
                "data_verification")
"""The keys of a which-buffer report that :class:`Report` holds as its own fields."""


@dataclass(frozen=True)
class _Record:
    """A report row already recorded as JSON (:meth:`PolicyRow.record`)."""

    record: JsonObject

    def to_dict(self) -> JsonObject:
        return self.record


def _seed_means(plan: WhichBufferPlan, done: Mapping[int, JsonObject],
                policies: Sequence[str], families: Mapping[str, float] | None
                ) -> dict[str, dict[int, float]]:
    """Each policy's accuracy per seed run, averaged over the columns, ``families`` weighing."""
    cells: dict[str, dict[tuple[str, int], float]] = {p: {} for p in policies}
    columns = set()
    for k, result in done.items():
        r = plan.runs[k]
        if r.keys["policy"] in cells:
            column = f"{r.keys['stream']}/{r.settings.buffer_size}"
            cells[r.keys["policy"]][(column, r.settings.seed)] = json_float(result["avg"])
            columns.add((column, STREAMS[r.keys["stream"]].family))
    return seed_means(cells, family_weights(sorted(columns), families))


def _sequential(args: Options, plan: WhichBufferPlan) -> Stages:
    """``--sequential``: the first two seeds, then one seed a round for the open policies.

    After each round every policy still open is classed against the best on the seeds run
    (:func:`~avalanche_gss.reproduce.reports.sequential.step`: each look at ``alpha`` over
    the looks the cap allows); one shown equivalent or worse runs no more seeds. It stops
    when only the best is open, or at the last seed. The plan keeps the runs made and
    their results, and the record of the design (``plan.sequential``).
    """
    seeds = list(plan.chosen.seeds)
    margin = args.equivalence_margin
    delta = DELTA if margin is None else float(margin)
    start, n_looks = 2, looks(seeds, 2)
    open_ = list(plan.chosen.policies)
    done: dict[int, JsonObject] = {}
    decided: dict[str, Classed] = {}
    classes: dict[str, Classed] = {}
    rounds, i = 0, start
    batch = seeds[:start]
    while True:
        picked = [k for k, r in enumerate(plan.runs)
                  if r.settings.seed in batch and r.keys["policy"] in open_]
        results = yield [plan.jobs[k] for k in picked]
        done.update(zip(picked, results, strict=True))
        rounds += 1
        mix = None if args.family_weights is None else dict(args.family_weights)
        classes = step(_seed_means(plan, done, open_, mix), {}, n_looks, delta)
        best = next(c.policy for c in classes.values() if c.verdict == "best")
        decided.update({p: c for p, c in classes.items()
                        if c.verdict in ("equivalent", "worse")})
        open_ = [p for p in open_ if p not in decided]
        log.info("%s: round %d (seeds %s): %d of %d policies classed", NAME, rounds,
                 " ".join(map(str, seeds[:i])), len(decided), len(plan.chosen.policies) - 1)
        if open_ == [best] or i == len(seeds):
            break
        batch, i = [seeds[i]], i + 1
    made = sorted(done)
    final = {**classes, **decided}
    ordered = sorted(final.values(), key=lambda c: (c.verdict != "best", -c.mean_difference))
    plan.sequential = SequentialRecord(
        start=start, looks=n_looks, rounds=rounds, delta=delta, runs=len(made),
        fixed_runs=len(plan.runs), saved=1 - len(made) / len(plan.runs),
        seeds={p: sorted({plan.runs[k].settings.seed for k in made
                          if plan.runs[k].keys["policy"] == p}) for p in plan.chosen.policies},
        classes=[c.to_dict() for c in ordered])
    plan.runs = [plan.runs[k] for k in made]
    plan.jobs = [plan.jobs[k] for k in made]
    plan.measured = [done[k] for k in made]


class WhichBuffer(Experiment[WhichBufferPlan]):
    """``which-buffer``: two stages, as measured and then (``--compute-matched``) matched.

    The first stage runs every policy on every stream, buffer size and seed, counting each
    run's passes with ``--compute-matched``; the second, planned from those counts, runs
    each policy on the batches a learner of its cost affords. The report is computed from
    both (:func:`~.which_buffer_statistics.add_statistics`).
    """

    def plan(self, args: Options) -> WhichBufferPlan:
        """Every policy x stream x buffer size x seed, checked before any run starts.

        :param args: the parsed command line.
        """
        runs, chosen = plan(args)
        if getattr(args, "sequential", False) and (len(chosen.seeds) < 3
                                                    or len(chosen.policies) < 2):
            raise SystemExit(f"{prog_of(args)}: error: argument --sequential: needs at least "
                             f"3 seeds and 2 policies, got {len(chosen.seeds)} seed(s) and "
                             f"{len(chosen.policies)} policies (--quick runs one seed: give "
                             "--seeds)")
        runs, left_out, data_name, data = _check_data(args, runs, chosen)
        check_streams(args, chosen, data)
        jobs = _jobs(args, runs, data_name, data_identity(data))
        tuning: tuple[list[PolicyRun], list[RunJob]] = ([], [])
        if args.lr_grid:
            tuning = _tuning_plan(args, chosen, runs, data_name, data_identity(data))
            log.info("%s: tuning the learning rate first: %d runs (%d rates x %d seeds)",
                     NAME, len(tuning[1]), len(set(args.lr_grid)),
                     len(args.tune_seeds or TUNE_SEEDS))
        log.info("%s: %d runs (%d policies x %d streams x %d buffer sizes x %d seeds) on %s "
                 "(%s), %d torch thread(s) per run", NAME,
                 len({config_key(j.config()) for j in jobs}), len(chosen.policies),
                 len(chosen.streams), len(chosen.buffer_sizes), len(chosen.seeds), data.name,
                 data.source, args.threads)
        return WhichBufferPlan(runs, chosen, left_out, data, jobs, tuning=tuning[0],
                               tuning_jobs=tuning[1], data_name=data_name)

    def stages(self, args: Options, plan: WhichBufferPlan) -> Stages:
        """The as-measured runs; then, with ``--compute-matched``, the matched ones.

        With ``--lr-grid``, the tuning runs first; the as-measured runs are then each
        policy's at its tuned rate (:func:`tuned_rates`).

        With ``--sequential``, the as-measured runs in rounds of seeds
        (:func:`_sequential`), the plan keeping only the runs made.

        :param args: the parsed command line.
        :param plan: the plan (it keeps each stage's results).
        """
        if plan.tuning_jobs:
            tuned = list((yield plan.tuning_jobs))
            mix = None if args.family_weights is None else dict(args.family_weights)
            plan.tuned, plan.tuning_means = tuned_rates(plan.tuning, tuned,
                                                        args.lr_grid or (), mix)
            log.info("%s: tuned learning rates: %s", NAME,
                     ", ".join(f"{p} {lr:g}" for p, lr in plan.tuned.items()))
            _at_tuned_rates(args, plan)
        if getattr(args, "sequential", False):
            yield from _sequential(args, plan)
        else:
            plan.measured = list((yield plan.jobs))
        plan.folders = _measured_folders(args, plan.runs)
        if args.tensorboard:
            write_event_logs(plan.folders, plan.measured, args.tensorboard)
        if not getattr(args, "compute_matched", False):
            return
        plan.ran = list((yield _matched_stage(plan)))
        if args.tensorboard:  # one that keeps every batch: its as-measured run's logs
            write_event_logs([None if f is None else f"{f}-matched" for f, c
                              in zip(plan.folders, plan.again, strict=True)
                              if not keeps_every_batch(c)], plan.ran, args.tensorboard)

    def report(self, args: Options, argv: Sequence[str] | None,
               plan: WhichBufferPlan, results: Sequence[JsonObject]) -> Report:
        """The comparison: rows, rankings, the recommendation and its statistics.

        :param args: the parsed command line.
        :param argv: the command line (for the record).
        :param plan: the plan, with both stages' results.
        :param results: every stage's results (the plan holds them by stage).
        """
        plan.pairs = [(r.keys, run_result(r.settings, result,
                                           drop=("trace", "train_sizes", "passes")))
                       for r, result in zip(plan.runs, plan.measured, strict=True)]
        rows = group_rows(plan.pairs, PolicyRow)
        plan.matched = _compute_matched(plan, rows) if getattr(args, "compute_matched", False) \
            else None
        report = _report(args, argv, plan.data, plan.runs, plan.chosen, plan.left_out, rows)
        if plan.tuned:
            report["protocol"]["lr_grid"] = list(dict.fromkeys(args.lr_grid or ()))
            report["protocol"]["tune_seeds"] = list(args.tune_seeds or TUNE_SEEDS)
            report["protocol"]["tuned_lr"] = dict(plan.tuned)
            report["protocol"]["tuning"] = plan.tuning_means
        if plan.sequential is not None:
            report["sequential"] = plan.sequential
        record = add_statistics(report)
        if record["recommendation"] is None:
            log.info("%s: no recommendation: %s", NAME, record["recommendation_note"])
        bad = [f"{r.policy} on {r.stream} M={r.buffer_size} seed {seed}" for r in rows
               for seed, d in zip(r.seeds, r.diverged or [], strict=False) if d]
        view = cast(JsonObject, record)
        return Report(NAME, record["title"], DataFacts.of(plan.data), record["command"],
                      cast(JsonObject, record["protocol"]),
                      [_Record(cast(JsonObject, r)) for r in record["rows"]],
                      cast(JsonObject, record["provenance"]),
                      extra={k: v for k, v in view.items() if k not in _REPORT_KEYS},
                      diverged=bad)

    def render(self, report: Report, plan: WhichBufferPlan,
               paths: Mapping[str, str]) -> Rendered:
        """The table, the runs' CSV; the figures and the buffers' composition, written.

        :param report: the report.
        :param plan: the plan.
        :param paths: where the JSON, CSV and Markdown go.
        """
        record = cast(ReportRecord, report.to_json())
        out = os.path.dirname(paths["json"])
        columns = [(s, m) for s in plan.chosen.streams for m in plan.chosen.buffer_sizes]
        files = draw(record, out)
        md = markdown(record, columns, files["png"])
        csv = runs_csv(plan.pairs, record["provenance"], plan.matched, plan.data.name)
        files.update(write_composition(record, plan.runs, plan.measured, out))
        return Rendered(md, csv, files)


WHICH_BUFFER = WhichBuffer("which-buffer", "", stem=STEM)
"""The ``which-buffer`` experiment."""
