"""How samples reach a buffer from Avalanche experiences and datasets.

:func:`experience_samples` reads what an experience holds (its tensors, or its dataset
through the current transforms) and :func:`batches` cuts those samples into the batches
:meth:`~avalanche_gss.buffers.OnlineBuffer.update_from_dataset` and ``post_adapt`` offer
one at a time, each with its provenance.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from avalanche.benchmarks import CLExperience
from torch import Tensor

from avalanche_gss._avalanche import has_transforms, reading_copy
from avalanche_gss.buffers.rows import Rows
from avalanche_gss.streams.online import TensorExperience, dataset_tensors

__all__ = ["Samples", "dataset_samples", "experience_samples", "batches"]


class Samples(NamedTuple):
    """The samples of one source, as a buffer is offered them."""

    data: Any
    """The source: the dataset each sample's index refers to, or the
    :class:`~avalanche_gss.streams.online.DatasetCell` that builds it when it is read."""
    x: Tensor
    y: Tensor
    t: Tensor
    batch_size: int | None
    """Samples offered at once (``None``: the buffer's ``dataset_batch_size``)."""
    plain: bool
    """Whether reading the source gives exactly ``x`` (no transform)."""


def dataset_samples(data: Any, batch_size: int | None = None) -> Samples:
    """A dataset's samples, read through its current transforms (what the model learns)."""
    x, y, t = dataset_tensors(reading_copy(data))  # the stream may keep `data` for good
    return Samples(data, x, y, t, batch_size, not has_transforms(data))


def experience_samples(exp: Any) -> Samples:
    """An experience's samples: a ``TensorExperience``'s tensors (one batch), else its dataset.

    :param exp: an Avalanche experience, or a dataset.
    """
    tensors = getattr(exp, "tensors", None)  # a TensorExperience: no transform, no copy
    if tensors is not None and isinstance(exp, CLExperience):
        x, y = tensors
        t = torch.full((len(y),), int(getattr(exp, "task_label", 0)), dtype=torch.long)
        # a TensorExperience's dataset is built only if the buffer is read as a dataset
        source = exp.cell if isinstance(exp, TensorExperience) else exp.dataset
        return Samples(source, x, y, t, len(y) or None, True)
    return dataset_samples(exp.dataset if isinstance(exp, CLExperience) else exp)


def batches(samples: Samples, sid: int, step: int, device: torch.device | str | None
            ) -> Iterator[tuple[Rows, Tensor, Tensor]]:
    """Cut ``samples`` into batches of ``step``: ``(rows on device, host x, host y)`` each.

    :param samples: the samples, in order.
    :param sid: their source's id in the buffer's registry.
    :param step: samples per batch, >= 1.
    :param device: where the rows go (``None``: where they are); the host tensors are
        what the buffer validates, with no device sync.
    """
    x, y, t = samples.x, samples.y, samples.t
    hx, hy = x, y  # validated where they are (the host, for a stream's data): no sync
    if device is not None:
        x, y, t = (v.to(device, non_blocking=True) for v in (x, y, t))
    n = len(y)
    for start in range(0, n, step):
        end = min(start + step, n)
        if start == 0 and end == n:  # one batch (an online experience): nothing to cut
            bx, by, bt, bhx, bhy = x, y, t, hx, hy
        else:
            bx, by, bt = x[start:end], y[start:end], t[start:end]
            bhx, bhy = hx[start:end], hy[start:end]
        rows = Rows(bx, by, bt, torch.full((end - start,), sid, dtype=torch.long),
                    torch.arange(start, end), torch.full((end - start,), samples.plain))
        yield rows, bhx, bhy
