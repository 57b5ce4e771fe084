"""``GSS-IQP`` (paper Algorithm 1, appendix B): the buffer and its two ready strategies.

:class:`GSSIQP` replays the buffer (the paper's rehearsal); :class:`GSSIQPConstrained`
uses it as GEM-style constraints instead (appendix C).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import GradientScored, RecentMergeBuffer, Rows
from avalanche_gss.buffers.merge import usable as usable_rows
from avalanche_gss.gradients import cosine_from_gram
from avalanche_gss.selection.iqp import IQPResult, select_iqp
from avalanche_gss.training.constrained import ConstrainedUpdatePlugin
from avalanche_gss.training.rehearsal import BufferStrategy
from avalanche_gss.training.template import OnlineTemplate

__all__ = ["IQPSolver", "GSSIQPBuffer", "GSSIQP", "GSSIQPConstrained"]

IQPSolver = Literal["fast", "exact"]


class GSSIQPBuffer(GradientScored, RecentMergeBuffer):
    """``GSS-IQP`` (paper Algorithm 1, appendix B).

    When the recent buffer holds ``recent_size`` samples and the union ``M_b U M_r``
    exceeds ``M``, the cosine Gram of the union's per-sample loss gradients (the
    gradient engine, model in eval mode, state untouched) goes to
    :func:`~avalanche_gss.selection.iqp.select_iqp`, which keeps the ``M`` samples
    minimising the surrogate ``sum_{i,j in S} cos(g_i, g_j)``; while the union fits,
    everything is kept and nothing is computed. A failing exact solver falls back to the
    fast one with a warning, so a selection always keeps exactly ``M`` samples.

    :param max_size: number of slots ``M`` (Alg. 1's ``M_b``).
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param solver: ``"fast"`` (swap local search) or ``"exact"`` (SCIP under
        ``time_limit``), see :func:`~avalanche_gss.selection.iqp.select_iqp`.
    :param time_limit: SCIP's time limit in seconds per selection (exact solver).
    :param restarts: restarts of the fast solver.
    :param slack: gradients with norm ``<= slack`` have no usable direction and are left
        out of the IQP (kept only if too few others remain), as in the authors' code;
        ``0`` leaves out exactly-zero gradients, ``None`` keeps every candidate.
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default.
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param seed: seed of the buffer's generator (also the fast solver's restarts).
    """

    method = "GSS-IQP"

    def __init__(
        self,
        max_size: int,
        *,
        recent_size: int = 100,
        solver: IQPSolver = "fast",
        time_limit: float = 60.0,
        restarts: int = 16,
        slack: float | None = 0.0,
        loss_fn: Any = None,
        params: list[nn.Parameter] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(max_size, recent_size=recent_size, seed=seed)
        if solver not in ("fast", "exact"):
            raise ValueError(f"solver must be 'fast' or 'exact', got {solver!r}")
        if not time_limit > 0:
            raise ValueError(f"time_limit must be positive, got {time_limit}")
        if restarts < 0:
            raise ValueError(f"restarts must be >= 0, got {restarts}")
        self.solver: IQPSolver = solver
        self.time_limit = float(time_limit)
        self.restarts = restarts
        self.slack = slack
        self.loss_fn = loss_fn
        self.params = params
        self.last_result: IQPResult | None = None

    @property
    def last_surrogate(self) -> float | None:
        """Surrogate ``x^T G x`` of the last selection (``None`` before the first one)."""
        return None if self.last_result is None else self.last_result.objective

    def report(self) -> dict[str, Any]:
        """The last selection's surrogate (``last_surrogate``), once there was one."""
        surrogate = self.last_surrogate
        return {} if surrogate is None else {"last_surrogate": surrogate}

    def _select(self, union: Rows, n_stored: int, model: nn.Module | None) -> Tensor:
        if len(union) <= self.max_size:
            return torch.arange(len(union))
        gram = self._gram(model, union.x, union.y, union.t)  # (K, K)
        usable = usable_rows(self, torch.isfinite(gram.diagonal()).cpu(), n_stored)  # (K',)
        if usable is None:
            return torch.arange(n_stored)
        if len(usable) == len(union):
            return self._solve(gram)
        if len(usable) <= self.max_size:
            return usable
        idx = usable.to(gram.device)
        return usable[self._solve(gram[idx[:, None], idx[None, :]])]  # (K', K') sub-Gram

    def _solver_inputs(self, gram: Tensor) -> tuple[Tensor, Tensor | None]:
        """What a selection hands the solver for the gradient Gram ``gram``.

        :param gram: the candidates' gradient Gram, shape ``(K, K)``.
        :return: the cosines ``(K, K)`` (Alg. 1 line 5's matrix) on the CPU, and the mask
            ``(K,)`` of gradients with norm ``<= slack`` (``None`` when there are none, or
            ``slack`` is ``None``).
        """
        cos = cosine_from_gram(gram).cpu()  # (K, K)
        invalid = None
        if self.slack is not None:
            invalid = gram.diagonal().clamp_min(0).sqrt().cpu() <= self.slack  # (K,)
            invalid = invalid if bool(invalid.any()) else None
        return cos, invalid

    def _solve(self, gram: Tensor) -> Tensor:
        """Keep ``max_size`` of the samples whose gradient Gram is ``gram`` (appendix B)."""
        cos, invalid = self._solver_inputs(gram)
        self.last_result = select_iqp(
            cos, self.max_size, solver=self.solver, time_limit=self.time_limit,
            restarts=self.restarts, generator=self.generator, invalid=invalid,
        )
        return self.last_result.indices

    def state_dict(self) -> dict[str, Any]:
        """:meth:`RecentMergeBuffer.state_dict` plus the last selection's outcome."""
        state = super().state_dict()
        state["last_result"] = None if self.last_result is None else asdict(self.last_result)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        last = state["last_result"]
        self.last_result = None if last is None else IQPResult(**last)


