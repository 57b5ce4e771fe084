"""The buffer's storage, :class:`SlotStore`: one tensor column per field, ``max_size`` slots each.

``x``, ``y``, ``t`` and ``scores`` live on the samples' device; ``src``, ``src_idx`` and
``plain`` (each sample's provenance, whose datasets :mod:`~avalanche_gss.buffers.sources`
keeps) on the CPU. Slots ``0 .. size-1`` hold the samples: the store is filled
contiguously from slot 0, and :meth:`SlotStore.check_slots` refuses a policy's answer
that would break that.

Sizes are checked before anything is allocated: a size must be an integer >= 1
(:func:`check_size`), and the columns of ``M`` slots must fit in the memory available
(:func:`available_bytes`), else a one-line ``MemoryError`` says how many bytes they need.
Allocations are all made before any column is replaced, so a resize that fails changes
nothing.
"""

from __future__ import annotations

import itertools
import math
import operator
import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
from torch import Tensor

from avalanche_gss.buffers.rows import Rows

__all__ = ["SlotStore", "available_bytes", "check_memory", "check_size", "new_columns"]

_DEVICE_COLUMNS = ("x", "y", "t", "scores")
_CPU_COLUMNS = (("src", -1), ("src_idx", 0), ("plain", True))
_VERSIONS = itertools.count()
"""Numbers of :attr:`SlotStore.version`: never one twice in a process, so that a value
cached with one cannot be taken for another state's."""
_T = TypeVar("_T")
_CACHES = ("_all_plain", "_label_list")  # what a store caches per version (never copied)
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


