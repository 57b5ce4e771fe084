# avalanche-gss --import my_experiment.py my-experiment --quick --out OUT
"""An experiment of one's own, in one file: Reservoir vs GSS-Greedy at two learning rates.

Run it from the folder that holds this file (the line above)::

    avalanche-gss --import my_experiment.py my-experiment --quick --out OUT

``--import`` loads this module before the command line is read, so ``my-experiment`` is
an experiment of the command line; its runs are cached under ``OUT/cache/my-experiment``
(their keys hold this file's hash: edit it and they run again) and its report is written
as ``OUT/my-experiment.json``, ``.csv`` and ``.md``. The final average accuracy on
disjoint MNIST (Table 1's stream) of each method at each learning rate is one row;
``--quick``: 50 samples per task, one iteration per batch, M = 50.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from avalanche_gss.reproduce.extend import (
    PROTOCOLS,
    CodeIdentity,
    DataFacts,
    Experiment,
    JsonObject,
    Options,
    PlannedRun,
    Rendered,
    Report,
    Row,
    RunJob,
    StreamSpec,
    command,
    data_identity,
    format_cell,
    group_rows,
    job_base,
    prog_of,
    provenance,
    register,
    resolve_data,
    run_label,
    run_result,
    settings_for,
    shared_setting,
    table_csv,
)
from avalanche_gss.streams import ArrayDataset

NAME = "my-experiment"
METHODS = ("Reservoir", "GSS-Greedy")
LEARNING_RATES = (0.05, 0.01)
STREAM = "table1"  # whose stream: disjoint MNIST, 5 tasks of 2 classes


@dataclass
class Plan:
    """The data and the runs: each method at each learning rate, buffer size and seed."""

    data: ArrayDataset
    runs: list[PlannedRun[RunJob]]

    @property
    def jobs(self) -> list[RunJob]:
        """The runs' jobs, in order (the runner sweeps them)."""
        return [r.job for r in self.runs]


class LearningRates(Experiment[Plan]):
    """Final average accuracy of each method at each learning rate."""

    def plan(self, args: Options) -> Plan:
        """Every learning rate x method x buffer size x seed, on Table 1's stream."""
        protocol = PROTOCOLS[STREAM]
        data_name, data = resolve_data(args, protocol)
        stream = StreamSpec(protocol.stream, {"samples_per_task": 50 if args.quick else 1000})
        base = job_base(args, self.name, data_name, data_identity(data))
        n_iter = 1 if args.quick else protocol.n_iter
        runs = []
        for lr in LEARNING_RATES:
            for method in METHODS:
                for m in args.buffer_sizes or ((50,) if args.quick else (300,)):
                    for seed in args.seeds or (0,):
                        s = settings_for(args, protocol, method, buffer_size=m, seed=seed,
                                         lr=lr, n_iter=n_iter)
                        job = RunJob(**base, code=CodeIdentity.of_method(method), settings=s,
                                     label=f"{run_label(s)}-lr{lr}", stream=stream)
                        runs.append(PlannedRun(s, {"lr": lr}, job))
        return Plan(data, runs)

    def report(self, args: Options, argv: Sequence[str] | None, plan: Plan,
               results: Sequence[JsonObject]) -> Report:
        """One row per method, learning rate and buffer size, over the seeds."""
        rows = group_rows([(r.keys, run_result(r.settings, result))
                           for r, result in zip(plan.runs, results, strict=True)])
        settings = [r.settings for r in plan.runs]
        protocol: JsonObject = {
            "methods": list(METHODS), "learning_rates": list(LEARNING_RATES),
            "stream": STREAM, "samples_per_task": plan.runs[0].job.stream.variant[
                "samples_per_task"],
            "n_iter": shared_setting(settings, "n_iter"),
            "batch_size": shared_setting(settings, "batch_size"),
            "replay_batch_size": shared_setting(settings, "replay_batch_size"),
            "quick": args.quick}
        return Report(self.name, "final average accuracy of Reservoir and GSS-Greedy at two "
                      "learning rates on disjoint MNIST (an example experiment)",
                      DataFacts.of(plan.data), command(argv, prog_of(args)), protocol, rows,
                      provenance(args.device, args.threads))

    def render(self, report: Report, plan: Plan, paths: Mapping[str, str]) -> Rendered:
        """A method x learning rate table of final accuracies; one CSV line per run."""
        rows = [r for r in report.rows if isinstance(r, Row)]
        lines = [f"# {self.name}: {report.title}", "", f"Data: {report.data.source}", "",
                 "| method | M | " + " | ".join(f"lr={lr}" for lr in LEARNING_RATES) + " |",
                 "|---|---|" + "---|" * len(LEARNING_RATES)]
        for method in METHODS:
            for m in dict.fromkeys(r.buffer_size for r in rows):
                cells = {r.keys["lr"]: format_cell(r.avg_mean, r.avg_std) for r in rows
                         if r.method == method and r.buffer_size == m}
                lines.append(f"| {method} | {m} | "
                             + " | ".join(cells.get(lr, "-") for lr in LEARNING_RATES) + " |")
        lines += ["", f"Command: `{report.command}`", ""]
        return Rendered("\n".join(lines), table_csv(report.to_json()))


register(NAME, LearningRates(NAME, "Reservoir vs GSS-Greedy at two learning rates "
                                   "(examples/my_experiment.py)"))
