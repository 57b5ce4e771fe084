"""The buffer's storage: one tensor column per field, ``max_size`` slots each.

``x``, ``y``, ``t`` and ``scores`` live on the samples' device; ``src``, ``src_idx`` and
``plain`` (the provenance, :mod:`~avalanche_gss.buffers.sources`) on the CPU. Slots
``0 .. size-1`` hold the samples: the buffer is filled contiguously from slot 0.

Sizes are checked before anything is allocated: a size must be an integer >= 1
(:func:`check_size`), and the columns of ``M`` slots must fit in the memory available
(:func:`available_bytes`), else a one-line ``MemoryError`` says how many bytes they need.
Allocations are all made before any column is replaced, so a resize that fails changes
nothing.
"""

from __future__ import annotations

import math
import operator
import os
from typing import Any

import torch
from torch import Tensor
from typing_extensions import Self  # typing.Self is Python 3.11+

from avalanche_gss.buffers.rows import Rows
from avalanche_gss.buffers.sources import SourcesMixin

__all__ = ["ColumnsMixin", "ReadsMixin", "available_bytes", "check_size"]

_DEVICE_COLUMNS = ("x", "y", "t", "scores")
_CPU_COLUMNS = (("src", -1), ("src_idx", 0), ("plain", True))
_DEVICE_SLOT_BYTES = 8 + 8 + 4  # y, t (int64), scores (float32), beside the inputs x
_CPU_SLOT_BYTES = 8 + 8 + 1 + 8  # src, src_idx, plain and the dataset view's position


def check_size(value: Any, what: str = "buffer size") -> int:
    """``value`` as an ``int`` >= 1: an ``int`` or an integral number (a NumPy integer).

    :param value: the size given.
    :param what: its name, for the error.
    :raises ValueError: a float (even ``3.0``), a string, a bool, ``None``, or a value < 1.
    """
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer >= 1, got {value!r} "
                         f"({type(value).__name__})") from None
    if n < 1:
        raise ValueError(f"{what} must be >= 1, got {n}")
    return n


