"""``python -m reproduce figure5``: GSS-Greedy against ``n`` and the batch size (Figure 5).

GSS-Greedy's final average accuracy on disjoint MNIST against ``n`` and against the batch
size (M = 300).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from avalanche_gss.reproduce.common import Choices, command, prog_of, settings_for
from avalanche_gss.reproduce.experiments.figure_runs import (
    DISJOINT,
    FIGURE5,
    PAPER_FIGURE5_N,
    FigureJob,
    chosen_for,
    figure_data_label,
    figure_job,
    figure_jobs,
    flavours,
    row_label,
    stream_protocol,
)
from avalanche_gss.reproduce.json_types import JsonObject, json_object, json_strs
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.reports.plotting import Panel, Series, plot_panels
from avalanche_gss.reproduce.reports.report import (
    DataFacts,
    Report,
    SettingsFacts,
    jsonable,
    shared_setting,
)
from avalanche_gss.reproduce.reports.rows import Row, RowKeys, group_rows
from avalanche_gss.reproduce.reports.writing import (
    data_lines,
    format_cell,
    protocol_line,
    provenance,
    provenance_line,
    table_csv,
)
from avalanche_gss.reproduce.runner import Experiment, JobFunction, Rendered
from avalanche_gss.reproduce.runs.planning import PlannedRun, run_result
from avalanche_gss.reproduce.runs.training import BUFFER_METHODS, RunSettings, run_label
from avalanche_gss.streams import ArrayDataset

log = logging.getLogger("reproduce")

N_METHODS = ("GSS-Greedy",)
"""The methods whose ``n`` (buffer gradients per score) the figure varies: each gets the
``n`` panel's runs, and its runs of the batch-size panel are at ``FIGURE5["n"]``."""

PAPER_METHOD = "GSS-Greedy"
"""The method of the paper's number (:data:`PAPER_FIGURE5_N`)."""

PANEL_NOTE = ("rows with `n` vary n at batch size 10; rows with `batch_size` vary the "
              "incoming batch size at n = 10 (replay batches stay 10 samples, n_iter stays "
              "fixed: larger batches mean fewer updates)")
"""What the protocol says of the two panels."""


def _job_label(settings: RunSettings) -> str:
    """A run's name in logs and failure lines: its :func:`run_label`, ``n``, batch size."""
    n = settings.options.get("n")
    return "-".join([run_label(settings), *([f"n{n}"] if n is not None else []),
                     f"batch{settings.batch_size}"])


@dataclass
class Figure5Plan:
    """Figure 5's plan: choices, data, runs.

    :param chosen: the choices (methods, sizes, seeds, ``n`` and batch-size values).
    :param methods: the buffer methods it runs.
    :param data_name: the data as the command line names them.
    :param data: the loaded data.
    :param stream: the first seed's stream protocol and deviations.
    :param runs: the runs, each with its job.
    """

    chosen: Choices
    methods: tuple[str, ...]
    data_name: str
    data: ArrayDataset
    stream: JsonObject
    runs: list[PlannedRun[FigureJob]]

    @property
    def jobs(self) -> list[FigureJob]:
        """The runs' jobs, in order."""
        return [r.job for r in self.runs]

    @property
    def own(self) -> bool:
        """Whether the data were verified to be MNIST (the paper's number applies)."""
        return figure_data_label(self.data)[1]


def _points(method: str, chosen: Choices) -> list[tuple[RowKeys, dict[str, int]]]:
    """A method's points: its row keys (``n`` or ``batch_size``) and its settings there."""
    points: list[dict[str, int]] = [{"batch_size": b} for b in chosen["batch_sizes"]]
    fixed = {"batch_size": chosen["batch_size"]}
    if method in N_METHODS:
        points = [{"n": n} for n in chosen["n_values"]] + points
        fixed = {"n": chosen["n"], **fixed}
    return [(point, {**fixed, **point}) for point in points]


