"""Training a stream with a checkpoint every few experiences, resuming after a crash."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avalanche_gss.checkpoint.files import load_state, read_state, save_state

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["train_resumable"]

def _chunks(stream: Iterable[Any], start: int, size: int) -> Iterator[Any]:
    """Consecutive pieces of ``size`` experiences of ``stream``, from experience ``start``."""
    sliceable: Any = stream
    if hasattr(sliceable, "__len__") and hasattr(sliceable, "__getitem__"):
        for first in range(start, len(sliceable), size):
            yield sliceable[first : first + size]
        return
    items = iter(stream)  # a lazy stream without slicing: walk it
    next(itertools.islice(items, start, start), None)
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def train_resumable(
    strategy: SupervisedTemplate,
    stream: Iterable[Any],
    path: str | os.PathLike[str],
    *,
    every: int = 100,
    identity: dict[str, Any] | None = None,
    **train_kwargs: Any,
) -> int:
    """Train ``stream`` with a checkpoint every ``every`` experiences; resume from ``path``.

    If ``path`` exists, the strategy is restored from it and training continues with the
    experience after the saved ones; if it already covers the whole stream, nothing is
    trained. Each chunk is one ``strategy.train`` call, which for
    :class:`~avalanche_gss.training.OnlineTemplate` strategies learns exactly what one
    call on the whole stream would. A run killed at any moment loses at most the
    ``every - 1`` experiences after its last checkpoint, which the next call relearns.

    :param strategy: a freshly built strategy (same model, optimizer, plugins and seeds on
        every call).
    :param stream: the experiences (a sliceable Avalanche stream, a list, or any iterable).
    :param path: the checkpoint file.
    :param every: experiences between checkpoints.
    :param identity: values that identify the run beyond the strategy (e.g. the data's
        hash); a checkpoint made with others is refused.
    :param train_kwargs: passed to ``strategy.train``.
    :return: the number of experiences learnt in total.
    :raises ValueError: ``every < 1``, or the checkpoint is ahead of the stream's end.
    :raises CheckpointError: the checkpoint is damaged or of another configuration.
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    path = Path(path)
    length = len(stream) if isinstance(stream, Sized) else None
    if path.exists():
        saved = read_state(path)
        if length is not None and saved["experiences"] > length:
            raise ValueError(f"{path} has learnt {saved['experiences']} experiences, the "
                             f"stream has only {length}")
    done = (load_state(strategy, path, stream_length=length, identity=identity)
            if path.exists() else 0)
    for chunk in _chunks(stream, done, every):
        strategy.train(chunk, **train_kwargs)
        done += len(chunk)
        save_state(strategy, path, experiences=done, stream_length=length, identity=identity)
    return done
