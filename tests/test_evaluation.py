"""Accuracy curves (avalanche_gss.reproduce.runs.evaluation) and the figure plots
(avalanche_gss.reproduce.reports.plotting)."""

import json

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from helpers import PNG_MAGIC

from avalanche_gss.methods.reservoir import ReservoirBuffer
from avalanche_gss.models import make_model
from avalanche_gss.reproduce.reports.plotting import (
    Panel,
    Series,
    plot_curves,
    plot_panels,
    plot_surrogate_vs_solid_angle,
)
from avalanche_gss.reproduce.runs.evaluation import (
    CurveResult,
    PeriodicEvalPlugin,
    mean_curve,
    run_curve,
    seen_tasks,
    task_end_samples,
)
from avalanche_gss.reproduce.runs.training import RunResult, RunSettings, run
from avalanche_gss.solid_angle import surrogate_vs_solid_angle
from avalanche_gss.streams import online_benchmark
from avalanche_gss.training import OnlineRehearsal, quiet_evaluator


def _settings(method, **kw):
    base = {"buffer_size": 30, "n_iter": 2}
    if method == "iCaRL":
        base["lr"] = 0.1
    return RunSettings(method=method, **{**base, **kw})


@pytest.mark.parametrize("method", ["GSS-Greedy", "Single", "GEM", "iCaRL"])
def test_evaluating_during_training_leaves_the_run_unchanged(tiny_split, method):
    # Given the same settings, when the run is measured every 50 samples,
    # then its final accuracies are exactly those of the plain run.
    curve = run_curve(_settings(method), tiny_split, every_samples=50)
    plain = run(_settings(method), tiny_split)
    assert curve.result.task_accuracy == plain.task_accuracy
    assert curve.task_accuracy[-1] == plain.task_accuracy
    assert curve.samples[-1] == 300
    assert curve.samples == sorted(set(curve.samples))
    assert curve.eval_seconds > 0


def test_online_methods_are_measured_every_every_samples(tiny_split):
    curve = run_curve(_settings("Reservoir"), tiny_split, every_samples=50)
    assert curve.schedule == "periodic"
    assert curve.samples == [50, 100, 150, 200, 250, 300]
    assert all(len(a) == tiny_split.n_tasks for a in curve.task_accuracy)
    # After 50 samples only task 1 was seen: the other tasks' classes are never predicted
    # well, and the mean over seen tasks is task 1's accuracy.
    assert curve.seen_avg[0] == curve.task_accuracy[0][0]
    assert curve.task_accuracy[0][0] > 80.0
    assert curve.avg[0] < 30.0


def test_gem_is_measured_inside_its_task_level_experiences_and_at_task_ends(tiny_split):
    curve = run_curve(_settings("GEM"), tiny_split, every_samples=50)
    ends = task_end_samples(tiny_split)
    assert ends == [60, 120, 180, 240, 300]
    assert set(range(50, 301, 50)) <= set(curve.samples)
    assert set(ends) <= set(curve.samples)


def test_icarl_is_measured_at_task_ends_only(tiny_split):
    curve = run_curve(_settings("iCaRL"), tiny_split, every_samples=50)
    assert curve.schedule == "task_ends"
    assert curve.samples == task_end_samples(tiny_split)  # stream samples, not exemplars


def test_iid_baselines_have_one_point_at_the_end(tiny_split):
    curve = run_curve(_settings("iid-online", n_iter=1), tiny_split, every_samples=50)
    assert curve.schedule == "end"
    assert curve.samples == [300]
    assert curve.task_accuracy == [curve.result.task_accuracy]