class GSSIQP(BufferStrategy):
    """Online rehearsal with the ``GSS-IQP`` buffer (paper Algorithm 1).

    The buffer's options (``recent_size``, ``solver``, ``time_limit``, ``restarts``,
    ``slack``, ``loss_fn``, ``params``) are those of :class:`GSSIQPBuffer`, with its
    defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = GSSIQPBuffer

    def __init__(
        self, *, mem_size: int, seed: int = 0, recent_size: int = 100, solver: IQPSolver = "fast",
        time_limit: float = 60.0, restarts: int = 16, slack: float | None = 0.0,
        loss_fn: Any = None, params: list[nn.Parameter] | None = None, **options: Any,
    ) -> None:
        buffer = GSSIQPBuffer(mem_size, recent_size=recent_size, solver=solver,
                              time_limit=time_limit, restarts=restarts, slack=slack,
                              loss_fn=loss_fn, params=params, seed=seed)
        self.rehearse(buffer, seed, options)


class GSSIQPConstrained(OnlineTemplate):
    """``GSS-IQP (Constrained)`` (appendix C): a GSS-IQP buffer used as GEM constraints.

    Each step on the incoming batch is projected by
    :class:`~avalanche_gss.training.ConstrainedUpdatePlugin` so that it increases the
    loss of no buffer sample; no replay step is taken. The buffer is updated after each
    batch by Algorithm 1, as in :class:`GSSIQP`.

    The buffer's options (``recent_size``, ``solver``, ``time_limit``, ``restarts``,
    ``slack``, ``loss_fn``, ``params``) are those of :class:`GSSIQPBuffer`, with its
    defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param margin: GEM's ``memory_strength`` (lower bound of the dual variables; 0: the
        plain projection, see :class:`~avalanche_gss.training.ConstrainedUpdatePlugin`).
    :param seed: seed of the buffer.
    :param plugins: extra plugins (the caller's list is copied, never modified).
    :param kwargs: :class:`~avalanche_gss.training.OnlineTemplate`'s arguments (``model``,
        ``optimizer``, ``n_iter``, ...).
    """

    def __init__(
        self, *, mem_size: int, margin: float = 0.0, seed: int = 0, plugins: Any = None,
        recent_size: int = 100, solver: IQPSolver = "fast", time_limit: float = 60.0,
        restarts: int = 16, slack: float | None = 0.0, loss_fn: Any = None,
        params: list[nn.Parameter] | None = None, **kwargs: Any,
    ) -> None:
        buffer = GSSIQPBuffer(mem_size, recent_size=recent_size, solver=solver,
                              time_limit=time_limit, restarts=restarts, slack=slack,
                              loss_fn=loss_fn, params=params, seed=seed)
        self.constrained = ConstrainedUpdatePlugin(buffer, margin=margin)
        super().__init__(plugins=[self.constrained, *(plugins or [])], **kwargs)

    @property
    def storage_policy(self) -> GSSIQPBuffer:
        """The buffer."""
        return cast(GSSIQPBuffer, self.constrained.storage_policy)  # the one built above
