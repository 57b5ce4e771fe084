"""``--tensorboard DIR``: where the logs go is no part of a run's cache key, and a run
found in the cache gets its event file from its stored result, the scalars the run
recorded; the run with logs is the run without them, number for number."""

import json
import logging
import re

import numpy as np
import pytest
from helpers.cli import cli, toy_npz
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from avalanche_gss.reproduce import cli as command_line
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
from avalanche_gss.reproduce.runs.identity import data_identity, load
from avalanche_gss.reproduce.runs.sweep import config_key

STREAM = "train_phase/train_stream"
TEST = "eval_phase/test_stream"
TASKS = 5


def _scalars(folder):
    """Every scalar of the event files in ``folder``: {tag: [(step, value), ...]}."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _table_keys(args):
    from avalanche_gss.reproduce.experiments.tables import _job_configs, plan

    runs, chosen = plan(args, PROTOCOLS["table1"])
    return [config_key(c) for c in _job_configs(args, runs, chosen, "mnist", {})]


def _which_buffer_keys(args):
    from avalanche_gss.reproduce.experiments.which_buffer import _jobs, plan

    runs, _ = plan(args)
    return [config_key(j.config()) for j in _jobs(args, runs, "mnist", {})]


def test_where_the_logs_go_is_no_part_of_a_runs_key(tmp_path):
    table = ["table1", "--methods", "Reservoir", "Single", "--seeds", "0",
             "--buffer-sizes", "300"]
    which = ["which-buffer", "--policies", "Reservoir", "--streams", "disjoint",
             "--seeds", "0", "--buffer-sizes", "300"]
    for argv, keys in ((table, _table_keys), (which, _which_buffer_keys)):
        plain = keys(command_line.parse_args(argv))
        for folder in ("tb", "elsewhere"):
            logged = command_line.parse_args([*argv, "--tensorboard", str(tmp_path / folder)])
            assert keys(logged) == plain, (argv, folder)


def test_the_logs_are_written_from_the_scalars_a_result_holds(tmp_path, caplog):
    from avalanche_gss.reproduce.reports.event_logs import write_event_logs, write_events

    scalars = [[f"BufferSize/{STREAM}", 100, 100.0], [f"BufferSurrogate/{STREAM}", 100, 2.5],
               [f"BufferSize/{STREAM}", 200, 100.0]]
    first, cached, baseline = tmp_path / "a", tmp_path / "b", None
    results = [{"avg": 1.0, "tensorboard": scalars}, {"avg": 1.0}, {"avg": 2.0}]
    with caplog.at_level(logging.INFO, logger="reproduce"):
        missing = write_event_logs([str(first), str(cached), baseline], results, "tb")
    # A run whose result holds its scalars gets them as its event file
    assert _scalars(first) == {f"BufferSize/{STREAM}": [(100, 100.0), (200, 100.0)],
                               f"BufferSurrogate/{STREAM}": [(100, 2.5)]}
    # One stored without them (a command without --tensorboard) gets none, said in one line
    assert missing == 1 and not cached.exists()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("1 run(s) came from the cache of a command without --tensorboard")
    # Written again (the same run logged by a later command), the folder holds one file
    write_events(first, scalars)
    assert len(list(first.glob("events.out.tfevents.*"))) == 1
    assert _scalars(first)[f"BufferSurrogate/{STREAM}"] == [(100, 2.5)]


def test_the_recorder_keeps_the_numbers_tensorboard_would_plot():
    from avalanche_gss.reproduce.runs.recording import ScalarRecorder

    recorder = ScalarRecorder()
    recorder.log_single_metric("a", 3, 10)
    recorder.log_single_metric("image", object(), 10)  # not a number: left out
    recorder.log_single_metric("b", 0.5, 20)
    assert recorder.scalars == [["a", 10, 3.0], ["b", 20, 0.5]]
    assert json.loads(json.dumps(recorder.scalars)) == recorder.scalars


def test_a_logged_run_is_the_run_without_logs_number_for_number(tmp_path):
    from avalanche_gss.reproduce.experiments.tables import _job_configs, plan
    from avalanche_gss.reproduce.runs.jobs import run_job, run_logged_job

    # GSS-Greedy: the surrogate metric takes gradients of the buffer between steps
    data = toy_npz(tmp_path / "toy.npz")
    args = command_line.parse_args(["table1", "--quick", "--data", str(data), "--methods",
                                    "GSS-Greedy", "--variants", "authors", "--seeds", "0",
                                    "--buffer-sizes", "100", "--n-iter", "1", "--device", "cpu"])
    runs, chosen = plan(args, PROTOCOLS["table1"])
    (config,) = _job_configs(args, runs, chosen, str(data), data_identity(load(str(data),
                                                                               None, False)))
    plain, logged = run_job(dict(config)), run_logged_job(dict(config))
    scalars = logged.pop("tensorboard")
    assert {tag for tag, _, _ in scalars} >= {f"BufferSize/{STREAM}", f"BufferSurrogate/{STREAM}"}
    for result in (plain, logged):
        result.pop("train_seconds")
    assert logged == plain


def _counts(stderr):
    return tuple(map(int, re.search(r"(\d+) already done, (\d+) to run", stderr).groups()))


@pytest.mark.slow
def test_a_run_from_the_cache_gets_its_logs_and_a_plain_run_its_result(tmp_path):
    data = toy_npz(tmp_path / "toy.npz")
    args = ["table1", "--quick", "--data", data, "--methods", "Reservoir", "--seeds", 0,
            "--buffer-sizes", 100, "--out", "out"]
    first = cli(*args, "--tensorboard", "tb1", cwd=tmp_path, warm=True)
    assert first.returncode == 0, first.stderr
    assert _counts(first.stderr) == (0, 1)
    (run,) = (tmp_path / "tb1" / "table1").iterdir()  # the run's folder, named after it
    logged = _scalars(run)
    assert f"BufferTaskCount/{STREAM}/Task004" in logged
    report = json.loads((tmp_path / "out" / "table1.json").read_text())
    # Another log folder: the same run, from the cache, with the same curves
    again = cli(*args, "--tensorboard", "tb2", cwd=tmp_path, warm=True)
    assert again.returncode == 0, again.stderr
    assert _counts(again.stderr) == (1, 0)
    assert _scalars(tmp_path / "tb2" / "table1" / run.name) == logged
    # Without --tensorboard: the same run again, and the same rows as the logged run's
    plain = cli(*args, cwd=tmp_path, warm=True)
    assert plain.returncode == 0, plain.stderr
    assert _counts(plain.stderr) == (1, 0)
    assert json.loads((tmp_path / "out" / "table1.json").read_text())["rows"] == report["rows"]


# --- Avalanche's usual curves: each task's test accuracy and loss, the test stream's and the
# average over the tasks seen at each task end; the training loss and accuracy of every
# batch; the buffer's class counts at each task end, beside its snapshots every 100
# batches and the surrogate. Logging them changes no result.

def _blurred_blobs(path, n_classes=10, train=40, test=20, dim=12, seed=0):
    """Gaussian blobs that overlap: a learner's accuracy is neither 0 nor 100 %, so that
    two runs that differ in any draw or step show it in their accuracies."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, size=(n_classes, dim))

    def draw(per_class):
        y = np.repeat(np.arange(n_classes), per_class)
        x = centres[y] + rng.normal(0, 1.5, size=(len(y), dim))
        return x.astype(np.float32), y.astype(np.int64)

    (x_train, y_train), (x_test, y_test) = draw(train), draw(test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def _accuracies(folder):
    """Each run's final per-task accuracies, by its log folder's name (the run's label)."""
    report = json.loads((folder / "o" / "table1.json").read_text())
    return {"-".join([row["method"], *([row["variant"]] if "variant" in row else []),
                      f"M{row['buffer_size']}", "seed0"]): row["task_accuracy"][0]
            for row in report["rows"]}


@pytest.mark.slow
def test_the_logs_hold_avalanches_curves_and_change_no_result(tmp_path):
    args = ["table1", "--quick", "--methods", "GSS-Greedy", "Reservoir", "--seeds", 0,
            "--buffer-sizes", 30, "--out", "o"]
    logged, plain = tmp_path / "logged", tmp_path / "plain"
    for folder in (logged, plain):  # two folders: two caches, both runs train
        folder.mkdir()
        data = _blurred_blobs(folder / "blobs.npz")
        extra = ["--tensorboard", "tb"] if folder is logged else []
        res = cli(*args, "--data", data, *extra, cwd=folder, warm=True)
        assert res.returncode == 0, res.stderr[-3000:]
    # Logging changes no result: the same accuracies, number for number, and not trivial
    accuracies = _accuracies(logged)
    assert accuracies == _accuracies(plain)
    assert any(0 < acc < 100 for accs in accuracies.values() for acc in accs), accuracies
    runs = sorted((logged / "tb" / "table1").iterdir())
    assert [run.name for run in runs] == sorted(accuracies)  # GSS-Greedy's two variants too
    for run in runs:
        method, curves = run.name, _scalars(run)
        # Each task's test accuracy and loss, the stream's and the average over the tasks
        # seen: one point at each task end, the same steps for all
        ends = [step for step, _ in curves[f"Top1_Acc_Exp/{TEST}/Task000/Exp000"]]
        assert len(ends) == TASKS and ends == sorted(set(ends)), ends
        for tag in [*(f"{name}/{TEST}/Task000/Exp{k:03}" for k in range(TASKS)
                      for name in ("Top1_Acc_Exp", "Loss_Exp")),
                    f"Top1_Acc_Stream/{TEST}/Task000", f"Loss_Stream/{TEST}/Task000",
                    f"AverageAccuracy/{TEST}"]:
            assert [step for step, _ in curves[tag]] == ends, (method, tag)
        # the last points are the run's final accuracies
        final = accuracies[method]
        for k in range(TASKS):
            assert curves[f"Top1_Acc_Exp/{TEST}/Task000/Exp{k:03}"][-1][1] == pytest.approx(
                final[k] / 100, abs=1e-6)
        average = [value for _, value in curves[f"AverageAccuracy/{TEST}"]]
        assert average[-1] == pytest.approx(sum(final) / len(final) / 100, abs=1e-6)
        first = [curves[f"Top1_Acc_Exp/{TEST}/Task000/Exp{k:03}"][0][1] for k in range(TASKS)]
        assert average[0] == pytest.approx(first[0], abs=1e-6)  # one task seen: its own
        # The training loss and accuracy of every batch: many points, up to the last end
        for tag in (f"Loss_Epoch/{STREAM}/Task000", f"Top1_Acc_Epoch/{STREAM}/Task000"):
            steps = [step for step, _ in curves[tag]]
            assert len(steps) > 3 * TASKS and steps[-1] == ends[-1], (method, tag)
        # The buffer's size and class counts at every task end, and its surrogate, still
        assert {step for step, _ in curves[f"BufferSize/{STREAM}"]} >= set(ends), method
        assert {step for step, _ in curves[f"BufferClassCount/{STREAM}/Class000"]} >= set(ends)
        assert f"BufferSurrogate/{STREAM}" in curves


def test_the_evaluations_at_task_ends_count_no_training_pass(tmp_path):
    from avalanche_gss.reproduce.experiments.tables import _job_configs, plan
    from avalanche_gss.reproduce.runs.jobs import run_job, run_logged_job

    # A run whose passes are counted (which-buffer's as-measured runs) and traced
    data = str(_blurred_blobs(tmp_path / "blobs.npz"))
    args = command_line.parse_args(["table1", "--quick", "--data", data, "--methods",
                                    "Reservoir", "--seeds", "0", "--buffer-sizes", "30",
                                    "--device", "cpu"])
    runs, chosen = plan(args, PROTOCOLS["table1"])
    (config,) = _job_configs(args, runs, chosen, data, data_identity(load(data, None, False)))
    config = {**config, "count_passes": True, "trace": True}
    plain, logged = run_job(dict(config)), run_logged_job(dict(config))
    scalars = logged.pop("tensorboard")
    assert sum(tag.startswith("Top1_Acc_Exp/") for tag, _, _ in scalars) == TASKS * TASKS
    for result in (plain, logged):
        result.pop("train_seconds")
    assert logged["extras"]["passes"] == plain["extras"]["passes"]
    assert logged == plain
