"""The runner sweeps an experiment stage by stage: a later stage is planned from the
results of those before it, and the report receives every stage's results in order."""

import argparse
from dataclasses import dataclass, field

from avalanche_gss.reproduce import runner
from avalanche_gss.reproduce.reports.report import DataFacts, Report
from avalanche_gss.reproduce.runner import Experiment, Rendered


@dataclass(frozen=True)
class _Job:
    value: int

    def config(self):
        return {"value": self.value}


@dataclass
class _Plan:
    seen: list = field(default_factory=list)
    reported: list = field(default_factory=list)
    after: list = field(default_factory=list)


class _TwoStages(Experiment[_Plan]):
    def plan(self, args):
        return _Plan()

    def stages(self, args, plan):
        first = yield [_Job(1), _Job(2)]
        plan.seen.append([r["out"] for r in first])
        biggest = max(r["out"] for r in first)
        second = yield [_Job(biggest * 10)]  # planned from the first stage's results
        plan.seen.append([r["out"] for r in second])
        yield []  # an empty stage is not swept, and sends back no results

    def report(self, args, argv, plan, results):
        plan.reported = [r["out"] for r in results]
        return Report(self.name, "t", DataFacts("toy", "toy", checked=False), "cmd", {}, [])

    def render(self, report, plan, paths):
        return Rendered("md", None)


class _OneStage(_TwoStages):
    def stages(self, args, plan):  # the default: jobs(), then after_sweep
        return Experiment.stages(self, args, plan)

    def jobs(self, plan):
        return [_Job(3)]

    def after_sweep(self, args, plan, results):
        plan.after = [r["out"] for r in results]


def _fake_sweep(calls):
    def sweep(args, name, jobs, job):
        calls.append([j.value for j in jobs])
        return [{"out": j.value + 1} for j in jobs]
    return sweep


def test_a_stage_is_planned_from_the_results_of_the_stages_before(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "sweep", _fake_sweep(calls))
    plans = []
    experiment = _TwoStages("two-stages", "")
    original = experiment.plan
    monkeypatch.setattr(experiment, "plan", lambda args: plans.append(original(args))
                        or plans[-1])
    args = argparse.Namespace(out=str(tmp_path), tensorboard=None, prog="prog")
    assert runner.run(experiment, args, ["two-stages"]) == 0
    (plan,) = plans
    assert calls == [[1, 2], [30]]  # the second stage: ten times the first's largest result
    assert plan.seen == [[2, 3], [31]]
    assert plan.reported == [2, 3, 31]  # every stage's results, in order
    assert (tmp_path / "two-stages.md").read_text() == "md"


def test_the_default_is_one_stage_then_after_sweep(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "sweep", _fake_sweep(calls))
    experiment = _OneStage("one-stage", "")
    plan = _Plan()
    monkeypatch.setattr(experiment, "plan", lambda args: plan)
    args = argparse.Namespace(out=str(tmp_path), tensorboard=None, prog="prog")
    assert runner.run(experiment, args, ["one-stage"]) == 0
    assert calls == [[3]] and plan.after == [4] and plan.reported == [4]
