"""Hand a buffer the gradients of the training step that learnt its batch.

A buffer that scores samples by their gradients can read them off training instead of a
pass of its own (:mod:`~avalanche_gss.gradients.step`): :class:`StepFeed` records the
last iteration of each incoming batch (its step, then the replay step that follows) and,
before the buffer sees the experience, gives it the Gram of both batches' samples. The
rehearsal plugin (:class:`~avalanche_gss.training.OnlineRehearsalPlugin`) owns one and
calls it from its callbacks; it records only for a buffer whose ``wants_step_gram`` is
true, and then only the last of a batch's ``n_iter`` iterations (the strategy's
``n_iter``; every iteration for a strategy without one).

The buffer's side is two members: ``wants_step_gram`` (a bool) and
``take_step_gram(x, gram)`` (the incoming batch's inputs, and the ``(B + R, B + R)`` Gram
of its ``B`` samples then the ``R`` replayed ones), as
:class:`~avalanche_gss.methods.cb_gss.CBGSSBuffer` has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from avalanche_gss.gradients.step import StepLayers, StepRecord, step_gram, step_problem

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["StepFeed", "feed_problem"]


def _refusal(buffer: Any, problem: str) -> str:
    """The one line that says why ``buffer``'s steps cannot be recorded (``problem``)."""
    method = getattr(buffer, "method", type(buffer).__name__)
    return f"{method} scores by the training step, but {problem}; use score_from='pass'"


def feed_problem(buffer: Any, model: nn.Module) -> str | None:
    """Why a :class:`StepFeed` cannot hand ``buffer`` the Gram of ``model``'s training steps.

    Asked before training, as the rehearsal would record a step: the model in train mode
    (its modes are restored), the buffer's ``params`` (all trainable ones by default).

    :param buffer: a storage policy; one whose ``wants_step_gram`` is false needs nothing.
    :param model: the network the strategy would train.
    :return: one line naming the buffer's method and the layer that cannot be recorded
        (:func:`~avalanche_gss.gradients.step.step_problem`), or ``None``.
    """
    if not getattr(buffer, "wants_step_gram", False):
        return None
    modes = [(module, module.training) for module in model.modules()]
    model.train()
    try:
        problem = step_problem(model, getattr(buffer, "params", None))
    finally:
        for module, training in modes:
            module.train(training)
    return None if problem is None else _refusal(buffer, problem)


class StepFeed:
    """Record a batch's last training iteration for a buffer that scores by it.

    :param owner: what holds the storage policy, as ``owner.storage_policy`` (recording
        happens only while that buffer wants the Gram).
    """

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self._incoming: tuple[Tensor, StepRecord] | None = None  # (inputs, their step)
        self._replayed: StepRecord | None = None  # the replay step after it
        self._recording = False  # whether this iteration's steps are recorded
        self._iterations = 0  # iterations of the experience so far
        self._layers: StepLayers | None = None  # the model's recorded layers, planned once

    @property
    def buffer(self) -> Any:
        """The storage policy now."""
        return self.owner.storage_policy

    @property
    def active(self) -> bool:
        """Whether the buffer is handed the training step's Gram."""
        return bool(getattr(self.buffer, "wants_step_gram", False))

    def _record(self, strategy: SupervisedTemplate) -> StepRecord:
        """A record of the next step, on the model's layers (planned again if it changed)."""
        params = getattr(self.buffer, "params", None)
        key = StepLayers.key_of(strategy.model, params)
        if self._layers is None or self._layers.key != key:
            self._layers = StepLayers(strategy.model, params)
        return StepRecord(strategy.model, layers=self._layers)

    def start(self, strategy: SupervisedTemplate) -> None:
        """Before the incoming batch's forward: record it if this is its last iteration."""
        if not self.active:
            return
        self._iterations += 1
        self._recording = self._iterations % max(1, int(getattr(strategy, "n_iter", 1))) == 0
        if self._recording:
            self._replayed = None
            try:
                self._incoming = (strategy.mb_x, self._record(strategy).__enter__())
            except ValueError as err:  # the model's steps cannot be recorded: say for whom
                raise ValueError(_refusal(self.buffer, str(err))) from err

    def stop(self) -> None:
        """After the incoming batch's forward: the backward fills in its output gradients."""
        if self._incoming is not None:
            self._incoming[1].__exit__(None, None, None)

    def replay_loss(self, strategy: SupervisedTemplate, loss: Callable[[], Tensor]) -> Tensor:
        """``loss()`` (the replay batch's loss), its forward recorded when the batch's was."""
        if not self._recording:
            return loss()
        with self._record(strategy) as record:
            value = loss()
        self._replayed = record
        return value

    def hand_over(self) -> None:
        """After the experience: give the buffer the last recorded iteration's Gram."""
        self._iterations, self._recording = 0, False
        if self._incoming is None:
            return
        x, incoming = self._incoming
        records = [incoming] if self._replayed is None else [incoming, self._replayed]
        self._incoming = self._replayed = None
        self.buffer.take_step_gram(x, step_gram(records))
