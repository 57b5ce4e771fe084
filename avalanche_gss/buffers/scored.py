"""What the gradient-scored buffers share: one call from a batch to its gradient Gram.

GSS-Greedy, GSS-IQP and GSS-Clust all compare samples by their loss gradients; each asks
:meth:`GradientScored._gram` for the exact per-sample Gram of the gradient engine, with the
model in eval mode and its state untouched (parameters, ``.grad``, BatchNorm statistics,
train/eval mode). FSS-Clust compares features instead: :func:`model_features`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from avalanche_gss.buffers.rows import Rows, labels_on, model_device, task_labels_for
from avalanche_gss.gradients import eval_mode, sample_gram

__all__ = ["GradientScored", "StepScored", "model_features"]


class GradientScored:
    """Mixin of the buffers that score samples by their loss gradients.

    :attr:`loss_fn` is the per-sample loss ``(logits, y) -> (B,)`` (cross-entropy when
    ``None``); :attr:`params` the parameters whose gradients are compared (all trainable
    ones when ``None``).
    """

    method = "this policy"
    """The method's name, for error messages."""

    loss_fn: Any = None
    params: list[nn.Parameter] | None = None
    _width: tuple[Any, int | None] | None = None  # (model key, its number of outputs)

    def _check_labels(self, rows: Rows, high: int, model: nn.Module | None) -> None:
        """Refuse a batch with a label the model has no output for, before anything changes.

        The scores are the model's cross-entropy on the labels (the default ``loss_fn``),
        which PyTorch refuses for a label beyond the outputs, and only when the sample is
        scored: at a later merge for GSS-IQP and GSS-Clust, or once the buffer holds
        samples for GSS-Greedy and CB-GSS. Checked here for every batch offered with a
        model; a custom ``loss_fn`` is trusted with its labels.

        :raises ValueError: ``high`` is not below the model's number of outputs.
        """
        if model is None or self.loss_fn is not None or high < 0:
            return
        outputs = self._outputs(model, rows)
        if outputs is not None and high >= outputs:
            raise ValueError(
                f"label {high} is outside the model's {outputs} outputs (labels must be in "
                f"[0, {outputs - 1}]): {self.method} scores samples by their cross-entropy; "
                "the batch is refused")

    def _outputs(self, model: nn.Module, rows: Rows) -> int | None:
        """The model's number of outputs (``None``: not a ``(N, C)`` output).

        One forward of one sample, eval mode and no gradient (the model's state is not
        touched), remembered while the model and its parameters' shapes stay the same (a
        growing classifier is measured again).
        """
        # tuple() of a list, not of a generator: CPython builds a tuple from a generator by
        # resizing it, not from its free list of tuples, yet puts it there when it is freed;
        # that list (up to 2,000 per length, emptied only by a full collection) would grow
        # by one per batch
        key = (id(model), tuple([p.shape for p in model.parameters()]))
        if self._width is not None and self._width[0] == key:
            return self._width[1]
        dev = model_device(model) or rows.x.device
        x = rows.x[:1].to(dev)
        labels = labels_on(model, rows.t[:1], dev)
        with eval_mode(model), torch.no_grad():
            out = model(x) if labels is None else model(x, labels)
        outputs = int(out.shape[1]) if isinstance(out, Tensor) and out.dim() == 2 else None
        self._width = (key, outputs)
        return outputs

    def _check_model(self, model: nn.Module | None) -> nn.Module:
        """Return ``model`` if it has gradients to compare.

        :raises ValueError: no model, or no parameter to take gradients with (every score
            would be 0).
        """
        if model is None:
            raise ValueError(f"{self.method} scores samples by the model's gradients: "
                             "pass model=")
        params = self.params
        if params is None and not any(p.requires_grad for p in model.parameters()):
            raise ValueError(
                f"{self.method} scores samples by their loss gradients, but "
                f"{type(model).__name__} has no trainable parameter; pass params= or use a "
                "policy that needs none (Reservoir, Rand, FSS-Clust)"
            )
        if params is not None and len(params) == 0:
            raise ValueError(f"{self.method}: params= is empty, there is no gradient to compare")
        return model

    def _gram(self, model: nn.Module | None, x: Tensor, y: Tensor, t: Tensor,
              combine: Tensor | None = None) -> Tensor:
        """The ``(K, K)`` Gram ``<g_i, g_j>`` of the samples' loss gradients, detached.

        Computed where the model is (the samples' device for a model without parameters),
        with the task labels for a ``MultiTaskModule``; see :meth:`_check_model`. With
        ``combine`` (``(M, K)`` weights), the ``(M, M)`` Gram of the weighted sums
        (:func:`~avalanche_gss.gradients.sample_gram`'s ``combine``).
        """
        model = self._check_model(model)
        dev = model_device(model) or x.device
        return sample_gram(model, x.to(dev), y.to(dev), loss_fn=self.loss_fn,
                           params=self.params, task_labels=labels_on(model, t, dev),
                           combine=combine).detach()


