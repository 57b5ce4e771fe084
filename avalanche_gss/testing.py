"""The invariants every buffer policy keeps, as one check for policies of one's own.

:func:`check_policy` runs a policy through the suite this package's policies pass: the
storage invariants after every batch, while the buffer fills and once it is full
(``slots``), the caller's inputs and the learner left as they were by every decision
(``untouched``), a refused batch that changes nothing (``refused batch``), growth of a
full buffer and shrinking with batches after each (``resize``), a ``state_dict`` round trip
that goes on as the original (``checkpoint``), a checkpoint file written by
:func:`~avalanche_gss.checkpoint.save_state` that
:func:`~avalanche_gss.checkpoint.load_state` reads back (``checkpoint file``) and
Avalanche's storage-policy interface (``avalanche``). A failure raises ``AssertionError``
naming the invariant, so that it reads as a test failure in any test runner::

    from avalanche_gss.testing import check_policy

    def test_my_policy():
        check_policy(lambda max_size: StrideBuffer(max_size, every=3))
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.buffers.rows import model_device
from avalanche_gss.checkpoint import (
    CheckpointError,
    load_state,
    rng_state,
    save_state,
    set_rng_state,
)
from avalanche_gss.training import OnlineRehearsal

__all__ = ["INVARIANTS", "check_policy"]

INVARIANTS = ("slots", "untouched", "refused batch", "resize", "checkpoint",
              "checkpoint file", "avalanche")
"""The invariants :func:`check_policy` checks, in order, as its failures name them
(``untouched`` is checked at every batch offered, from the first)."""


class _Broken(AssertionError):
    """A failure of the invariant ``invariant`` found while another one is checked."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(message)
        self.invariant = invariant


@contextlib.contextmanager
def _invariant(name: str) -> Iterator[None]:
    """Any failure inside becomes an ``AssertionError`` that names the invariant."""
    try:
        yield
    except _Broken as err:
        raise AssertionError(f"{err.invariant}: {err}") from err
    except AssertionError as err:
        raise AssertionError(f"{name}: {err}") from err
    except Exception as err:
        raise AssertionError(f"{name}: {type(err).__name__}: {err}") from err


class _Stream:
    """Batches whose first feature is each sample's position in the stream."""

    def __init__(self, features: int, classes: int, seed: int) -> None:
        self.features, self.classes = features, classes
        self.labels: list[int] = []
        self.generator = torch.Generator().manual_seed(seed)

    def batch(self, n: int = 10) -> tuple[Tensor, Tensor]:
        start = len(self.labels)
        x = torch.randn(n, self.features, generator=self.generator)
        x[:, 0] = torch.arange(start, start + n, dtype=torch.float32)
        y = torch.randint(0, self.classes, (n,), generator=self.generator)
        self.labels += y.tolist()
        return x, y


def _check_storage(buffer: OnlineBuffer, stream: _Stream, slots: Tensor) -> None:
    """The storage invariants after a batch that took ``slots``."""
    assert 0 <= len(buffer) <= buffer.max_size, (
        f"{len(buffer)} samples stored in {buffer.max_size} slots")
    kept = slots[slots >= 0]
    assert len(kept) == len(torch.unique(kept)), "two samples of a batch took one slot"
    assert bool((kept < buffer.max_size).all()), "a sample took a slot beyond max_size"
    if len(buffer) == 0:
        return
    x, y = buffer.tensors()
    assert len(x) == len(y) == len(buffer), "the stored tensors are not the buffer's size"
    ids = x[:, 0].long().tolist()
    assert len(set(ids)) == len(ids), "a sample is stored twice"
    assert all(0 <= i < len(stream.labels) for i in ids), "a slot holds no stream sample"
    assert y.tolist() == [stream.labels[i] for i in ids], "a sample holds another's label"


def _learner(model: nn.Module) -> tuple[dict[str, Tensor], list[bool]]:
    """Copies of the model's parameters and buffers, and its modules' training flags."""
    return ({k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()},
            [m.training for m in model.modules()])


def _add(buffer: OnlineBuffer, x: Tensor, y: Tensor, model: nn.Module) -> Tensor:
    """``buffer.add(x, y, model)``, checked to leave its arguments as they were.

    The caller's ``x`` and ``y``, the learner's parameters, buffers and modes: a policy
    reads them, never changes them. The answer must be one slot per sample.
    """
    inputs = (x.clone(), y.clone())
    weights, modes = _learner(model)
    slots = buffer.add(x, y, model)
    for name, before, after in (("inputs", inputs[0], x), ("labels", inputs[1], y)):
        if _difference(before, after) is not None:
            raise _Broken("untouched", f"the policy changed the caller's {name} in place")
    now, now_modes = _learner(model)
    if now.keys() != weights.keys():
        raise _Broken("untouched", "the policy changed the learner's tensors (their names)")
    changed = next((k for k in weights if _difference(weights[k], now[k]) is not None), None)
    if changed is not None:
        raise _Broken("untouched", f"the policy changed the learner's {changed} in place")
    if now_modes != modes:
        raise _Broken("untouched", "the policy left a module of the learner in another "
                                   "train/eval mode")
    assert tuple(slots.shape) == (len(y),), (
        f"the buffer answered slots of shape {tuple(slots.shape)} for {len(y)} samples")
    return slots


