"""CSReL's selection rule: samples scored by their reducible loss, kept by a weighted reservoir.

Tong et al., *Coreset Selection via Reducible Loss in Continual
Learning*, ICLR 2025. A sample's reducible loss is what training on the coreset has not
yet taught about it and training on all the data would:
``rl(x, y) = loss(f_coreset(x), y) - loss(f_full(x), y)``, two forward passes (no
gradient). Samples with a high reducible loss are informative (the coreset model gets
them wrong) and learnable (a model trained on all the data gets them right); noisy or
ambiguous samples, which no model gets right, score low.

Pure tensor code (no Avalanche import): :func:`reducible_loss` is the score,
:func:`admission_weights` the batch's weights and :func:`streaming_slots` the streaming
variant's decision (the authors' online buffer): while the buffer is not full every sample
is stored; after, sample ``i`` (the ``n_i``-th of the stream, counted from 0) enters with
probability ``min(1, M * w_i / (n_i + 1))``, reservoir sampling's probability scaled by
its weight ``w_i`` (:func:`admission_weights`, mean 1 over the batch), and replaces a
stored sample drawn uniformly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["reducible_loss", "admission_weights", "streaming_slots"]


def reducible_loss(coreset_logits: Tensor, full_logits: Tensor, y: Tensor) -> Tensor:
    """Each sample's reducible loss, ``CE(coreset_logits, y) - CE(full_logits, y)``, ``(N,)``.

    :param coreset_logits: the logits of the model trained on the coreset, ``(N, C)``.
    :param full_logits: the logits of the model trained on all the data, ``(N, C')``.
    :param y: the labels, ``(N,)`` integers below ``min(C, C')``.
    """
    coreset = F.cross_entropy(coreset_logits.float(), y, reduction="none")
    full = F.cross_entropy(full_logits.float(), y, reduction="none")
    return coreset - full


def admission_weights(scores: Tensor) -> Tensor:
    """``B * softmax(scores)``: each of the batch's ``B`` samples' weight, mean 1.

    A non-finite score gets weight 0 (the sample is not stored), the others share the
    batch's mass; a batch without a finite score gets all zeros.

    :param scores: the batch's reducible losses, ``(B,)``.
    """
    finite = torch.isfinite(scores)
    masked = scores.double().masked_fill(~finite, float("-inf"))
    if not bool(finite.any()):
        return torch.zeros_like(masked)
    return torch.softmax(masked, dim=0) * len(scores)


def streaming_slots(weights: Tensor, n_seen: int, size: int, max_size: int,
                    generator: torch.Generator | None = None) -> Tensor:
    """The slot each incoming sample takes under CSReL's streaming rule (``-1``: none).

    Samples are taken in order: while the buffer has free slots the next free slot (a
    sample of weight 0 excepted); once full, sample ``i``, the ``(n_seen + i)``-th of the
    stream, enters with probability ``min(1, max_size * w_i / (n_seen + i + 1))`` and
    replaces a uniformly drawn stored sample. A slot taken twice in one batch keeps the
    later sample (as one sample after the other would), so the slots are distinct.

    Draws ``B`` uniforms then ``B`` slots from ``generator``, whatever the outcome.

    :param weights: the batch's weights (:func:`admission_weights`), ``(B,)``.
    :param n_seen: samples of the stream seen before this batch.
    :param size: samples stored now.
    :param max_size: the buffer's slots ``M``.
    :param generator: source of randomness.
    :return: ``(B,)`` int64 slots on the CPU.
    """
    # the batch's few values read once, as host floats and ints (the same float64 values)
    w = weights.detach().double().cpu().tolist()
    b = len(w)
    uniforms = torch.rand(b, generator=generator, dtype=torch.float64).tolist()
    drawn = torch.randint(0, max_size, (b,), generator=generator).tolist()
    slots = [-1] * b
    owner: dict[int, int] = {}  # slot -> the batch's sample that holds it
    for i in range(b):
        if not w[i] > 0:
            continue
        if size < max_size:
            slot = size
            size += 1
        elif uniforms[i] * (n_seen + i + 1) < max_size * w[i]:
            slot = drawn[i]
        else:
            continue
        earlier = owner.get(slot)
        if earlier is not None:
            slots[earlier] = -1
        owner[slot] = i
        slots[i] = slot
    return torch.tensor(slots, dtype=torch.long)