def test_plugin_inside_a_strategy_restores_the_training_state(tiny_split):
    # Given an online rehearsal strategy with the plugin, when it is evaluated inside
    # train, then training goes on in train mode and the buffer still sees every batch.
    bench = online_benchmark(tiny_split)
    model = make_model("mlp", tiny_split.input_shape, tiny_split.num_classes)
    probe = PeriodicEvalPlugin(bench.test_stream, every_samples=100)
    buffer = ReservoirBuffer(1000, seed=0)
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               storage_policy=buffer, n_iter=1, plugins=[probe],
                               evaluator=quiet_evaluator(accuracy_metrics(experience=True)))
    strategy.train(bench.train_stream)
    assert [p.samples for p in probe.points] == [100, 200, 300]
    assert model.training
    assert len(buffer) == 300
    assert probe.record(strategy) is probe.points[-1]  # nothing learnt since: no new eval


def test_plugin_rejects_bad_intervals(tiny_split):
    with pytest.raises(ValueError):
        PeriodicEvalPlugin(online_benchmark(tiny_split).test_stream, every_samples=0)


def test_plugin_needs_an_accuracy_metric(tiny_split):
    bench = online_benchmark(tiny_split)
    model = make_model("mlp", tiny_split.input_shape, tiny_split.num_classes)
    strategy = OnlineRehearsal(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               storage_policy=ReservoirBuffer(10),
                               plugins=[PeriodicEvalPlugin(bench.test_stream)])
    with pytest.raises(ValueError, match="accuracy_metrics"):
        strategy.train(bench.train_stream)


def test_seen_tasks_counts_tasks_with_a_learnt_sample():
    ends = [60, 120, 180]
    assert [seen_tasks(s, ends) for s in (0, 10, 60, 61, 180)] == [1, 1, 1, 2, 3]


def _curve(samples, accs, seed=0):
    s = RunSettings(method="Rand", seed=seed)
    final = RunResult(s, accs[-1], sum(accs[-1]) / len(accs[-1]), 1.0)
    return CurveResult(final, samples, accs, "periodic", [2, 4])


def test_mean_curve_averages_seeds_point_by_point():
    a = _curve([2, 4], [[100.0, 0.0], [50.0, 50.0]])
    b = _curve([2, 4], [[80.0, 0.0], [70.0, 70.0]], seed=1)
    samples, mean, std = mean_curve([a, b])
    assert samples == [2, 4]
    assert mean == pytest.approx([45.0, 60.0])
    assert std == pytest.approx([5.0, 10.0])
    _, seen, _ = mean_curve([a, b], seen=True)
    assert seen == pytest.approx([90.0, 60.0])  # at 2 samples only task 1 was seen
    with pytest.raises(ValueError):
        mean_curve([a, _curve([3, 4], [[1.0, 1.0], [1.0, 1.0]])])


def test_curve_result_survives_json(tiny_split):
    curve = run_curve(_settings("Rand"), tiny_split, every_samples=100)
    back = CurveResult.from_dict(json.loads(json.dumps(curve.to_dict())))
    assert back == curve


def test_plots_write_png_files(tmp_path):
    study = surrogate_vs_solid_angle(6, 4, dim=20, n_samples=2000,
                                     generator=torch.Generator().manual_seed(0))
    paths = [
        plot_surrogate_vs_solid_angle({"k=4": study}, tmp_path / "a.png"),
        plot_curves([Series("x", [1, 2, 3], [10, 20, 30], [1, 1, 1]),
                     Series("y", [3], [40], style="end"),
                     Series("z", [1, 3], [5, 25], style="markers")],
                    tmp_path / "b.png", title="t", vlines=[2]),
        plot_panels([Panel("p", "n", "acc", [Series("g", [1, 10], [60, 70], [2, 3], "markers"),
                                             Series("paper", [1], [67.3], style="reference")],
                           logx=True),
                     Panel("q", "b", "acc", [Series("g", [5, 10], [60, 70])])],
                    tmp_path / "sub" / "c.png"),
    ]
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == PNG_MAGIC


def test_series_validates_its_input():
    with pytest.raises(ValueError):
        Series("x", [1, 2], [1])
    with pytest.raises(ValueError):
        Series("x", [1], [1], style="bars")