def _feed(buffer: OnlineBuffer, stream: _Stream, model: nn.Module, batches: int,
          size: int = 10) -> None:
    for _ in range(batches):
        x, y = stream.batch(size)
        _check_storage(buffer, stream, _add(buffer, x, y, model))


def _copy(value: Any) -> Any:
    """A deep copy of a state: tensors cloned, containers copied."""
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    return value


def _difference(before: Any, after: Any, path: str = "state_dict") -> str | None:
    """Where two states first differ (tensors exactly, NaN equal to NaN), or ``None``."""
    if type(before) is not type(after):
        return f"{path}: {type(before).__name__} became {type(after).__name__}"
    if isinstance(before, Tensor):
        same = (before.dtype == after.dtype and before.shape == after.shape
                and torch.equal(before.nan_to_num(0.5), after.nan_to_num(0.5))
                and (not before.is_floating_point()
                     or torch.equal(torch.isnan(before), torch.isnan(after))))
        return None if same else f"{path} changed"
    if isinstance(before, dict):
        if before.keys() != after.keys():
            return f"{path}: its keys changed"
        return next((d for k in before if (d := _difference(before[k], after[k],
                                                             f"{path}.{k}"))), None)
    if isinstance(before, (list, tuple)):
        if len(before) != len(after):
            return f"{path}: its length changed"
        return next((d for i, (a, b) in enumerate(zip(before, after, strict=True))
                     if (d := _difference(a, b, f"{path}[{i}]"))), None)
    return None if before == after else f"{path}: {before!r} became {after!r}"


def _same_course(original: OnlineBuffer, loaded: OnlineBuffer, stream: _Stream,
                 model: nn.Module) -> None:
    """Assert that ``loaded`` takes the slots ``original`` takes, then holds its samples."""
    for _ in range(3):
        x, y = stream.batch()
        assert torch.equal(_add(original, x, y, model), _add(loaded, x, y, model)), (
            "the loaded buffer took other slots than the original")
    assert torch.equal(original.tensors()[0], loaded.tensors()[0]), (
        "the loaded buffer holds other samples than the original")


def _strategy(buffer: OnlineBuffer, model: nn.Module) -> OnlineRehearsal:
    """A rehearsal strategy holding ``buffer``, on a copy of ``model`` (left untouched)."""
    learner = copy.deepcopy(model)
    device = model_device(learner) or "cpu"
    return OnlineRehearsal(storage_policy=buffer, model=learner, device=device,
                           optimizer=torch.optim.SGD(learner.parameters(), lr=0.1))


def _unreadable(state: dict[str, Any]) -> str | None:
    """The first entry of a buffer's ``state_dict`` that a ``weights_only`` load refuses."""
    for key, value in state.items():
        data = io.BytesIO()
        torch.save(value, data)
        data.seek(0)
        try:
            torch.load(data, weights_only=True)
        except Exception:  # what torch refuses to read back: name the entry
            return f"state_dict.{key} is a {type(value).__name__}, which it cannot read back"
    return None


@contextlib.contextmanager
def _checkpoint(folder: str | os.PathLike[str] | None) -> Iterator[Path]:
    """A checkpoint path in ``folder`` (or in a temporary folder), removed at the end."""
    with contextlib.ExitStack() as stack:
        where = folder if folder is not None else stack.enter_context(
            tempfile.TemporaryDirectory())
        path = Path(where) / "check_policy.ckpt"
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def _global_generators() -> Iterator[None]:
    """The global generators (torch, NumPy, Python) as they were when it ends.

    :func:`~avalanche_gss.checkpoint.load_state` sets them to the saved ones.
    """
    before = rng_state()
    try:
        yield
    finally:
        set_rng_state(before)


def _bad_batches(stream: _Stream) -> dict[str, tuple[Tensor, Tensor]]:
    x = torch.randn(10, stream.features, generator=stream.generator)
    y = torch.randint(0, stream.classes, (10,), generator=stream.generator)
    return {"inputs of another shape": (x[:, :-1], y),
            "a negative label": (x, torch.where(torch.arange(10) == 3, -1, y)),
            "float labels": (x, y.float()),
            "fewer labels than inputs": (x, y[:9])}


