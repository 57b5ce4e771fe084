"""Per-sample loss-gradient inner products: the one gradient engine every selector uses.

GSS scores samples by the cosine between their loss gradients
``g_i = d loss(f(x_i; theta), y_i) / d theta`` (paper Eq. 2 and the surrogate Eq. 7;
Alg. 1 line 3, Alg. 2 lines 6-7). :func:`sample_gram` returns the exact ``(N, N)`` Gram matrix
``<g_i, g_j>`` from one batched forward pass and one ``torch.autograd.grad`` call, with no
Python loop over samples and, for ``nn.Linear``, without ever holding a per-sample gradient.
Each layer type adds its Gram contribution by its own rule, one module each, looked up in
:mod:`~avalanche_gss.gradients.registry`:

* :mod:`~avalanche_gss.gradients.linear`: ``nn.Linear`` (input ``a``, output gradient
  ``d``): ``<gW_i, gW_j> = (a_i.a_j)(d_i.d_j)`` and ``<gb_i, gb_j> = d_i.d_j``.
* :mod:`~avalanche_gss.gradients.conv`: ``nn.Conv1d``/``nn.Conv2d`` (unfolded patches
  ``U_i (K, T)``, output gradients ``D_i (C, T)``):
  ``<gW_i, gW_j> = sum_pq (U_i^T U_j)_pq (D_i^T D_j)_pq``, or per-sample weight gradients
  materialised in bounded chunks when that is cheaper (shared with Linear in
  :mod:`~avalanche_gss.gradients.patches`), or, on an accelerator, built by one grouped
  weight-gradient convolution. Any stride, padding (mode), dilation and groups.
* :mod:`~avalanche_gss.gradients.norm`: BatchNorm (eval mode, running statistics):
  ``g_gamma_i = sum(d_i * xhat_i)``, ``g_beta_i = sum(d_i)`` over the non-channel
  dimensions.
* :mod:`~avalanche_gss.gradients.fallback`: any other parameter (LayerNorm, Embedding,
  custom modules, tied weights): ``torch.func`` (``functional_call`` + ``vmap(grad)``) for
  those parameters only; if ``vmap`` cannot batch the model (data-dependent control flow,
  ``.item()``), a per-sample loop, with a ``RuntimeWarning``.

:mod:`~avalanche_gss.gradients.engine` runs the forward and backward pass and assembles the
Gram; :mod:`~avalanche_gss.gradients.step` assembles it, with the same layer rules, from a
training step's own forward and backward instead (no pass of its own);
:mod:`~avalanche_gss.gradients.cosine` turns it into cosines and group Grams;
:mod:`~avalanche_gss.gradients.oracle` holds the per-sample loop and ``vmap`` routes that
return the gradients themselves. Scoring runs the model in eval mode (as the authors' code
does), which also makes the samples independent. The engine never touches ``.grad``,
parameters, buffers or the optimizer; :func:`preserved_state` guards callers that do.

Multi-head (task-aware) models: every function that runs the model takes ``task_labels``, an
``(N,)`` integer tensor (:func:`cross_cosine` takes one per set of samples). Without it the
model is called as ``model(x)``; with it, the model is called as ``model(x, task_labels)``,
as Avalanche's ``avalanche_forward`` does for a ``MultiTaskModule``, once per group of
samples that share a task label (``model(x_g, t_g)`` with ``t_g`` that group's labels, all
equal), so every module inside sees whole groups, and the Gram stays exact across groups.
Which models get task labels is the caller's decision; this package imports nothing from
Avalanche.
"""

from __future__ import annotations

from .common import LossFn, cross_entropy_per_sample
from .cosine import cosine_from_gram, cross_cosine, group_gram, sample_cosine
from .engine import sample_gram
from .oracle import per_sample_grad_loop, per_sample_grad_vmap
from .state import eval_mode, preserved_state

__all__ = [
    "LossFn",
    "sample_gram",
    "cosine_from_gram",
    "sample_cosine",
    "cross_cosine",
    "group_gram",
    "per_sample_grad_loop",
    "per_sample_grad_vmap",
    "preserved_state",
    "eval_mode",
    "cross_entropy_per_sample",
]
