"""Checkpoint files: checksummed, written atomically, loaded ``weights_only``."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from avalanche_gss._atomic import replace_file
from avalanche_gss._files import FileRefused, read_regular
from avalanche_gss.checkpoint._text import short, short_error
from avalanche_gss.checkpoint.config import MODEL_RECORD, first_difference, strategy_config
from avalanche_gss.checkpoint.model import grow_model
from avalanche_gss.checkpoint.state import (
    FORMAT_VERSION,
    buffer_states,
    check_tensors,
    load_strategy_state_dict,
    strategy_state_dict,
)

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["CheckpointError", "save_state", "read_state", "load_state"]

class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into this strategy: damaged, or of another run."""


MAX_CHECKPOINT_BYTES = 16 * 2**30
"""The largest checkpoint file :func:`read_state` reads (16 GiB): a larger one (a sparse
file, another file at the checkpoint's path) is refused before a byte of it is read."""

_MAGIC = b"avalanche-gss checkpoint\n"
"""The first line of every checkpoint file; the second is the payload's SHA-256 (hex)."""


def _pack(payload: bytes) -> bytes:
    return _MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def save_state(strategy: SupervisedTemplate, path: str | os.PathLike[str], *,
               experiences: int, stream_length: int | None = None,
               identity: dict[str, Any] | None = None) -> None:
    """Write the strategy's state, position, configuration and checksum to ``path``.

    The state is :func:`strategy_state_dict`'s, the configuration
    :func:`strategy_config`'s. The file is written under a temporary name in the same
    folder, flushed to disk and renamed over ``path``: at every moment ``path`` is either
    the previous checkpoint or the new one. A ``path`` that is a symbolic link is
    refused: nothing is written through it.

    :param strategy: the strategy, between ``train`` calls.
    :param path: checkpoint file (its folder is created if needed).
    :param experiences: how many experiences of the stream the strategy has learnt.
    :param stream_length: the stream's length, if known (part of the configuration).
    :param identity: more values identifying the run (see :func:`strategy_config`).
    :raises OSError: ``path`` is a symbolic link, or the file cannot be written (a full
        disk, no permission): one line naming it; the previous checkpoint is left whole.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {**strategy_state_dict(strategy), "experiences": int(experiences),
             "config": strategy_config(strategy, stream_length=stream_length,
                                       identity=identity)}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = _pack(buffer.getvalue())
    replace_file(path, lambda file: file.write(data), sync_dir=True)


def read_state(source: str | os.PathLike[str] | bytes, *, name: str | None = None
               ) -> dict[str, Any]:
    """Read a :func:`save_state` file: check its checksum, then load it ``weights_only``.

    The file is a header line, the SHA-256 of the rest, and ``torch.save``'s output: any
    changed byte (a flip, a truncation) is refused before the payload is unpickled. A
    checksum proves no origin (anyone can recompute it), so what the payload holds is
    checked too: every tensor must hold the bytes its shape takes (a tensor whose zero
    strides repeat four bytes a billion times is refused before it is copied), and the
    position must be a count of experiences. Errors quote the file's content in a few
    hundred characters at most.

    :param source: the file, or its bytes.
    :param name: how to name it in errors (default: its path).
    :return: the state, bit for bit what was saved.
    :raises FileNotFoundError: no such file.
    :raises CheckpointError: not a checkpoint of this format, or damaged or altered since
        it was saved, or, before a byte is read, a symbolic link, not a regular file (a
        FIFO, a folder) or larger than :data:`MAX_CHECKPOINT_BYTES`; the message names
        the file.
    """
    if isinstance(source, bytes):
        label, data = name or "checkpoint", source
    else:
        label = name or os.fspath(source)
        try:
            data = read_regular(source, limit=MAX_CHECKPOINT_BYTES, what="checkpoint")
        except FileNotFoundError:
            raise FileNotFoundError(f"no such checkpoint: {label}") from None
        except FileRefused as err:
            raise CheckpointError(f"{label}: {err.reason}") from None
    if not data.startswith(_MAGIC):
        raise CheckpointError(f"{label}: not a checkpoint of format {FORMAT_VERSION} written "
                              "by save_state (no header; an older format or another file)")
    digest, newline, payload = data[len(_MAGIC):].partition(b"\n")
    if not newline or digest != hashlib.sha256(payload).hexdigest().encode():
        raise CheckpointError(f"{label}: its checksum does not match its content (the file "
                              f"is damaged, truncated or altered: {len(data)} bytes); delete "
                              "it to start over")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:  # an intact payload that torch cannot read: say why
        message = " ".join(str(err).split())[:300]
        raise CheckpointError(f"{label}: not a readable checkpoint ({type(err).__name__}: "
                              f"{message or 'no message'})") from err
    if not isinstance(state, dict) or "experiences" not in state or "config" not in state:
        raise CheckpointError(f"{label} is not a checkpoint written by save_state")
    if state.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{label}: checkpoint format {short(state.get('format'))}; "
                              f"this version reads {FORMAT_VERSION}")
    done = state["experiences"]
    if not isinstance(done, int) or isinstance(done, bool) or done < 0:
        raise CheckpointError(f"{label}: its count of experiences learnt is {short(done)}, "
                              "not an integer >= 0")
    if not isinstance(state["config"], dict):
        raise CheckpointError(f"{label}: its configuration is {short(state['config'])}, "
                              "not a dict")
    try:
        check_tensors(state)
    except ValueError as err:
        raise CheckpointError(f"{label}: {err}") from None
    return state


def load_state(strategy: SupervisedTemplate, path: str | os.PathLike[str], *,
               stream_length: int | None = None,
               identity: dict[str, Any] | None = None) -> int:
    """Load a :func:`save_state` checkpoint into ``strategy`` (``weights_only=True``).

    A model whose Avalanche heads grew during the saved run (``IncrementalClassifier``,
    ``MultiHeadClassifier``, e.g. in ``MTSimpleMLP``) is grown to the saved shapes before
    the configuration is compared. The model must be what the file's was: the same class,
    options, submodules (a ``Dropout``'s ``p``) and shapes; a file saved before the model's
    class and submodules were recorded is compared on its shapes alone. Every size in the
    file is checked before anything is allocated: its tensors hold the bytes their shapes
    take (:func:`read_state`) and each buffer's saved number of slots is this strategy's.
    A refused file, whenever it is refused, leaves the strategy as it was: its model,
    optimizer, plugins, buffers, criterion, clock and the global generators.

    :param strategy: a freshly built strategy, configured as the one that was saved.
    :param path: the checkpoint file.
    :param stream_length: the stream's length, if known (compared with the file's).
    :param identity: compared with the file's (see :func:`strategy_config`).
    :return: the number of experiences the saved strategy had learnt.
    :raises FileNotFoundError: no such file.
    :raises CheckpointError: damaged or altered, of another format, made by another
        configuration or another model (the message names the file and the first
        difference), or holding a state that does not fit this strategy (the message
        names the file and the reason); always one line of bounded length.
    """
    state = read_state(path)
    saved = state["config"]
    # Heads that grew during the run (Avalanche's IncrementalClassifier and
    # MultiHeadClassifier) are part of the state: grow them before comparing shapes.
    try:
        shrink = grow_model(strategy.model, state["model"])
    except Exception as err:  # grow_model left the model as it was
        raise CheckpointError(f"{path}: its model state does not fit this model "
                              f"({short_error(err)})") from err
    fresh = strategy_config(strategy, stream_length=stream_length, identity=identity)
    if "stream_length" not in saved or stream_length is None:
        saved.pop("stream_length", None)
        fresh.pop("stream_length", None)
    for key in MODEL_RECORD:  # a file saved before the model's record: its shapes alone
        if key not in saved:
            fresh.pop(key, None)
    try:
        difference = first_difference(saved, fresh)
    except Exception as err:  # a configuration that cannot even be compared
        difference = f"unreadable configuration ({short_error(err)})"
    if difference is not None:
        shrink()  # a refused file leaves the strategy as it was
        raise CheckpointError(f"{path} was made by another configuration: {difference}")
    for policy, policy_state in buffer_states(strategy, state):
        # the saved number of slots, checked against the configuration before any is made
        slots = policy_state.get("max_size") if isinstance(policy_state, dict) else None
        if type(slots) is not int or slots != policy.max_size:
            shrink()
            raise CheckpointError(f"{path}: its {type(policy).__name__} state has max_size "
                                  f"{short(slots)}, its configuration {policy.max_size}")
    try:
        load_strategy_state_dict(strategy, state)  # undoes what it did if it raises
    except Exception as err:
        shrink()
        raise CheckpointError(f"{path} does not fit this strategy ({short_error(err)}); "
                              "the strategy is unchanged") from err
    return int(state["experiences"])