def _settings(args: Options, chosen: Choices, methods: Sequence[str]
              ) -> list[tuple[RowKeys, RunSettings]]:
    """Every run's row keys and settings: seed x method x variant x buffer size x point."""
    runs: list[tuple[RowKeys, RunSettings]] = []
    for seed in chosen["seeds"]:
        for method in methods:
            for flavour in flavours(args, method):
                for m in chosen["buffer_sizes"]:
                    runs += [({**flavour, **point},
                              settings_for(args, DISJOINT, method, buffer_size=m, seed=seed,
                                           **flavour, **fields))
                             for point, fields in _points(method, chosen)]
    return runs


class Figure5(Experiment[Figure5Plan]):
    """GSS-Greedy's final average accuracy against ``n`` and the batch size (Figure 5)."""

    def job_function(self, args: Options) -> JobFunction:
        """:func:`~.figure_runs.figure_job`, the figures' job.

        :param args: the parsed command line.
        """
        return figure_job

    def plan(self, args: Options) -> Figure5Plan:
        """The runs: each buffer method at each ``n`` and batch size.

        :param args: the parsed command line.
        """
        chosen = chosen_for(args, FIGURE5)
        methods = tuple(m for m in chosen["methods"] if m in BUFFER_METHODS)
        if not methods:
            raise SystemExit("figure5 needs a buffer method (GSS-Greedy by default)")
        data_name = args.data or DISJOINT.dataset
        spt = chosen["samples_per_task"]
        data, _, stream = stream_protocol(args, data_name, spt, chosen["seeds"][0])
        pairs = _settings(args, chosen, methods)
        jobs = figure_jobs(args, data_name, data, spt, [s for _, s in pairs], _job_label)
        log.info("figure5: %d runs on %s (%s)", len(jobs), data.name, data.source)
        runs = [PlannedRun(s, keys, job) for (keys, s), job in zip(pairs, jobs, strict=True)]
        return Figure5Plan(chosen, methods, data_name, data, stream, runs)

    def report(self, args: Options, argv: Sequence[str] | None,
               plan: Figure5Plan, results: Sequence[JsonObject]) -> Report:
        """Final accuracies, one row per method, point and buffer size.

        :param args: the parsed command line.
        :param argv: the command line.
        :param plan: the plan.
        :param results: the runs' results.
        """
        rows = group_rows([(r.keys, run_result(r.settings, res))
                           for r, res in zip(plan.runs, results, strict=True)])
        shown_as = figure_data_label(plan.data)[0]
        title = ("GSS-Greedy: final average accuracy vs n and vs batch size on disjoint "
                 f"{shown_as} " + ("(paper Figure 5)" if plan.own else
                                   "(protocol of paper Figure 5; the paper's number is for "
                                   "MNIST and is not shown)"))
        settings = [r.settings for r in plan.runs]
        facts = SettingsFacts.of(settings)
        protocol: JsonObject = {
            **{k: jsonable(v) for k, v in plan.chosen.items()},
            "methods": list(plan.methods), **plan.stream, "lr": args.lr or DISJOINT.lr,
            "settings_by_method": dict(facts.by_method),
            "n_iter": args.n_iter or DISJOINT.n_iter,
            "replay_batch_size": shared_setting(settings, "replay_batch_size"),
            "quick": args.quick, "panels": PANEL_NOTE,
            "paper": {"n=1": PAPER_FIGURE5_N[1]} if plan.own else {},
        }
        return Report(self.name, title, DataFacts.of(plan.data), command(argv, prog_of(args)),
                      protocol, rows, provenance(args.device, args.threads))

    def render(self, report: Report, plan: Figure5Plan, paths: Mapping[str, str]) -> Rendered:
        """The two panels as Markdown tables and a figure; the runs' CSV.

        :param report: the report.
        :param plan: the plan.
        :param paths: the output files.
        """
        view = report.to_json()
        png = os.path.join(os.path.dirname(paths["md"]), "figure5.png")
        panels = [_panel(report, plan, *spec) for spec in _panel_specs(plan.chosen)]
        md = [*_heading(view, plan)]
        for lines, _ in panels:
            md += lines
        png = plot_panels([p for _, p in panels if p is not None], png,
                          title=f"GSS-Greedy ablation, disjoint "
                                f"{figure_data_label(plan.data)[0]}")
        deviations = json_strs(plan.stream["deviations"])
        if deviations:
            md += ["Deviations from the paper's protocol:", ""] + [f"- {d}" for d in deviations]
            md.append("")
        md += [provenance_line(report.provenance or {}), "", f"Plot: `{png}`", "",
               f"Command: `{report.command}`", ""]
        return Rendered("\n".join(md), table_csv(view), {"png": png})


