"""The invariants every buffer policy keeps, as one check for policies of one's own.

:func:`check_policy` runs a policy through the suite this package's policies pass: the
storage invariants after every batch (``slots``), a refused batch that changes nothing
(``refused batch``), growth of a full buffer and shrinking with batches after each
(``resize``), a checkpoint round trip that goes on as the original (``checkpoint``) and
Avalanche's storage-policy interface (``avalanche``). A failure raises ``AssertionError``
naming the invariant, so that it reads as a test failure in any test runner::

    from avalanche_gss.testing import check_policy

    def test_my_policy():
        check_policy(lambda max_size: StrideBuffer(max_size, every=3))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import OnlineBuffer

__all__ = ["INVARIANTS", "check_policy"]

INVARIANTS = ("slots", "refused batch", "resize", "checkpoint", "avalanche")
"""The invariants :func:`check_policy` checks, in order, as its failures name them."""


@contextlib.contextmanager
def _invariant(name: str) -> Iterator[None]:
    """Any failure inside becomes an ``AssertionError`` that names the invariant."""
    try:
        yield
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


def _feed(buffer: OnlineBuffer, stream: _Stream, model: nn.Module, batches: int) -> None:
    for _ in range(batches):
        _check_storage(buffer, stream, buffer.add(*stream.batch(), model))


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


def _bad_batches(stream: _Stream) -> dict[str, tuple[Tensor, Tensor]]:
    x = torch.randn(10, stream.features, generator=stream.generator)
    y = torch.randint(0, stream.classes, (10,), generator=stream.generator)
    return {"inputs of another shape": (x[:, :-1], y),
            "a negative label": (x, torch.where(torch.arange(10) == 3, -1, y)),
            "float labels": (x, y.float()),
            "fewer labels than inputs": (x, y[:9])}


def check_policy(make_buffer: Callable[[int], OnlineBuffer], *, max_size: int = 8,
                 features: int = 12, classes: int = 4, model: nn.Module | None = None,
                 seed: int = 0) -> None:
    """Check that a buffer policy keeps the invariants of this package's policies.

    Each check runs on fresh buffers from ``make_buffer``, fed batches of 10 samples of
    ``features`` random features (the first one the sample's position in the stream, by
    which the checks find each stored sample) and labels below ``classes``:

    - ``slots``: after every batch, at most ``max_size`` samples, no two in one slot and
      none beyond it, each stored sample one of the stream's, once, with its own label;
      the buffer fills within 40 batches;
    - ``refused batch``: a batch it must refuse (inputs of another shape, a negative
      label, float labels, fewer labels than inputs) raises, and leaves its whole
      ``state_dict`` as it was;
    - ``resize``: a full buffer grown to twice its size, then shrunk to half, then grown
      again, keeps the storage invariants over the batches after each (it may hold fewer
      samples than slots: an online clustering does);
    - ``checkpoint``: a fresh buffer loaded from its ``state_dict`` takes the same slots
      for the same batches and then holds the same samples;
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
    :raises AssertionError: naming the invariant that failed (one of :data:`INVARIANTS`)
        and what broke it.
    :raises ValueError: ``max_size`` or ``features`` below 2.
    """
    if max_size < 2 or features < 2:
        raise ValueError(f"max_size and features must be at least 2, got {max_size} and "
                         f"{features}")
    if model is None:
        generator = torch.Generator().manual_seed(seed)  # not the global generator
        model = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, classes))
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    stream = _Stream(features, classes, seed)

    def full() -> OnlineBuffer:
        buffer = make_buffer(max_size)
        for _ in range(40):
            _feed(buffer, stream, model, 1)
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
        copy = make_buffer(max_size)
        copy.load_state_dict(buffer.state_dict())
        for _ in range(3):
            x, y = stream.batch()
            assert torch.equal(buffer.add(x, y, model), copy.add(x, y, model)), (
                "the loaded buffer took other slots than the original")
        assert torch.equal(buffer.tensors()[0], copy.tensors()[0]), (
            "the loaded buffer holds other samples than the original")
    with _invariant("avalanche"):
        from avalanche.training.storage_policy import ExemplarsBuffer

        assert isinstance(buffer, ExemplarsBuffer), "not an Avalanche ExemplarsBuffer"
        data = buffer.buffer
        assert len(data) == len(buffer), "its buffer dataset is not the stored samples"
        x, y = buffer.tensors()
        for i in range(len(buffer)):
            assert torch.equal(data[i][0], x[i]) and int(data[i][1]) == int(y[i]), (
                f"its buffer dataset's sample {i} is not the stored one")