def _read_int(path: str, key: str | None = None) -> int | None:
    """An integer from a file of ``/proc`` or ``/sys`` (the value after ``key:``), if any."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if key is None:
        value = text.split()[0] if text.split() else ""
    else:
        line = next((ln for ln in text.splitlines() if ln.startswith(key + ":")), "")
        value = line.split()[1] if len(line.split()) > 1 else ""
    return int(value) if value.isdigit() else None


def available_bytes(device: torch.device | str) -> int | None:
    """Bytes that new storage on ``device`` can take; ``None``: unknown (nothing is checked).

    CUDA: the device's free memory plus what PyTorch's cache holds unused. CPU: the
    system's available memory (``MemAvailable``, else the physical memory), lowered to
    what the process's address-space limit (``RLIMIT_AS``) and its cgroup's memory limit
    leave, where those are set.

    :param device: where the storage would live.
    """
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type != "cpu":
        return None
    limits: list[int] = []
    meminfo = _read_int("/proc/meminfo", "MemAvailable")
    if meminfo is not None:
        limits.append(meminfo * 1024)
    elif hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        pages = _read_int("/proc/self/statm")
        if soft != resource.RLIM_INFINITY and pages is not None:
            limits.append(max(0, soft - pages * resource.getpagesize()))
    except ImportError:  # not on this platform
        pass
    cap, used = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if cap is not None and used is not None:
        limits.append(max(0, cap - used))
    return min(limits) if limits else None


class ColumnsMixin(SourcesMixin):
    """Slot storage, its invariants, random reads, resizing and state of a buffer."""

    generator: torch.Generator
    n_seen: int
    n_rejected: int

    def _init_columns(self, m: int) -> None:
        self._check_storage(m, None)
        self.max_size: int = m
        self.x: Tensor | None = None  # (M, *input_shape) once the first batch arrived
        self.y: Tensor | None = None  # (M,) class labels
        self.t: Tensor | None = None  # (M,) task labels
        self.scores: Tensor | None = None  # (M,) float, for policies that score samples
        self.size = 0
        self._init_sources(m)

    def _check_storage(self, m: int, x: Tensor | None) -> None:
        """Refuse ``m`` slots whose columns would not fit in the memory available.

        :param m: the number of slots.
        :param x: inputs like those stored (``None``: none yet, their column is not counted).
        :raises MemoryError: one line with the bytes needed and those available.
        """
        dev = torch.device("cpu") if x is None else x.device
        row = 0 if x is None else math.prod(x.shape[1:]) * x.element_size()
        need = {torch.device("cpu"): m * _CPU_SLOT_BYTES}
        need[dev] = need.get(dev, 0) + m * (row + _DEVICE_SLOT_BYTES)
        for device, n in need.items():
            free = available_bytes(device)
            if free is not None and n > free:
                raise MemoryError(
                    f"{type(self).__name__}: buffer size {m} needs {n:,} bytes of {device} "
                    f"memory ({n // m:,} per slot) but {free:,} are available; the buffer "
                    "is unchanged")

    def _new_columns(self, m: int, like: dict[str, Tensor]) -> dict[str, Tensor]:
        """Allocate ``m`` slots of every column, shaped as ``like``'s (nothing is replaced).

        :param like: a tensor of each device column to allocate, with its dtype and device.
        :raises MemoryError: an allocation failed (one line; the buffer is unchanged).
        """
        try:
            new = {name: torch.zeros((m, *v.shape[1:]), dtype=v.dtype, device=v.device)
                   for name, v in like.items()}
            for name, fill in _CPU_COLUMNS:
                new[name] = torch.full((m,), fill, dtype=getattr(self, name).dtype)
        except (RuntimeError, MemoryError) as err:  # torch's out-of-memory errors
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise MemoryError(f"{type(self).__name__}: could not allocate {m} slots ({reason}); "
                              "the buffer is unchanged") from err
        return new

    def _allocate(self, like: Rows) -> None:
        self._check_storage(self.max_size, like.x)
        dev = like.x.device
        columns = self._new_columns(self.max_size, {
            "x": like.x, "y": torch.empty(0, dtype=torch.long, device=dev),
            "t": torch.empty(0, dtype=torch.long, device=dev),
            "scores": torch.empty(0, dtype=torch.float32, device=dev)})
        for name in _DEVICE_COLUMNS:
            setattr(self, name, columns[name])

    def _store(self, rows: Rows, slots: Tensor, scores: Tensor | None) -> None:
        """Write ``rows`` into ``slots`` (``-1``: not stored), checking the policy's answer.

        :raises RuntimeError: two samples share a slot, a slot is beyond ``max_size``, or
            the filled range would have a hole.
        """
        keep = (slots >= 0).nonzero().flatten()
        target = slots[keep]
        if len(target) != len(torch.unique(target)):
            raise RuntimeError("a policy assigned two samples to one slot")
        new_size = max(self.size, int(target.max()) + 1) if len(target) else self.size
        if new_size > self.max_size:
            raise RuntimeError("a policy assigned a slot beyond max_size")
        appended = target[target >= self.size]
        if len(appended) != new_size - self.size:
            raise RuntimeError("a policy left a hole in the buffer")
        self._write(rows.take(keep) if len(keep) < len(rows) else rows, target,
                    None if scores is None else scores[keep.to(scores.device, non_blocking=True)])
        self.size = new_size

    def _write(self, rows: Rows, target: Tensor, scores: Tensor | None) -> None:
        """Write every row of ``rows`` into the CPU slot indices ``target`` (no check)."""
        if self.x is None:
            self._allocate(rows)
        assert self.x is not None and self.y is not None and self.t is not None
        dev = self.x.device
        idx = target.to(dev, non_blocking=True)  # a host index: no stream sync on CUDA
        x, y, t = rows.x.to(dev), rows.y.to(dev, torch.long), rows.t.to(dev, torch.long)
        if scores is not None:
            # non_blocking only from the host: a device-to-host copy must be waited for
            scores = scores.to(dev, torch.float32, non_blocking=scores.device.type == "cpu")
        self.x[idx] = x  # every copy is made: the writes cannot fail half-way
        self.y[idx] = y
        self.t[idx] = t
        if scores is not None and self.scores is not None:
            self.scores[idx] = scores
        self.src[target] = rows.src
        self.src_idx[target] = rows.idx
        self.plain[target] = rows.plain
        if len(target):
            self._data.stored(rows.src, rows.idx, target, self.max_size)

    def _move(self, dest: Tensor, source: Tensor) -> None:
        """Copy the samples of slots ``source`` into slots ``dest`` (CPU indices)."""
        for name in _DEVICE_COLUMNS:
            column = getattr(self, name)
            if column is not None:
                column[dest.to(column.device)] = column[source.to(column.device)]
        for name, _ in _CPU_COLUMNS:
            column = getattr(self, name)
            column[dest] = column[source]
        self._data.reset(self.max_size)

    def _kept_on_shrink(self, new_size: int) -> Tensor:
        """The slots :meth:`resize` keeps when ``new_size < size``, in increasing order.

        A uniform random subset; a policy with its own notion of which samples to give up
        first overrides this.
        """
        return torch.randperm(self.size, generator=self.generator)[:new_size].sort().values

    def resize(self, strategy: Any, new_size: int) -> None:
        """Change ``max_size``, mid-run if need be.

        Shrinking keeps a uniform random subset of the samples (:meth:`_kept_on_shrink`);
        growing keeps every sample, and the next incoming samples fill the free slots before
        the policy decides again. The new columns are all allocated before any is replaced:
        a resize that raises changes nothing.

        :param strategy: the strategy (unused; Avalanche's signature).
        :param new_size: the new ``max_size``, an integer >= 1.
        :raises ValueError: ``new_size`` is not an integer >= 1.
        :raises MemoryError: the columns of ``new_size`` slots do not fit in the memory
            available (:func:`available_bytes`) or could not be allocated.
        """
        new_size = check_size(new_size)
        self._check_storage(new_size, self.x)
        columns = self._new_columns(new_size, {name: getattr(self, name) for name in
                                               _DEVICE_COLUMNS if getattr(self, name) is not None})
        drawn = self.generator.get_state()
        try:
            keep = torch.arange(self.size)
            if self.size > new_size:
                keep = self._kept_on_shrink(new_size)
            for name, new in columns.items():
                old = getattr(self, name)
                new[: len(keep)] = old[keep.to(old.device)]
            self._data.reset(new_size)
        except BaseException:
            self.generator.set_state(drawn)
            self._data.reset(self.max_size)
            raise
        for name, new in columns.items():
            setattr(self, name, new)
        self.size = len(keep)
        self.max_size = new_size


class ReadsMixin(ColumnsMixin):
    """Random reads of the stored samples, and the buffer's state for resuming."""

    def __len__(self) -> int:
        return self.size

    def sample_slots(self, k: int, generator: torch.Generator | None = None) -> Tensor:
        """Draw ``min(k, len(self))`` distinct slots uniformly at random (CPU int64).

        :param k: how many.
        :param generator: source of randomness; the buffer's own by default.
        """
        if self.size == 0:
            raise ValueError("the buffer is empty")
        return torch.randperm(self.size, generator=generator or self.generator)[:k]

    def sample(self, k: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``min(k, len(self))`` distinct stored samples uniformly at random.

        :param k: how many samples.
        :param generator: source of randomness; the buffer's own by default.
        :return: ``(x, y)`` on the buffer's device (task labels: :meth:`rows`).
        """
        x, y, _ = self.rows(self.sample_slots(k, generator))
        return x, y

    def rows(self, slots: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The stored ``(x, y, t)`` tensors of ``slots``, on the buffer's device.

        :param slots: ``(K,)`` slot indices below ``len(self)``.
        """
        if self.x is None or self.y is None or self.t is None:
            raise ValueError("the buffer is empty")
        idx = slots.to(self.x.device, non_blocking=True)  # no stream sync on CUDA
        # index_select: the rows x[idx] gives, with less overhead per call
        return (self.x.index_select(0, idx), self.y.index_select(0, idx),
                self.t.index_select(0, idx))

    def stored_rows(self) -> Rows:
        """The stored samples, slot order, as :class:`~avalanche_gss.buffers.rows.Rows`."""
        x, y, t = self.rows(torch.arange(self.size))
        n = self.size
        return Rows(x, y, t, self.src[:n], self.src_idx[:n], self.plain[:n])

    def tensors(self) -> tuple[Tensor, Tensor]:
        """The stored ``(x, y)``, ``len(self)`` rows each (task labels: :attr:`task_labels`)."""
        if self.x is None or self.y is None:
            raise ValueError("the buffer is empty")
        return self.x[: self.size], self.y[: self.size]

    @property
    def task_labels(self) -> Tensor:
        """The stored samples' task labels, ``(len(self),)``."""
        if self.t is None:
            return torch.zeros(0, dtype=torch.long)
        return self.t[: self.size]

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: samples, scores, counters and the RNG state.

        Tensors and plain values only. The source datasets are not part of it: after
        :meth:`load_state_dict` the samples are served from the stored tensors.
        """
        state: dict[str, Any] = {"max_size": self.max_size, "size": self.size,
                                 "n_seen": self.n_seen}
        for name in _DEVICE_COLUMNS:
            value = getattr(self, name)
            state[name] = None if value is None else value.cpu()
        state["generator"] = self.generator.get_state()
        state["n_rejected"] = self.n_rejected
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (tensors stay on the CPU, see :meth:`to`)."""
        self.max_size = int(state["max_size"])
        self.size = int(state["size"])
        self.n_seen = int(state["n_seen"])
        self.n_rejected = int(state.get("n_rejected", 0))
        # copies: a state taken from a live buffer must not share its storage
        self.x, self.y, self.scores = (None if state[k] is None else state[k].clone()
                                       for k in ("x", "y", "scores"))
        t = state.get("t")
        t = None if t is None else t.clone()
        if t is None and self.y is not None:
            t = torch.zeros_like(self.y)
        self.t = t
        self._init_sources(self.max_size)
        self.generator.set_state(state["generator"])

    def to(self, device: torch.device | str) -> Self:
        """Move the stored tensors to ``device`` in place (e.g. after :meth:`load_state_dict`).

        :param device: where the samples live (normally the strategy's device).
        :return: the buffer.
        """
        for name in _DEVICE_COLUMNS:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.to(device))
        self._data.reset(self.max_size)
        return self
