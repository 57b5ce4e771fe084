"""``--tensorboard DIR``: each buffer run's curves as TensorBoard event files, from its result.

Where the logs go changes no run, so it is no part of a run's cache key: a run with
``--tensorboard`` is the run without it. Its job
(:func:`~avalanche_gss.reproduce.runs.jobs.run_logged_job`) records every scalar that the
buffer metrics (:func:`~avalanche_gss.metrics.buffer_metrics`: composition per class and
task, the surrogate, every 100 batches and at each task end) and Avalanche's accuracy and
loss metrics emit (:class:`.recording.ScalarRecorder`): each task's test accuracy and loss, the test
stream's and the average over the tasks seen at each task end, and the training loss and
accuracy of every incoming batch, under Avalanche's tags (the user guide's command-line
page lists them). They go into its result's ``tensorboard`` entry, a few numbers per batch;
the command then writes each run's event file from its result (:func:`write_event_logs`),
whether the run trained now or came from the cache. A cached run stored by a command
without ``--tensorboard`` holds no curves: the command says so in one line instead of
writing its logs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

from avalanche_gss.reproduce.json_types import Json
from avalanche_gss.reproduce.runs.recording import RESULT_KEY

log = logging.getLogger("reproduce")

EVENTS = "events.out.tfevents."
"""How TensorBoard event files begin their names."""


def write_events(folder: str | os.PathLike[str],
                 scalars: Sequence[Sequence[str | int | float]]) -> Path:
    """Write one run's scalars as a TensorBoard event file in ``folder``; return the folder.

    The folder ends up with this one event file: those an earlier command wrote there
    (the same run, logged again) are removed once it is written, so TensorBoard shows
    each curve once.

    :param folder: the run's log folder (created if missing).
    :param scalars: ``[tag, step, value]`` of each scalar, in order
        (:class:`.recording.ScalarRecorder`).
    :raises OSError: the folder or the file cannot be written.
    """
    from torch.utils.tensorboard import SummaryWriter

    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    before = [p for p in path.iterdir() if p.name.startswith(EVENTS) and p.is_file()]
    writer = SummaryWriter(str(path))
    try:
        for tag, step, value in scalars:
            writer.add_scalar(str(tag), float(value), global_step=int(step))
    finally:
        writer.close()
    for old in before:
        old.unlink(missing_ok=True)
    return path


def write_event_logs(folders: Sequence[str | None], results: Sequence[Mapping[str, Json]],
                     root: str) -> int:
    """Write the event file of each logged run from its result; say what was not written.

    A run whose result holds no scalars came from the cache of a command without
    ``--tensorboard``: one warning line counts those and says how to log them.

    :param folders: each run's log folder, ``None`` for a run without logs (a baseline);
        a folder named twice (runs of one result) is written once.
    :param results: each run's result, in the same order.
    :param root: the ``--tensorboard`` folder, for the messages.
    :return: how many runs had no scalars to write.
    :raises OSError: a log folder or file cannot be written.
    """
    written: set[str] = set()
    missing: set[str] = set()
    for folder, result in zip(folders, results, strict=True):
        if folder is None or folder in written or folder in missing:
            continue
        scalars = result.get(RESULT_KEY)
        if scalars is None:
            missing.add(folder)
            continue
        write_events(folder, cast(Sequence[Sequence[str | int | float]], scalars))
        written.add(folder)
    if written:
        log.info("wrote the TensorBoard logs of %d run(s) under %s", len(written), root)
    if missing:
        log.warning("%d run(s) came from the cache of a command without --tensorboard and "
                    "hold no curves: no TensorBoard logs for them (run them again with "
                    "another --cache to log them)", len(missing))
    return len(missing)