def check_policy(make_buffer: Callable[[int], OnlineBuffer], *, max_size: int = 8,
                 features: int = 12, classes: int = 4, model: nn.Module | None = None,
                 seed: int = 0, folder: str | os.PathLike[str] | None = None) -> None:
    """Check that a buffer policy keeps the invariants of this package's policies.

    Each check runs on fresh buffers from ``make_buffer``, fed batches of 10 samples of
    ``features`` random features (the first one the sample's position in the stream, by
    which the checks find each stored sample) and labels below ``classes``:

    - ``slots``: after every batch, one slot answered per sample, at most ``max_size``
      samples, no two in one slot and none beyond it, each stored sample one of the
      stream's, once, with its own label; the buffer fills within 40 batches, from
      batches of 1, 2 and 3 samples (the filling of a buffer that holds some samples
      already), then of 10 (one that overflows it);
    - ``untouched``: no batch offered, in any check, changes the caller's inputs or
      labels, the learner's parameters or buffers, or its modules' train/eval modes;
    - ``refused batch``: a batch it must refuse (inputs of another shape, a negative
      label, float labels, fewer labels than inputs) raises, and leaves its whole
      ``state_dict`` as it was;
    - ``resize``: a full buffer grown to twice its size, then shrunk to half, then grown
      again, keeps the storage invariants over the batches after each (it may hold fewer
      samples than slots: an online clustering does);
    - ``checkpoint``: a fresh buffer loaded from its ``state_dict`` takes the same slots
      for the same batches and then holds the same samples;
    - ``checkpoint file``: a full buffer, in an
      :class:`~avalanche_gss.training.OnlineRehearsal` strategy, saved to a file by
      :func:`~avalanche_gss.checkpoint.save_state`, is read back by
      :func:`~avalanche_gss.checkpoint.load_state` into a fresh one (its state must be
      made of what a ``weights_only`` load reads: tensors, numbers, strings, lists,
      tuples, dicts), which then takes the same slots as the original; the global
      generators are left as they were;
    - ``avalanche``: it is an Avalanche ``ExemplarsBuffer`` whose ``buffer`` dataset
      holds the stored samples, with Avalanche's ``resize(strategy, new_size)``.

    :param make_buffer: returns a fresh buffer of the given ``max_size``, always built the
        same way (same options and seed).
    :param max_size: the buffer size the checks start from (at least 2).
    :param features: input features of the generated samples (at least 2).
    :param classes: classes of the generated labels.
    :param model: the model passed to ``add`` (for policies that score by gradients); by
        default a small seeded MLP from ``features`` to ``classes``.
    :param seed: seed of the generated stream and the default model.
    :param folder: where the ``checkpoint file`` check writes its file (a temporary
        folder, removed afterwards, by default).
    :raises AssertionError: naming the invariant that failed (one of :data:`INVARIANTS`)
        and what broke it.
    :raises ValueError: ``max_size`` or ``features`` below 2.
    """
    if max_size < 2 or features < 2:
        raise ValueError(f"max_size and features must be at least 2, got {max_size} and "
                         f"{features}")
    if model is None:
        generator = torch.Generator().manual_seed(seed)  # not the global generator
        with torch.random.fork_rng(devices=[]):  # nor the layers' default initialisation
            model = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, classes))
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    stream = _Stream(features, classes, seed)

    def full() -> OnlineBuffer:
        buffer = make_buffer(max_size)
        for size in [1, 2, 3, *[10] * 37]:  # filling a buffer that holds a few samples
            _feed(buffer, stream, model, 1, size)
            if len(buffer) == max_size:
                break
        assert len(buffer) == max_size, f"the buffer held {len(buffer)} of {max_size} " \
                                        "samples after 40 batches"
        _feed(buffer, stream, model, 3)
        return buffer

    with _invariant("slots"):
        buffer = full()
    with _invariant("refused batch"):
        for what, (x, y) in _bad_batches(stream).items():
            before = _copy(buffer.state_dict())
            try:
                buffer.add(x, y, model)
            except Exception:  # refused, as it must be: its state is checked below
                pass
            else:
                raise AssertionError(f"a batch of {what} was accepted")
            changed = _difference(before, buffer.state_dict())
            assert changed is None, f"a batch of {what} was refused but changed {changed}"
    with _invariant("resize"):
        for size in (2 * max_size, max(1, max_size // 2), 2 * max_size):
            before = len(buffer)
            buffer.resize(None, size)
            assert buffer.max_size == size, f"resize to {size} left max_size {buffer.max_size}"
            assert len(buffer) == min(before, size), (
                f"resize from {before} samples to {size} slots left {len(buffer)}")
            _feed(buffer, stream, model, 4)
    with _invariant("checkpoint"):
        loaded = make_buffer(max_size)
        loaded.load_state_dict(buffer.state_dict())
        _same_course(buffer, loaded, stream, model)
    with _invariant("checkpoint file"), _global_generators(), _checkpoint(folder) as path:
        original = full()
        save_state(_strategy(original, model), path, experiences=0)
        loaded = make_buffer(max_size)
        try:
            load_state(_strategy(loaded, model), path)
        except CheckpointError as err:
            culprit = _unreadable(original.state_dict())
            raise AssertionError(f"load_state refused the file save_state wrote"
                                 f"{f' ({culprit})' if culprit else ''}: {err}") from err
        _same_course(original, loaded, stream, model)
    with _invariant("avalanche"):
        from avalanche.training.storage_policy import ExemplarsBuffer

        assert isinstance(buffer, ExemplarsBuffer), "not an Avalanche ExemplarsBuffer"
        data = buffer.buffer
        assert len(data) == len(buffer), "its buffer dataset is not the stored samples"
        x, y = buffer.tensors()
        for i in range(len(buffer)):
            assert torch.equal(data[i][0], x[i]) and int(data[i][1]) == int(y[i]), (
                f"its buffer dataset's sample {i} is not the stored one")
