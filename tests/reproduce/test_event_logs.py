"""``--tensorboard DIR``: where the logs go is no part of a run's cache key, and a run
found in the cache gets its event file from its stored result, the scalars the run
recorded; the run with logs is the run without them, number for number."""

import json
import logging
import re

import pytest
from helpers.cli import cli, toy_npz
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from avalanche_gss.reproduce import cli as command_line
from avalanche_gss.reproduce.common import data_identity, load
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
from avalanche_gss.reproduce.runs.sweep import config_key

STREAM = "train_phase/train_stream"


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
    from avalanche_gss.reproduce.experiments.which_buffer import _job_configs, plan

    runs, _ = plan(args)
    return [config_key(c) for c in _job_configs(args, runs, "mnist", {})]


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
    from avalanche_gss.reproduce.reports.event_logs import ScalarRecorder

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