class StepScored:
    """Mixin of a buffer that can read its gradients off the training step.

    The rehearsal (:class:`~avalanche_gss.training.step_feed.StepFeed`) hands the buffer,
    while :attr:`wants_step_gram` is true, the Gram of the last training iteration's
    incoming batch and replay batch before it offers the batch (:meth:`take_step_gram`);
    :meth:`_step_gram` gives the buffer the part it compares. A Gram is used for one batch.
    """

    method = "this policy"
    _step: tuple[Tensor, Tensor] | None = None  # the last step's (inputs, Gram)

    @property
    def wants_step_gram(self) -> bool:
        """Whether the rehearsal must hand this buffer its training step's Gram."""
        return False

    def take_step_gram(self, x: Tensor, gram: Tensor) -> None:
        """The last training iteration's Gram, for the batch offered next.

        :param x: the ``(B, ...)`` inputs of the incoming batch that step learnt.
        :param gram: the ``(B + R, B + R)`` Gram of those ``B`` samples' gradients, then of
            the ``R`` replayed samples' (:func:`~avalanche_gss.gradients.step.step_gram`).
        """
        self._step = (x.detach(), gram.detach())

    def _step_gram(self, rows: Rows, need: Tensor) -> Tensor:
        """The step's Gram of the rows ``need`` of ``rows``, then of the replayed samples.

        :raises ValueError: no step was handed over (the batch was not learnt by the
            library's rehearsal), or it learnt other samples than ``rows``.
        """
        if self._step is None:
            raise ValueError(
                f"{self.method} with score_from='step' reads its gradients off the training "
                "step, and this batch came without one: train with the library's strategy or "
                "OnlineRehearsalPlugin, not the stock ReplayPlugin, or use score_from='pass'")
        x, gram = self._step
        at = _positions(x.to(rows.x.device), rows.x)
        if at is None:
            raise ValueError(
                f"{self.method} with score_from='step': the offered batch ({len(rows)} "
                f"samples) is not the one the last training step learnt ({len(x)}); learn "
                "each experience as one batch (train_mb_size >= the experience's size)")
        replayed = torch.arange(len(x), gram.shape[0], device=gram.device)
        take = torch.cat([at[need].to(gram.device), replayed])
        return gram[take][:, take]


def _positions(learnt: Tensor, offered: Tensor) -> Tensor | None:
    """Where each offered sample is among the learnt ones; ``None``: not all are there.

    The buffer is offered the learnt batch less the samples it refused before deciding
    (non-finite inputs), in the dataset's order, which a shuffling dataloader (Avalanche's
    default) changed for the step; each offered sample takes the first equal learnt one not
    taken yet.
    """
    if offered.shape[1:] != learnt.shape[1:] or len(offered) > len(learnt):
        return None
    equal = (learnt.flatten(1)[:, None, :] == offered.flatten(1)[None, :, :]).all(-1).cpu()
    free = torch.ones(len(learnt), dtype=torch.bool)
    at = torch.empty(len(offered), dtype=torch.long)
    for j in range(len(offered)):
        hits = (equal[:, j] & free).nonzero().flatten()
        if len(hits) == 0:
            return None
        at[j] = hits[0]
        free[hits[0]] = False
    return at


def _classifier(model: nn.Module) -> nn.Module:
    """The module whose input is the model's feature: ``model.classifier``, or its last Linear."""
    head = getattr(model, "classifier", None)
    if isinstance(head, nn.Module):
        return head
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if linears:
        return linears[-1]
    raise TypeError(
        f"{type(model).__name__} has no `classifier` module and no nn.Linear, so the "
        "features before its classifier cannot be found; name the last layer `classifier` "
        "or use features='logits'"
    )


def model_features(
    model: nn.Module, x: Tensor, t: Tensor | None = None, *, penultimate: bool = True
) -> Tensor:
    """The features of ``x`` before the model's classifier (or its logits), ``(N, D)``.

    The features are the input of ``model.classifier`` (or of the model's last
    ``nn.Linear``), captured while the model runs its own ``forward``, so any model works
    whatever its input shape (Avalanche's ``SimpleMLP`` flattens inside ``forward``). A
    ``MultiTaskModule`` is called once per task label, as ``model(x, t)``. Eval mode, no
    gradient; the model's modes are restored.

    :param model: the network.
    :param x: ``(N, ...)`` inputs.
    :param t: ``(N,)`` task labels (used for a ``MultiTaskModule`` only).
    :param penultimate: the classifier's input (True) or the model's output (False).
    :raises TypeError: the classifier cannot be found, or it is called other than once per
        forward on the whole batch.
    """
    labels = None if t is None else task_labels_for(model, t)
    groups = [torch.arange(len(x), device=x.device)] if labels is None else [
        (labels == v).nonzero().flatten() for v in torch.unique(labels)]
    head = _classifier(model) if penultimate else None
    parts: list[Tensor] = []
    seen: list[Tensor] = []  # the classifier's input at each call
    with eval_mode(model), torch.no_grad():
        for rows in groups:
            seen.clear()
            handle = None if head is None else head.register_forward_pre_hook(
                lambda _m, args: seen.append(args[0]))
            try:
                if labels is None:
                    out = model(x)
                else:
                    out = model(x[rows], labels[rows])
            finally:
                if handle is not None:
                    handle.remove()
            if head is not None:
                if len(seen) != 1 or seen[0].shape[0] != len(rows):
                    raise TypeError(
                        f"the classifier {type(head).__name__} of {type(model).__name__} ran "
                        f"{len(seen)} time(s) on other rows than the batch; FSS-Clust needs it "
                        "to run once on the whole batch (or use features='logits')")
                out = seen[0]
            parts.append(out.flatten(1))
    if len(parts) == 1:
        return parts[0]
    feats = torch.empty(len(x), parts[0].shape[1], dtype=parts[0].dtype, device=x.device)
    for rows, part in zip(groups, parts, strict=True):
        feats[rows] = part
    return feats
