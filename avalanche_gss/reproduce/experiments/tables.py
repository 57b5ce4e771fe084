"""The table experiments of ``python -m reproduce`` (``table1`` ... ``table4``, ``constrained``).

A table is a plan of runs (:func:`plan`), swept through
:func:`avalanche_gss.reproduce.runs.jobs.run_job`
and cached by everything that determines a run's result, then grouped into rows
(:func:`~avalanche_gss.reproduce.reports.rows.group_rows`) and written as JSON, CSV and Markdown.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from avalanche_gss.reproduce.common import (
    Choices,
    command,
    prog_of,
    resolve_choices,
    resolve_data,
    settings_for,
)
from avalanche_gss.reproduce.experiments.policies import parse_method_text
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS, Protocol
from avalanche_gss.reproduce.json_types import JsonObject
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.reports.event_logs import write_event_logs
from avalanche_gss.reproduce.reports.report import (
    DataFacts,
    Report,
    SettingsFacts,
    jsonable,
    replay_protocol,
)
from avalanche_gss.reproduce.reports.rows import RowKeys
from avalanche_gss.reproduce.reports.writing import (
    PaperAverages,
    PaperCells,
    group_rows,
    provenance,
    reproduce_tests,
    table_csv,
    table_markdown,
)
from avalanche_gss.reproduce.runner import Experiment, Rendered
from avalanche_gss.reproduce.runs.identity import data_identity
from avalanche_gss.reproduce.runs.jobs import RunJob, StreamSpec
from avalanche_gss.reproduce.runs.planning import (
    CodeIdentity,
    PlannedRun,
    check_buffer_sizes,
    check_model,
    job_base,
    run_result,
)
from avalanche_gss.reproduce.runs.sweep import config_key
from avalanche_gss.reproduce.runs.training import (
    BUFFER_METHODS,
    TASK_AWARE,
    VARIANT_METHODS,
    RunSettings,
    default_retrieval,
    run_label,
)
from avalanche_gss.streams import ArrayDataset

log = logging.getLogger("reproduce")


def plan(args: Options, protocol: Protocol
         ) -> tuple[list[PlannedRun[StreamSpec]], Choices]:
    """List the runs to do (their stream, row keys, settings) and the choices.

    A ``--methods`` value ``METHOD:OPTION=VALUE,...`` runs that method with those options
    and settings (:func:`~avalanche_gss.reproduce.experiments.policies.parse_method_text`),
    in rows of their own: the row key ``options`` holds the text after the colon.
    """
    chosen = resolve_choices(
        args, {"methods": protocol.methods, "buffer_sizes": protocol.buffer_sizes,
               "seeds": protocol.seeds, "variants": protocol.variants},
        protocol.quick, ("methods", "buffer_sizes", "seeds"))
    stream_extra = ({"samples_per_task": chosen["samples_per_task"]}
                    if "samples_per_task" in chosen else {})
    runs = []
    for variant in chosen["variants"]:
        stream = StreamSpec(protocol.stream, {**variant, **stream_extra})
        for seed in chosen["seeds"]:
            for text in chosen["methods"]:
                method, keywords = parse_method_text(text)
                own = {"options": text.partition(":")[2].strip()} if keywords else {}
                for flavour in _flavours(args, protocol, method):
                    extra = ({"mir_candidates": args.mir_candidates}
                             if flavour.get("retrieval") == "mir" and args.mir_candidates
                             else {})
                    runs += [PlannedRun(_settings(args, protocol, text, buffer_size=m,
                                                  seed=seed, **flavour, **extra, **keywords),
                                        {**variant, **flavour, **own}, stream)
                             for m in chosen["buffer_sizes"]]
    return runs, chosen


def _flavours(args: Options, protocol: Protocol, method: str) -> list[RowKeys]:
    """A method's rows: the protocol's flavours, its ``--variants``, its retrievals."""
    flavours: list[RowKeys] = list(protocol.flavours.get(method, ({},)))
    if method in VARIANT_METHODS:
        flavours = [{**f, "variant": v} for f in flavours for v in args.variants]
    if method in BUFFER_METHODS:
        flavours = [r for f in flavours for r in _retrievals(args, method, f)]
    return flavours


def _settings(args: Options, protocol: Protocol, text: str,
              **keywords: object) -> RunSettings:
    """A run's settings (:func:`settings_for`) of a ``--methods`` value.

    :raises SystemExit: the settings are refused (an option the method lacks, a bad
        value), in one line naming the value.
    """
    try:
        return settings_for(args, protocol, text.partition(":")[0].strip(), **keywords)
    except ValueError as err:
        raise SystemExit(f"{prog_of(args)}: error: argument --methods: {text}: "
                         f"{' '.join(str(err).split())}") from None


def _retrievals(args: Options, method: str, flavour: RowKeys) -> list[RowKeys]:
    """A buffer method's rehearsal rows, one per ``--retrieval`` (none given: one row).

    The method's own retrieval (:func:`default_retrieval`) has no row key; any other is
    the row's ``retrieval``. A constrained update has no replay batch: its row stays as
    it is.
    """
    if flavour.get("update", "rehearsal") != "rehearsal":
        return [flavour]
    own = default_retrieval(method)
    chosen: list[str | None] = list(args.retrieval) if args.retrieval else [None]
    return [flavour if r in (None, own) else {**flavour, "retrieval": r} for r in chosen]


def _bufferless(method: str) -> bool:
    return method in ("Single", "iid-online", "iid-offline")


def job_label(settings: RunSettings, stream: RowKeys) -> str:
    """A table run's name in its log line and in failure lines (its job's ``label``).

    Its settings' :func:`run_label` (method, variant, update, retrieval, buffer size,
    seed) and its stream's row keys (``"Reservoir-M300-seed0-sequence1"``): what tells
    its row and seed from the others of the table (not what all its runs share, such as
    ``--quick``'s ``samples_per_task``).

    :param settings: the run's settings (as its job runs them).
    :param stream: its stream's row keys (``{"sequence": 1}``; ``{}`` for one stream).
    """
    return "-".join([run_label(settings), *(f"{k}{v}" for k, v in stream.items())])


def _jobs(args: Options, runs: Sequence[PlannedRun[StreamSpec]], chosen: Choices,
          data_name: str, identity: Mapping[str, str]) -> list[PlannedRun[RunJob]]:
    """Each run with its job (a method without a buffer: one job for every buffer size)."""
    base = job_base(args, args.experiment, data_name, identity)
    planned = []
    for r in runs:
        s = r.settings
        # Methods without a buffer give the same run for every buffer size: run them once.
        first = (dataclasses.replace(s, buffer=dataclasses.replace(
                     s.buffer, size=chosen["buffer_sizes"][0]))
                 if _bufferless(s.method) else s)
        label = job_label(first, {k: v for k, v in r.job.variant.items() if k in r.keys})
        job = RunJob(**base, code=CodeIdentity.of_method(first.method),
                     settings=first, label=label, stream=r.job)
        planned.append(PlannedRun(s, r.keys, job))
    return planned


def _job_configs(args: Options, runs: Sequence[PlannedRun[StreamSpec]],
                 chosen: Choices, data_name: str, identity: Mapping[str, str]
                 ) -> list[JsonObject]:
    """The runs' job configs, as their cache keys hold them (:meth:`RunJob.config`)."""
    return [r.job.config() for r in _jobs(args, runs, chosen, data_name, identity)]


def _log_folders(args: Options, runs: Sequence[PlannedRun[RunJob]]
                 ) -> list[str | None]:
    """Each run's ``--tensorboard`` folder (``DIR/EXPERIMENT/LABEL``); ``None`` for a baseline.

    Not part of a run's cache key: where its logs go changes no result.
    """
    folders: list[str | None] = []
    root = args.tensorboard or ""
    for r in runs:
        s = r.settings
        if s.method not in BUFFER_METHODS:
            folders.append(None)
            continue
        tag = "-".join([run_label(s), *(f"{k}{v}" for k, v in r.job.stream.variant.items())])
        folders.append(os.path.join(root, args.experiment, tag))
    return folders


@dataclass
class TablePlan:
    """A table's plan: its protocol, choices, data and runs.

    :param protocol: the table's protocol.
    :param chosen: its choices (methods, buffer sizes, seeds, variants...).
    :param data_name: the data as the command line names them.
    :param data: the loaded data.
    :param runs: its runs, each with its job.
    """

    protocol: Protocol
    chosen: Choices
    data_name: str
    data: ArrayDataset
    runs: list[PlannedRun[RunJob]]

    @property
    def jobs(self) -> list[RunJob]:
        """The runs' jobs, in order."""
        return [r.job for r in self.runs]


class Table(Experiment[TablePlan]):
    """A table experiment: the runs of a :class:`~.protocols.Protocol`, one row per method.

    The paper's are :data:`TABLES`. A table of one's own is its protocol and this class,
    registered (:func:`~avalanche_gss.reproduce.experiments.registry.register`) in a module
    given to ``--import``: ``register("mine", Table(Protocol(name="mine", ...)))``.

    :param protocol: what it runs (its ``name`` and ``summary`` are the experiment's).
    """

    def __init__(self, protocol: Protocol) -> None:
        super().__init__(protocol.name, protocol.summary)
        self.protocol = protocol

    def plan(self, args: Options) -> TablePlan:
        """The table's runs on the chosen data, checked before any run starts.

        :param args: the parsed command line.
        """
        protocol = self.protocol
        data_name, data = resolve_data(args, protocol)
        runs, chosen = plan(args, protocol)
        prog = prog_of(args)
        try:
            check_buffer_sizes(args.buffer_sizes, data, data_name)
        except ValueError as err:
            raise SystemExit(f"{prog}: error: argument --buffer-sizes: {err}") from None
        try:
            protocol.check(data)
            check_model(data, [r.settings for r in runs])
        except ValueError as err:
            raise SystemExit(f"{prog}: error: --data {data_name}: {err}") from None
        planned = _jobs(args, runs, chosen, data_name, data_identity(data))
        log.info("%s: %d runs on %s (%s), %d torch thread(s) per run", self.name,
                 len({config_key(r.job.config()) for r in planned}), data.name, data.source,
                 args.threads)
        return TablePlan(protocol, chosen, data_name, data, planned)

    def after_sweep(self, args: Options, plan: TablePlan,
                    results: Sequence[JsonObject]) -> None:
        """Write the runs' ``--tensorboard`` logs.

        :param args: the parsed command line.
        :param plan: the plan.
        :param results: the runs' results.
        """
        if args.tensorboard:
            write_event_logs(_log_folders(args, plan.runs), results, args.tensorboard)

    def report(self, args: Options, argv: Sequence[str] | None, plan: TablePlan,
               results: Sequence[JsonObject]) -> Report:
        """The table's rows, grouped over seeds, and its protocol as run.

        :param args: the parsed command line.
        :param argv: the command line.
        :param plan: the plan.
        :param results: the runs' results.
        """
        rows = group_rows([(r.keys, run_result(r.settings, result))
                           for r, result in zip(plan.runs, results, strict=True)])
        title, _ = plan.protocol.heading(plan.data, tuple(plan.chosen["buffer_sizes"]))
        bad = [f"{r.method} M={r.buffer_size} seed {seed}" for r in rows
               for seed, d in zip(r.seeds, r.diverged or [], strict=False) if d]
        protocol = _protocol(args, plan)
        paper, paper_avg = self._paper(plan.protocol, protocol)
        tests = reproduce_tests({"rows": [r.to_dict() for r in rows]}, _columns(plan),
                                plan.protocol.columns_by, paper, paper_avg)
        return Report(self.name, title, DataFacts.of(plan.data),
                      command(argv, prog_of(args)), protocol,
                      rows, provenance(args.device, args.threads),
                      extra={"reproduce_tests": jsonable(tests)} if tests else {},
                      diverged=bad)

    def render(self, report: Report, plan: TablePlan, paths: Mapping[str, str]) -> Rendered:
        """The table's CSV and Markdown (the paper's numbers beside ours, where they apply).

        :param report: the report.
        :param plan: the plan.
        :param paths: the output files.
        """
        columns = _columns(plan)
        paper, paper_avg = self._paper(plan.protocol, report.protocol)
        if paper_avg is None and plan.protocol.paper_average is not None:
            paper_avg = {}  # keep the Avg column, without the paper's numbers
        view = report.to_json()
        return Rendered(table_markdown(view, columns, plan.protocol.columns_by, paper,
                                       paper_avg),
                        table_csv(view))

    @staticmethod
    def _paper(protocol: Protocol, shown: JsonObject
               ) -> tuple[PaperCells, PaperAverages | None]:
        """The paper's cells and averages to set beside the runs (none off its data).

        :param protocol: the table's protocol (its ``paper`` and ``paper_average``).
        :param shown: the report's protocol record (its ``paper_numbers_shown``).
        """
        if not shown["paper_numbers_shown"]:
            return {}, None
        return protocol.paper, protocol.paper_average


def _columns(plan: TablePlan) -> list[tuple[str, object]]:
    """The table's columns as ``(label, value of the protocol's columns_by)``."""
    protocol, chosen = plan.protocol, plan.chosen
    if protocol.columns_by == "buffer_size":
        return [(f"M={m}", m) for m in chosen["buffer_sizes"]]
    return [(f"Seq{v[protocol.columns_by]}", v[protocol.columns_by])
            for v in chosen["variants"]]


def _protocol(args: Options, plan: TablePlan) -> JsonObject:
    """The table's protocol as run: the choices, the stream, the runs' settings."""
    protocol, chosen, runs = plan.protocol, plan.chosen, plan.runs
    sample_split = protocol.stream(plan.data, chosen["seeds"][0], dict(runs[0].job.stream.variant))
    _, paper_data = protocol.heading(plan.data, tuple(chosen["buffer_sizes"]))
    settings = [r.settings for r in runs]
    facts = SettingsFacts.of(settings, [m for m in dict.fromkeys(s.method for s in settings)
                                        if not _bufferless(m)])
    quick = ([f"--quick: {chosen['samples_per_task']} samples per task, a short run of "
              f"{protocol.paper_ref}'s stream"] if "samples_per_task" in chosen else [])
    return {
        **{k: jsonable(v) for k, v in chosen.items()},
        "method_variants": list(args.variants),
        "retrieval": (list(args.retrieval) if args.retrieval else
                      {m: default_retrieval(m) for m in chosen["methods"]
                       if m in BUFFER_METHODS}),
        "stream": {k: v for k, v in sample_split.protocol.items() if k != "deviations"},
        "deviations": [*sample_split.protocol.get("deviations", []), *quick],
        "lr": facts.value("lr"), "n_iter": facts.value("n_iter"), "model": facts.value("model"),
        "method_overrides": facts.overrides(),
        "settings_by_method": dict(facts.by_method),
        **replay_protocol(settings),
        "task_aware": [m for m in chosen["methods"] if m in TASK_AWARE],
        "quick": args.quick,
        "paper_numbers_shown": paper_data,
    }


TABLES: dict[str, Table] = {name: Table(p) for name, p in PROTOCOLS.items()}
"""The table experiments, one per protocol of
:data:`~avalanche_gss.reproduce.experiments.protocols.PROTOCOLS`, by name."""
