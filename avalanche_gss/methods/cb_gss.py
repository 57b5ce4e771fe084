"""``CB-GSS``: class-balanced gradient-based sample selection (this library's policy).

CB-GSS takes the quantity of each class from class-balancing reservoir sampling (CBRS)
and uses GSS only where a choice among samples of one class remains: which stored sample
gives up its slot. Its replay steps learn the classes the incoming batch does not hold
first (``retrieval="other-classes"``): the batch's own step has just learnt its classes.
Why (what this library's tables show): ``docs/RESULTS.md``, "CB-GSS, this library's policy".

Where the gradients come from (``score_from``). ``"pass"`` (Algorithm 2 as written, the
default): after the batch was learnt, one forward and backward of the gradient engine
(:func:`~avalanche_gss.gradients.sample_gram`) on the samples that take a slot and ``n``
buffer samples drawn for the comparison. ``"step"``: no pass of its own; the gradients are
read off the last training iteration of the batch
(:class:`~avalanche_gss.gradients.step.StepRecord`): the incoming samples' from their step,
the compared buffer samples' from the replay step that followed, which are the replay batch
(its ``retrieval``'s draw, not ``n`` uniform draws), each at the parameters of its own step.
It costs no forward or backward pass beyond training but the one-sample forward with which
a gradient-scored buffer checks the model's outputs (``which-buffer --compute-matched``
charges it C = 1.00005 at most, and it trains on every batch), needs :class:`CBGSS` (or
:class:`~avalanche_gss.training.OnlineRehearsalPlugin`) to hand it the step's gradients,
each experience learnt as one batch, and a model whose trainable layers all have a closed
form and no BatchNorm in train mode (:mod:`~avalanche_gss.gradients.step`); the stock
``ReplayPlugin`` route gets a one-line error.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from avalanche_gss.buffers import ClassBalancedBuffer, GradientScored, Rows
from avalanche_gss.buffers.base import reject
from avalanche_gss.buffers.columns import check_size
from avalanche_gss.buffers.scored import StepScored
from avalanche_gss.selection.cbrs import cbrs_plan, cbrs_slots, place_by_weight
from avalanche_gss.selection.greedy import memory_scores
from avalanche_gss.training.rehearsal import BufferStrategy

__all__ = ["Victim", "ScoreSource", "CBGSSBuffer", "CBGSS"]

Victim = Literal["score", "random"]
ScoreSource = Literal["pass", "step"]


def _check_options(n: int, victim: str, score_from: str, loss_fn: Any) -> int:
    """``n`` checked; raise ``ValueError`` for a bad ``victim`` or ``score_from``."""
    if victim not in ("score", "random"):
        raise ValueError(f"victim must be 'score' or 'random', got {victim!r}")
    if score_from not in ("pass", "step"):
        raise ValueError(f"score_from must be 'pass' or 'step', got {score_from!r}")
    if score_from == "step" and loss_fn is not None:
        raise ValueError("loss_fn applies to score_from='pass' only: with 'step' the "
                         "gradients are those of the strategy's criterion")
    return check_size(n, "n")


class CBGSSBuffer(StepScored, GradientScored, ClassBalancedBuffer):
    """``CB-GSS``: CBRS's class quotas, GSS-Greedy's redundancy score for the victim.

    How many samples of each class stay is CBRS's rule
    (:class:`~avalanche_gss.methods.cbrs.CBRSBuffer`): every sample of a class that is
    not (and never was) the largest is kept, and a full class holds a reservoir of its
    stream. Which stored sample of the chosen class is overwritten is drawn with
    probability proportional to its GSS score ``C_i = max_j cos(g_i, G_j) + 1``
    (Algorithm 2, lines 5-7, against ``n`` gradients drawn from the buffer when the
    sample arrived; :func:`~avalanche_gss.selection.greedy.memory_scores`), so samples
    whose gradient the buffer already covers leave first, as in GSS-Greedy's
    replacement, while the class proportions stay balanced. ``victim="random"`` is CBRS
    itself, draw for draw (the ablation of the score).

    Each batch is decided in two steps. First the class rule alone
    (:func:`~avalanche_gss.selection.cbrs.cbrs_plan`): whether each sample is stored
    and which class gives up a slot depend on the class counts only (when several
    classes tie for largest, one of them is drawn uniformly). Then only the samples
    that take a slot are scored, in one gradient Gram with the ``n`` drawn buffer
    samples, and the scores choose the instances
    (:func:`~avalanche_gss.selection.cbrs.place_by_weight`). So the class counts along a
    stream never depend on the scores, and a batch none of whose samples is stored costs
    no gradient. :attr:`last_scores` is NaN for the samples that were not scored.

    It reads class labels (``y``), as CBRS does, but no task label and no task boundary.
    A sample that would be stored but whose gradient is not finite is refused (counted in
    :attr:`n_rejected`, with a warning), and the rest of the batch is decided again from
    the same uniforms, as if it had not come.

    :param max_size: number of slots ``M``.
    :param n: buffer gradients each new sample is compared with (GSS-Greedy's ``n``).
    :param victim: ``"score"`` (draw the overwritten sample by score) or ``"random"``
        (uniformly: CBRS).
    :param loss_fn: per-sample loss ``(logits, y) -> (B,)``; cross-entropy by default
        (``score_from="pass"`` only: a step's gradients are those of the strategy's criterion).
    :param params: the parameters whose gradients are compared; all trainable by default.
    :param score_from: ``"pass"`` (a gradient pass of the buffer's own) or ``"step"`` (the
        training step's gradients): see the module docstring.
    :param seed: seed of the buffer's generator.
    """

    scored = True
    method = "CB-GSS"
    class_state = ("class_seen", "full_classes")
    """The per-class tensors saved with the samples: ``n_c`` and CBRS's full classes."""

    def __init__(self, max_size: int, *, n: int = 10, victim: Victim = "score",
                 loss_fn: Any = None, params: list[nn.Parameter] | None = None,
                 score_from: ScoreSource = "pass", seed: int = 0) -> None:
        super().__init__(max_size, seed=seed)
        self.full_classes = torch.zeros(0, dtype=torch.bool)  # CBRS's full classes, by label
        self.n = _check_options(n, victim, score_from, loss_fn)
        self.victim: Victim = victim
        self.score_from: ScoreSource = score_from
        self.loss_fn = loss_fn
        self.params = params
        # The buffer samples each new one is compared with are drawn from a generator of
        # their own, so that the class decisions draw exactly CBRS's uniforms.
        self.compare_generator = torch.Generator().manual_seed(seed)

    def state_dict(self) -> dict[str, Any]:
        """:meth:`ClassBalancedBuffer.state_dict` plus the comparison draws' generator."""
        return {**super().state_dict(), "compare_generator": self.compare_generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.compare_generator.set_state(state["compare_generator"])

    def _assign(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, Tensor | None]:
        if self.victim == "random":  # CBRS itself: its rule draws the victim uniformly
            decision = cbrs_slots(self.stored_labels(), rows.y, self.max_size, self.class_seen,
                                  self.full_classes, generator=self.generator)
            self.class_seen, self.full_classes = decision.seen, decision.full
            return decision.slots, None
        return self._assign_by_score(rows, model)

    def _assign_by_score(self, rows: Rows, model: nn.Module | None) -> tuple[Tensor, Tensor]:
        """CBRS's class decisions, the victims drawn by GSS score among the chosen class."""
        stored = self.stored_labels()
        scores = torch.full((len(rows),), float("nan"))
        start = self.generator.get_state()
        host_labels = labels = rows.y.cpu()  # read once, for the rule and the placement
        kept = refused = None  # the rows still offered (None: all), the ones refused
        while True:
            plan = cbrs_plan(stored, labels, self.max_size, self.class_seen,
                             self.full_classes, generator=self.generator)
            need = plan.admitted.nonzero().flatten()  # positions among the kept rows
            if kept is not None:
                need = kept[need]
                need = need[torch.isnan(scores[need])]  # not scored yet
            if len(need) == 0:
                break
            if self.score_from == "step":
                new = self._step_scores(rows, need)
            else:
                dev = need.to(rows.x.device, non_blocking=True)
                new = self._score(rows.x[dev], rows.y[dev], rows.t[dev], model)
            scores[need] = new
            finite = torch.isfinite(new)
            if bool(finite.all()):
                break
            # A sample whose gradient is not finite is refused; the rest of the batch is
            # decided again, from the same uniforms.
            bad = int((~finite).sum())
            reject(self, bad, f"{bad} sample(s) with a non-finite gradient score not stored",
                   stacklevel=5)
            if refused is None:
                refused = torch.zeros(len(rows), dtype=torch.bool)
            refused[need[~finite]] = True
            kept = (~refused).nonzero().flatten()
            labels = host_labels[kept]
            self.generator.set_state(start)
        self.class_seen, self.full_classes = plan.seen, plan.full
        self._step = None  # used: a later batch needs its own step
        stored_scores = (self.scores[: self.size].cpu() if self.scores is not None
                         else torch.zeros(self.size))
        placed = place_by_weight(plan, stored, labels,
                                 (stored_scores, scores if kept is None else scores[kept]))
        if kept is None:
            return placed, scores
        slots = torch.full((len(rows),), -1, dtype=torch.long)
        slots[kept] = placed
        return slots, scores

    def _score(self, x: Tensor, y: Tensor, t: Tensor, model: nn.Module | None) -> Tensor:
        """GSS-Greedy's score of each new sample against ``n`` random stored gradients."""
        self._check_model(model)
        k = min(self.size, self.n)
        if k == 0:
            return torch.ones(len(y))  # empty buffer: cosine 0, nothing known
        bx, by, bt = self.rows(self.sample_slots(k, self.compare_generator))
        gram = self._gram(model, torch.cat([x.to(bx.device), bx]),
                          torch.cat([y.to(by.device), by]), torch.cat([t.to(bt.device), bt]))
        return memory_scores(gram, len(y))[0]

    @property
    def wants_step_gram(self) -> bool:
        """Whether the rehearsal must hand this buffer its step's Gram (``score_from="step"``)."""
        return self.score_from == "step" and self.victim == "score"

    def _step_scores(self, rows: Rows, need: Tensor) -> Tensor:
        """GSS-Greedy's score of the rows ``need`` from the training step's Gram."""
        gram = self._step_gram(rows, need)
        if gram.shape[0] == len(need):  # nothing was replayed: the buffer was empty
            return torch.ones(len(need))  # cosine 0, nothing known (as score_from="pass")
        return memory_scores(gram, len(need))[0]


class CBGSS(BufferStrategy):
    """The ``CB-GSS`` policy: its buffer, and replay of the classes the batch does not hold.

    Storage is :class:`CBGSSBuffer`; each replay step draws the buffer samples whose
    class is absent from the incoming batch first
    (:class:`~avalanche_gss.training.OtherClassesRetrieval`, ``retrieval="other-classes"``,
    the default here); ``retrieval="random"`` gives the paper's uniform replay.

    The buffer's options (``n``, ``victim``, ``loss_fn``, ``params``, ``score_from``) are
    those of :class:`CBGSSBuffer`, with its defaults, and documented there.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`~avalanche_gss.training.OnlineRehearsal`'s arguments (``model``,
        ``optimizer``, ``replay_batch_size``, ``retrieval``, ...).
    """

    buffer_class = CBGSSBuffer
    default_retrieval = "other-classes"

    def __init__(
        self, *, mem_size: int, seed: int = 0, n: int = 10, victim: Victim = "score",
        loss_fn: Any = None, params: list[nn.Parameter] | None = None,
        score_from: ScoreSource = "pass", **options: Any,
    ) -> None:
        buffer = CBGSSBuffer(mem_size, n=n, victim=victim, loss_fn=loss_fn, params=params,
                             score_from=score_from, seed=seed)
        self.rehearse(buffer, seed, options)