def check_memory(owner: str, m: int, x: Tensor | None) -> None:
    """Refuse ``m`` slots whose columns would not fit in the memory available.

    :param owner: the buffer's class name, for the error.
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
                f"{owner}: buffer size {m} needs {n:,} bytes of {device} "
                f"memory ({n // m:,} per slot) but {free:,} are available; the buffer "
                "is unchanged")


def new_columns(owner: str, m: int, like: dict[str, Tensor]) -> dict[str, Tensor]:
    """Allocate ``m`` slots of each column of ``like``: its dtype, device and row shape.

    Device columns start at 0, the provenance columns at their "no source" value.

    :param owner: the buffer's class name, for the error.
    :raises MemoryError: an allocation failed (one line; nothing is replaced).
    """
    try:
        new = {name: torch.zeros((m, *v.shape[1:]), dtype=v.dtype, device=v.device)
               for name, v in like.items() if name in _DEVICE_COLUMNS}
        for name, fill in _CPU_COLUMNS:
            if name in like:
                new[name] = torch.full((m,), fill, dtype=like[name].dtype)
    except (RuntimeError, MemoryError) as err:  # torch's out-of-memory errors
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise MemoryError(f"{owner}: could not allocate {m} slots ({reason}); "
                          "the buffer is unchanged") from err
    return new


class SlotStore:
    """A buffer's slot columns: ``max_size`` slots, the first ``size`` of them filled.

    The store checks what a policy asks of it (:meth:`check_slots`) and the memory its
    columns need, and writes, moves and reads slots; it decides nothing. Reads and writes
    take CPU slot indices.

    :param max_size: the number of slots ``M``, an integer >= 1 (see :func:`check_size`).
    :param owner: the buffer's class name, for errors.
    :raises MemoryError: the columns of ``M`` slots do not fit in the memory available.
    """

    def __init__(self, max_size: int, owner: str) -> None:
        self.owner = owner
        check_memory(owner, max_size, None)
        self.max_size = max_size
        self.size = 0
        self.version = next(_VERSIONS)  # a new number at every change of the columns
        self.x: Tensor | None = None  # (M, *input_shape) once the first batch arrived
        self.y: Tensor | None = None  # (M,) class labels
        self.t: Tensor | None = None  # (M,) task labels
        self.scores: Tensor | None = None  # (M,) float, for policies that score samples
        self.src = torch.full((max_size,), -1, dtype=torch.long)  # (M,) source ids
        self.src_idx = torch.zeros(max_size, dtype=torch.long)  # (M,) index in source
        self.plain = torch.ones(max_size, dtype=torch.bool)  # (M,) no transform

    def allocate(self, m: int) -> dict[str, Tensor]:
        """Check and allocate ``m`` slots of every column in use (nothing is replaced).

        :raises MemoryError: they do not fit (:func:`check_memory`), or an allocation
            failed (one line; the store is unchanged).
        """
        check_memory(self.owner, m, self.x)
        like = {name: getattr(self, name) for name in _DEVICE_COLUMNS
                if getattr(self, name) is not None}
        return new_columns(self.owner, m, {**like, "src": self.src, "src_idx": self.src_idx,
                                           "plain": self.plain})

    def check_slots(self, slots: Tensor) -> tuple[Tensor, Tensor, int]:
        """Check a policy's slots (``-1``: not stored) against the store's invariants.

        :return: ``(keep, target, new_size)``: the positions stored, their slots and the
            size once they are written.
        :raises RuntimeError: two samples share a slot, a slot is beyond ``max_size``, or
            the filled range would have a hole.
        """
        values = slots.tolist()  # a batch's slots: checked on the host, one read
        kept = [i for i, slot in enumerate(values) if slot >= 0]
        targets = [values[i] for i in kept]
        if len(set(targets)) != len(targets):
            raise RuntimeError("a policy assigned two samples to one slot")
        new_size = max(self.size, max(targets) + 1) if targets else self.size
        if new_size > self.max_size:
            raise RuntimeError("a policy assigned a slot beyond max_size")
        appended = sum(1 for slot in targets if slot >= self.size)
        if appended != new_size - self.size:
            raise RuntimeError("a policy left a hole in the buffer")
        return (torch.tensor(kept, dtype=torch.long), torch.tensor(targets, dtype=torch.long),
                new_size)

    def write(self, rows: Rows, target: Tensor, scores: Tensor | None) -> None:
        """Write every row of ``rows`` into the CPU slot indices ``target`` (no check)."""
        if self.x is None:  # the first samples set the inputs' shape, dtype and device
            check_memory(self.owner, self.max_size, rows.x)
            dev = rows.x.device
            columns = new_columns(self.owner, self.max_size, {
                "x": rows.x, "y": torch.empty(0, dtype=torch.long, device=dev),
                "t": torch.empty(0, dtype=torch.long, device=dev),
                "scores": torch.empty(0, dtype=torch.float32, device=dev)})
            self.x, self.y, self.t, self.scores = (columns[k] for k in _DEVICE_COLUMNS)
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
        self.version = next(_VERSIONS)

    def move(self, dest: Tensor, source: Tensor) -> None:
        """Copy the samples of slots ``source`` into slots ``dest`` (CPU indices)."""
        for name in _DEVICE_COLUMNS:
            column = getattr(self, name)
            if column is not None:
                column[dest.to(column.device)] = column[source.to(column.device)]
        for name, _ in _CPU_COLUMNS:
            column = getattr(self, name)
            column[dest] = column[source]
        self.version = next(_VERSIONS)

    def copy_kept(self, columns: dict[str, Tensor], keep: Tensor) -> None:
        """Copy the slots ``keep`` into the head of :meth:`allocate`'s new ``columns``."""
        for name, new in columns.items():
            old = getattr(self, name)
            new[: len(keep)] = old[keep.to(old.device)]

    def replace(self, columns: dict[str, Tensor], size: int) -> None:
        """Make :meth:`allocate`'s ``columns``, filled up to ``size``, the store's columns."""
        for name, new in columns.items():
            setattr(self, name, new)
        self.size = size
        self.max_size = len(columns["src"])
        self.version = next(_VERSIONS)

    def rows(self, slots: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The stored ``(x, y, t)`` tensors of ``slots``, on the store's device.

        :param slots: ``(K,)`` slot indices below ``size``.
        :raises ValueError: nothing was stored yet.
        """
        if self.x is None or self.y is None or self.t is None:
            raise ValueError("the buffer is empty")
        idx = slots.to(self.x.device, non_blocking=True)  # no stream sync on CUDA
        # index_select: the rows x[idx] gives, with less overhead per call
        return (self.x.index_select(0, idx), self.y.index_select(0, idx),
                self.t.index_select(0, idx))

    def state_dict(self) -> dict[str, Tensor | None]:
        """The device columns, on the CPU (the provenance is not saved)."""
        return {name: None if getattr(self, name) is None else getattr(self, name).cpu()
                for name in _DEVICE_COLUMNS}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore sizes and columns from a buffer's state; the provenance is forgotten.

        The sizes are checked against the saved columns before anything is allocated or
        changed: every column has ``max_size`` slots, ``size`` is at most ``max_size``, and a
        state without columns holds no sample, in ``max_size`` slots that fit in memory.

        :param state: a :meth:`state_dict` of a buffer (its own sizes and columns).
        :raises ValueError: a size that is not an integer, or that disagrees with the
            columns (one line; the store is unchanged).
        :raises MemoryError: no columns, and ``max_size`` slots do not fit in the memory
            available (the store is unchanged).
        """
        m = check_size(state["max_size"], "saved max_size")
        size = state["size"]
        if type(size) is not int or not 0 <= size <= m:
            raise ValueError(f"{self.owner}: the saved size is not an integer from 0 to the "
                             f"saved max_size {m}")
        for name in _DEVICE_COLUMNS:
            column = state[name]
            if column is not None and (not isinstance(column, Tensor) or column.dim() < 1
                                       or len(column) != m):
                raise ValueError(f"{self.owner}: the saved column {name} does not have the "
                                 f"saved max_size of {m} slots")
        if state["x"] is None:
            if size:
                raise ValueError(f"{self.owner}: the saved state has size {size} and no "
                                 "samples")
            check_memory(self.owner, m, None)  # the provenance columns below
        self.max_size = m
        self.size = size
        # copies: a state taken from a live buffer must not share its storage
        self.x, self.y, self.t, self.scores = (None if state[k] is None else state[k].clone()
                                               for k in _DEVICE_COLUMNS)
        m = self.max_size
        self.src = torch.full((m,), -1, dtype=torch.long)
        self.src_idx = torch.zeros(m, dtype=torch.long)
        self.plain = torch.ones(m, dtype=torch.bool)
        self.version = next(_VERSIONS)

    def to(self, device: torch.device | str) -> None:
        """Move the device columns to ``device``."""
        for name in _DEVICE_COLUMNS:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.to(device))
        self.version = next(_VERSIONS)

    def snapshot(self) -> dict[str, Any]:
        """The store's attributes, for :meth:`restore` (columns are written in place last)."""
        return dict(self.__dict__)

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Go back to what :meth:`snapshot` saved (with a new :attr:`version`)."""
        self.__dict__.update(snapshot)
        self.version = next(_VERSIONS)  # nothing read before the rollback is reused

    def __getstate__(self) -> dict[str, Any]:
        """The attributes without what :meth:`all_plain` and :meth:`label_list` cached."""
        return {k: v for k, v in self.__dict__.items() if k not in _CACHES}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore :meth:`__getstate__`'s attributes, with a version new to this process."""
        self.__dict__.update(state)
        self.version = next(_VERSIONS)

    def all_plain(self) -> bool:
        """Whether every filled slot holds a sample read with no transform (cached per change)."""
        return self._per_change("_all_plain", lambda: bool(self.plain[: self.size].all()))

    def label_list(self) -> list[int]:
        """The filled slots' class labels as host ints, read once per change of the store.

        On an accelerator each read waits for the device: for a store on the host.
        """
        return self._per_change(
            "_label_list", lambda: [] if self.y is None else self.y[: self.size].tolist())

    def _per_change(self, name: str, compute: Callable[[], _T]) -> _T:
        """``compute()``, kept until the columns or the size change.

        :param name: the attribute that keeps it, one of :data:`_CACHES`.
        :param compute: what to keep.
        """
        key = (self.size, self.version)
        cached = self.__dict__.get(name)
        if cached is None or cached[0] != key:
            cached = (key, compute())
            self.__dict__[name] = cached
        return cast(_T, cached[1])
