"""Compute-matched evaluation: what a policy's training costs, and which batches it can afford.

Ghunaim, Bibi, Alhamoud, Alfarra, Hammoud, Prabhu, Torr and Ghanem, "Real-Time Evaluation
in Online Continual Learning: A New Hope", CVPR 2023 (arXiv:2302.01047; code:
github.com/Yasir-Ghunaim/RealtimeOCL) charge each method for its computation: the stream
reveals one batch per time step and does not wait for the learner. A method's
*stream-model relative complexity* ``C`` is its training cost per batch over the cost of
the cheapest baseline (ER: reservoir replay), which by definition keeps pace with the
stream (``C = 1``). The paper counts forward and backward passes (FLOPs, a backward costing
two forwards) and rounds ``C`` to a simple fraction.

**The rule** (the paper's Fig. 1 and its ``Delay`` strategy and ``OnlineDatasetWithReplay``,
``batch_delay = C - 1``): the learner trains on batch 0; while it trains on one batch,
``C`` time steps pass; as soon as it is free it takes the batch the stream reveals at that
moment, the most recent one, and never goes back to those it missed. With ``C = k`` an
integer it trains on batches ``0, k, 2k, ...`` (the code's ``i % k == 0``). A fractional
``C`` carries its remainder over: the ``j``-th trained batch is ``floor(j * C)``. The paper's
two fractional cases are exactly this: ``C = 4/3`` (LwF) trains on 3 of every 4 batches
(``i % 4 < 3``) and ``C = 5/2`` (MIR) on ``i % 5 in {0, 2}`` (delay 1, then 2). (The code's
generic branch truncates the delay, ``i % (int(C - 1) + 1)``, which would let a ``C = 2.7``
method train every second batch; ``floor(j * C)`` agrees with every case the paper ran.)
**A skipped batch is unseen by the buffer too**: the replay memory only ever holds samples
of batches trained on (``OnlineDatasetWithReplay`` draws replay from the trained indices
only; the GSS plugin updates its memory only on training iterations). The model is still
*evaluated* on every batch (online accuracy, with the model as it stood); that part of the
protocol is the caller's. A method cheaper than the baseline (``C <= 1``) trains on every
batch: the stream cannot reveal more.

**What counts as a pass** (:class:`PassCounter`): one sample through the model's top-level
``forward`` is one forward pass, however it is called (``model(x)``,
``torch.func.functional_call``, under ``vmap``, with or without gradients); one sample whose loss
gradient flows back through the model's output is one backward pass (``loss.backward()``,
``torch.autograd.grad``, ``torch.func.grad``). So the gradient engine's per-sample Gram
(:func:`~avalanche_gss.gradients.sample_gram`: one batched forward, one ``autograd.grad`` to
the layer outputs) costs ``N`` forward and ``N`` backward passes for ``N`` samples, its
``vmap`` route ``N`` more of each, and the per-sample loop ``N`` of each. A backward that
stops at the layer outputs (the engine's closed forms) counts as a whole one. Work outside
the network (cosine matrices, GSS-IQP's solver, GCR's matching pursuit, the buffer's
bookkeeping) is not counted, as in the paper.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Rational
from types import TracebackType

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

__all__ = ["PassCount", "PassCounter", "rehearsal_passes", "relative_cost", "as_fraction",
           "trained_batches", "kept_samples"]

BACKWARD_WEIGHT = 2
"""A backward pass's cost in forward passes: the paper's FLOPs convention (DeepSpeed's)."""


@dataclass(frozen=True)
class PassCount:
    """Per-sample forward and backward passes through a model.

    :param forward: samples through the model's ``forward``.
    :param backward: samples whose gradient flowed back through the model's output.
    """

    forward: int = 0
    backward: int = 0

    def __add__(self, other: PassCount) -> PassCount:
        return PassCount(self.forward + other.forward, self.backward + other.backward)

    def cost(self, backward_weight: int | Fraction = BACKWARD_WEIGHT) -> Fraction:
        """The cost in forward passes: ``forward + backward_weight * backward``.

        :param backward_weight: a backward pass's cost in forward passes (paper: 2).
        """
        return self.forward + Fraction(backward_weight) * self.backward


def _first_tensor(output: object) -> Tensor | None:
    """The first tensor of a module's output (a tensor, or one inside tuples, lists, dicts)."""
    if isinstance(output, Tensor):
        return output
    if isinstance(output, dict):
        items: Sequence[object] = list(output.values())
    elif isinstance(output, (tuple, list)):
        items = output
    else:
        return None
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


def _samples(t: Tensor) -> int:
    """Samples a tensor holds: its first dimension, times the sizes of ``vmap``'s batch dims.

    Under ``torch.func.vmap`` a module sees one sample's logical shape; the batch is in the
    wrapped tensor's hidden dimension, one per ``vmap`` level (``torch.func.grad`` wraps
    without one).
    """
    n = t.shape[0] if t.dim() else 1
    functorch = getattr(torch._C, "_functorch", None)
    while functorch is not None and functorch.is_functorch_wrapped_tensor(t):
        inner = functorch.get_unwrapped(t)
        if functorch.is_batchedtensor(t):
            n *= inner.shape[functorch.maybe_get_bdim(t)]
        t = inner
    return int(n)


class PassCounter:
    """Count per-sample forward and backward passes through ``model`` (a context manager).

    ``with PassCounter(model) as counter: ...`` then ``counter.count``. A forward hook on
    ``model`` (the top module only, so inner modules are not counted twice) adds the
    samples of each call; for an output that needs a gradient it hooks the output's
    gradient, which adds the samples each time a gradient flows back through it (also
    after the block, for outputs computed inside it). Copies of the model made inside the
    block (``copy.deepcopy``) keep the hook and count too. See the module docstring for
    what counts as a pass.

    :param model: the network whose passes to count.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.forward = 0
        self.backward = 0
        self._handle: RemovableHandle | None = None

    @property
    def count(self) -> PassCount:
        """The passes counted so far."""
        return PassCount(self.forward, self.backward)

    def reset(self) -> None:
        """Set both counts to zero."""
        self.forward = self.backward = 0

    def _hook(self) -> Callable[[nn.Module, tuple[object, ...], object], None]:
        """The forward hook, a plain function.

        ``copy.deepcopy`` shares a function; a bound method would be copied with a copy of
        this counter, and a copy of the model would count into that copy.
        """

        def on_forward(module: nn.Module, args: tuple[object, ...], output: object) -> None:
            out = _first_tensor(output)
            if out is None:
                return
            n = _samples(out)
            self.forward += n
            if out.requires_grad:
                out.register_hook(on_gradient(n))

        def on_gradient(n: int) -> Callable[[Tensor], None]:
            def count(grad: Tensor) -> None:
                self.backward += n

            return count

        return on_forward

    def __enter__(self) -> PassCounter:
        if self._handle is not None:
            raise RuntimeError("this PassCounter is already counting; use one `with` at a time")
        self._handle = self.model.register_forward_hook(self._hook())
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def rehearsal_passes(batch_sizes: Sequence[int], *, n_iter: int, replay_batch_size: int,
                     buffer_size: int) -> PassCount:
    """Reservoir's passes on a stream: the baseline of :func:`relative_cost`, in closed form.

    The paper's online rehearsal: each incoming batch is learnt ``n_iter`` times, each
    time one step on the batch (forward and backward of its samples) and one on a replay
    batch of ``min(replay_batch_size, stored)`` buffer samples, ``stored`` being what the
    buffer held before the batch (it sees a batch after learning it; none while empty).
    Reservoir keeps every sample until it holds ``buffer_size``.

    :param batch_sizes: the incoming batches' sizes, in stream order.
    :param n_iter: iterations per incoming batch.
    :param replay_batch_size: buffer samples per replay step.
    :param buffer_size: the buffer's size ``M``.
    :return: the passes (forward and backward are equal).
    """
    for name, value in (("n_iter", n_iter), ("replay_batch_size", replay_batch_size),
                        ("buffer_size", buffer_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    stored = total = 0
    for size in batch_sizes:
        if size < 0:
            raise ValueError(f"batch sizes must be >= 0, got {size}")
        total += n_iter * (size + min(replay_batch_size, stored))
        stored = min(buffer_size, stored + size)
    return PassCount(total, total)


def relative_cost(policy: PassCount, baseline: PassCount,
                  backward_weight: int | Fraction = BACKWARD_WEIGHT) -> Fraction:
    """The stream-model relative complexity ``C``: a policy's cost over the baseline's.

    Both counts must come from the same stream (same batches), e.g. the baseline's from
    :func:`rehearsal_passes` or from a :class:`PassCounter` on a Reservoir run.

    :param policy: the policy's passes.
    :param baseline: Reservoir's passes on the same stream.
    :param backward_weight: a backward pass's cost in forward passes (2: the paper's FLOPs
        convention; 1: passes alone).
    :return: ``C``, exact.
    """
    base = baseline.cost(backward_weight)
    if base <= 0:
        raise ValueError(f"the baseline's cost must be > 0, got {baseline}")
    return policy.cost(backward_weight) / base


def as_fraction(c: float | Rational) -> Fraction:
    """``C`` as an exact fraction: a float becomes the nearest with denominator <= 10**6.

    So ``4 / 3`` is ``Fraction(4, 3)``: :func:`trained_batches` ignores the float's rounding.

    :raises ValueError: ``c`` is not a finite number > 0.
    """
    if isinstance(c, Rational):
        value = Fraction(int(c.numerator), int(c.denominator))
    elif isinstance(c, float) and math.isfinite(c):
        value = Fraction(c).limit_denominator(10**6)
    else:
        raise ValueError(f"relative cost must be a finite number > 0, got {c!r}")
    if value <= 0:
        raise ValueError(f"relative cost must be a finite number > 0, got {c!r}")
    return value


def trained_batches(n_batches: int, c: float | Rational) -> list[int]:
    """The batches a learner of relative cost ``c`` trains on, and its buffer sees.

    The rule of the module docstring: the ``j``-th batch it trains on is ``floor(j * c)``
    (every batch when ``c <= 1``); the others pass while it is busy, unseen by the model
    and the buffer.

    :param n_batches: batches the stream reveals.
    :param c: the relative cost ``C`` (a float, a ``Fraction`` or an int).
    :return: the batch indices, increasing.
    """
    if n_batches < 0:
        raise ValueError(f"n_batches must be >= 0, got {n_batches}")
    step = max(as_fraction(c), Fraction(1))
    out: list[int] = []
    j = 0
    while (i := math.floor(j * step)) < n_batches:
        out.append(i)
        j += 1
    return out


def kept_samples(task_sizes: Sequence[int], batch_size: int, c: float | Rational) -> list[Tensor]:
    """Per task, the samples a learner of relative cost ``c`` trains on (and its buffer sees).

    The stream cuts each task into batches of ``batch_size`` (a task's last one smaller),
    numbered across tasks in stream order, as the online benchmark does; the batches of
    :func:`trained_batches` are kept. Indexing each task's training tensors with the
    result gives the compute-matched stream.

    :param task_sizes: training samples per task, in stream order.
    :param batch_size: samples per incoming batch.
    :param c: the relative cost ``C``.
    :return: per task, the kept sample indices (int64, increasing; possibly empty).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if any(size < 0 for size in task_sizes):
        raise ValueError(f"task sizes must be >= 0, got {list(task_sizes)}")
    counts = [-(-size // batch_size) for size in task_sizes]  # batches per task
    trained = set(trained_batches(sum(counts), c))
    out: list[Tensor] = []
    first = 0  # the task's first batch number
    for size, count in zip(task_sizes, counts, strict=True):
        keep = [torch.arange(b * batch_size, min((b + 1) * batch_size, size))
                for b in range(count) if first + b in trained]
        out.append(torch.cat(keep) if keep else torch.zeros(0, dtype=torch.int64))
        first += count
    return out
