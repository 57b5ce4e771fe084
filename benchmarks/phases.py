"""Per-phase wall time of an online run, for ``online_throughput.py --phases``.

Nothing here touches the library's code: :func:`instrument` wraps methods of one strategy
*instance* (and of its buffer and retrieval) so that their time goes to a phase; without
``--phases`` nothing is wrapped and the run pays nothing. Time is exclusive: a phase nested
in another (the replay draw inside the replay step, the gradient Gram inside the buffer
update) is taken out of the outer one.

On CUDA every phase edge calls ``torch.cuda.synchronize``, so that a phase is charged
with the kernels it queued; those syncs are extra host syncs the plain run does not make,
so a ``--phases`` run is slower than the plain one and its total is not the figure to
compare with the floor (the plain run's ``median_ms`` is).

Phases:

- ``train_steps``: forward, loss, backward and optimizer step of the incoming batch and of
  the replay batch, with Avalanche's per-iteration machinery (callbacks, moving the batch
  to the device);
- ``scoring``: the gradient Gram / per-sample gradients of the gradient-scored buffers
  (GSS-Greedy's whole ``_score``, with its draw of buffer samples to compare with);
- ``selection``: the buffer update without the scoring (the policy's decision, the writes);
- ``replay_draw``: choosing and gathering the replay batch;
- ``evaluation``: the test accuracy after the run (outside the run's total);
- ``other``: the rest of the run's time (Avalanche's per-experience work, ...).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

PHASES = ("train_steps", "scoring", "selection", "replay_draw", "evaluation", "other")


class PhaseTimer:
    """Exclusive wall time per phase (a stack of open phases).

    :param device: the run's device; on CUDA each phase edge synchronises it.
    :param names: the phases (others are added when first timed).
    """

    def __init__(self, device: str, names: tuple[str, ...] = PHASES) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(names, 0.0)
        self._stack: list[str] = []
        self._mark = 0.0
        self._cuda = device.startswith("cuda")
        self._device = device

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize(self._device)
        return time.perf_counter()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the time spent inside to ``name`` (minus nested phases)."""
        now = self._now()
        if self._stack:
            self.seconds[self._stack[-1]] += now - self._mark
        self.seconds.setdefault(name, 0.0)
        self._stack.append(name)
        self._mark = now
        try:
            yield
        finally:
            now = self._now()
            self.seconds[self._stack.pop()] += now - self._mark
            self._mark = now

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        """Replace ``owner.attr`` (a bound method) by one timed as phase ``name``."""
        original: Callable[..., Any] = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(owner, attr, timed)

    def close(self, total: float) -> dict[str, float]:
        """The phases' seconds, ``other`` being ``total`` minus the timed phases (but eval)."""
        timed = sum(v for k, v in self.seconds.items() if k not in ("other", "evaluation"))
        self.seconds["other"] = max(0.0, total - timed)
        return dict(self.seconds)


class NoTimer:
    """The timer of a plain run: every phase is a shared no-op context."""

    _null = nullcontext()

    def phase(self, name: str) -> Any:
        """A no-op context manager."""
        return self._null


def instrument(strategy: Any, timer: PhaseTimer) -> None:
    """Time a library strategy's phases (instance attributes only: nothing else changes).

    :param strategy: an :class:`~avalanche_gss.training.OnlineRehearsal` strategy.
    :param timer: where the time goes.
    """
    timer.wrap(strategy, "training_epoch", "train_steps")
    rehearsal = strategy.rehearsal
    timer.wrap(rehearsal.retrieval, "retrieve", "replay_draw")
    buffer = rehearsal.storage_policy
    timer.wrap(buffer, "post_adapt", "selection")
    for attr in ("_score", "_gram"):
        if hasattr(buffer, attr):
            timer.wrap(buffer, attr, "scoring")


def table(records: list[dict[str, Any]]) -> str:
    """The phases of the records that have them, one line per case and impl (ms)."""
    rows = [r for r in records if "phases_ms" in r]
    if not rows:
        return ""
    head = f"{'case':<31} {'impl':<8} " + " ".join(f"{p:>12}" for p in PHASES)
    lines = [head]
    for r in rows:
        cells = " ".join(f"{r['phases_ms'][p]:12.1f}" for p in PHASES)
        lines.append(f"{r['case']:<31} {r['impl']:<8} {cells}")
    return "\n".join(lines)