def _heading(view: JsonObject, plan: Figure5Plan) -> list[str]:
    """The title, data, protocol and legend lines."""
    chosen = plan.chosen
    line = protocol_line({**json_object(view["protocol"]), "batch_size": chosen["batch_size"]})
    return [f"# figure5: {view['title']}", "", *data_lines(view),
            f"{line} The paper: 1000 training samples per task.", "",
            f"Columns: n=v: GSS-Greedy scores each sample against v buffer gradients (batches "
            f"of {chosen['batch_size']}); batch_size=v: incoming batches of v samples (n = "
            f"{chosen['n']}). Rows: the method, with its variant in parentheses.", "",
            "Each cell: final average accuracy over the 5 tasks, "
            + (f"mean ± std over {len(chosen['seeds'])} seeds" if len(chosen["seeds"]) > 1
               else "one seed (no spread)")
            + (" (the paper's number in parentheses)." if plan.own else "."), ""]


def _panel_specs(chosen: Choices) -> list[tuple[str, Sequence[int], str, str]]:
    """Each panel's row key, values, title and x label."""
    return [("n", chosen["n_values"], f"batch size {chosen['batch_size']}",
             "n (buffer gradients per score)"),
            ("batch_size", chosen["batch_sizes"], f"n = {chosen['n']}", "batch size")]


def _panel(report: Report, plan: Figure5Plan, key: str, values: Sequence[int], title: str,
           xlabel: str) -> tuple[list[str], Panel | None]:
    """One panel: its Markdown table and its plot (none where no row has ``key``)."""
    name = xlabel.split(" (")[0]
    panel_rows = [r for r in report.rows if isinstance(r, Row) and key in r.keys]
    if not panel_rows:
        return [], None
    sizes = ", ".join(map(str, plan.chosen["buffer_sizes"]))
    md = [f"## vs {name} ({title}, M = {sizes})", "",
          "| method | " + " | ".join(f"{key}={v}" for v in values) + " |",
          "|---|" + "---|" * len(values)]
    paper = PAPER_FIGURE5_N if plan.own and key == "n" else {}
    series = []
    for label in dict.fromkeys(row_label(r.method, r.keys) for r in panel_rows):
        mine = {r.keys[key]: r for r in panel_rows if row_label(r.method, r.keys) == label}
        xs = [v for v in values if v in mine]
        series.append(Series(label, xs, [mine[v].avg_mean for v in xs],
                             [mine[v].avg_std or 0.0 for v in xs], "markers"))
        ours = label.startswith(PAPER_METHOD)
        cells = [(format_cell(mine[v].avg_mean, mine[v].avg_std) if v in mine else "-")
                 + (f" ({paper[v]:.1f})" if ours and v in paper else "") for v in values]
        md.append(f"| {label} | " + " | ".join(cells) + " |")
    md.append("")
    shown = [n for n in paper if n in values]
    if shown:
        series.append(Series("paper (text)", shown, [paper[n] for n in shown],
                             style="reference"))
    return md, Panel(f"vs {name} ({title})", xlabel, "average accuracy (%)", series, logx=True)


FIGURE5_EXPERIMENT = Figure5("figure5", "")
"""The ``figure5`` experiment."""
