"""The paper's online rehearsal: a replay step after every step on the incoming batch.

:class:`OnlineRehearsalPlugin` is the wiring (stream -> buffer -> optimizer); which samples
stay is the storage policy's business. :class:`OnlineRehearsal` is
:class:`~avalanche_gss.training.template.OnlineTemplate` with that plugin, and
:class:`BufferStrategy` the base of each method's ready strategy.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from avalanche.core import BasePlugin, SupervisedPlugin
from avalanche.models import avalanche_forward
from avalanche.training.storage_policy import ExemplarsBuffer
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from avalanche_gss._avalanche import criterion_of
from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.training.ace import replay_criterion
from avalanche_gss.training.finite import finite_loss, is_finite
from avalanche_gss.training.retrieval import Retrieval, make_retrieval
from avalanche_gss.training.step_feed import StepFeed
from avalanche_gss.training.template import OnlineTemplate

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["OnlineRehearsalPlugin", "OnlineRehearsal", "BufferStrategy", "single_sample_norm"]


class OnlineRehearsalPlugin(SupervisedPlugin):
    """Online rehearsal as in the paper and the authors' code.

    After every training iteration on the incoming batch, one more SGD step on
    ``replay_batch_size`` samples drawn from the buffer (new and replayed samples never
    share a step). After the experience, the storage policy sees the batch once, with
    the model that learnt it. With 10-sample experiences and ``train_epochs = n_iter``
    (or :class:`~avalanche_gss.training.template.OnlineTemplate`'s ``n_iter``) this is the
    paper's schedule: ``n_iter`` times (step on the batch, step on the buffer).

    Which buffer samples a replay step learns is the ``retrieval``'s choice
    (:mod:`~avalanche_gss.training.retrieval`): uniform draws (the paper's, the default),
    MIR (:class:`~avalanche_gss.training.retrieval.MIRRetrieval`) or the classes the
    batch does not hold first
    (:class:`~avalanche_gss.training.retrieval.OtherClassesRetrieval`), with any buffer.
    Every draw comes from this plugin's generator, so :meth:`state_dict` resumes it.

    A replay step whose loss is not finite is skipped (:func:`finite_loss`), and counted in
    :attr:`skipped_steps`. A buffer smaller than ``replay_batch_size`` is replayed whole.
    A replay batch of one sample (``M = 1``, or ``replay_batch_size=1``) is learnt with
    every BatchNorm layer that would see a single value per channel normalising with its
    running statistics (:func:`single_sample_norm`).

    A buffer that scores samples by the training step's own gradients (``wants_step_gram``,
    as :class:`~avalanche_gss.methods.cb_gss.CBGSSBuffer` with ``score_from="step"``) gets,
    before it sees the experience, the Gram of the last iteration's incoming and replay
    batches (:class:`~avalanche_gss.training.step_feed.StepFeed`).

    :param storage_policy: the buffer; an :class:`~avalanche_gss.buffers.OnlineBuffer`
        (fast tensor path) or any Avalanche ``ExemplarsBuffer``.
    :param replay_batch_size: buffer samples per replay step (the authors' 10).
    :param seed: seed of the replay draws.
    :param retrieval: a :class:`~avalanche_gss.training.retrieval.Retrieval`, ``"random"``
        (or ``None``: uniform draws, the paper's), ``"mir"`` (MIR with 50 candidates) or
        ``"other-classes"`` (:class:`~avalanche_gss.training.retrieval.OtherClassesRetrieval`).
    :param joint: learn the replay batch in the incoming batch's step (one SGD step on the
        sum of the two mean losses, as the MIR paper's experience replay does) instead of
        a separate step after it (the GSS paper's rehearsal, the default). A replay loss
        that is not finite is then left out of the step, and counted.
    """

    supports_distributed = False

    def __init__(
        self, storage_policy: ExemplarsBuffer, replay_batch_size: int = 10, *, seed: int = 0,
        retrieval: Retrieval | str | None = None, joint: bool = False,
    ) -> None:
        super().__init__()
        if replay_batch_size < 1:
            raise ValueError(f"replay_batch_size must be >= 1, got {replay_batch_size}")
        self.storage_policy = storage_policy
        self.replay_batch_size = replay_batch_size
        self.retrieval = make_retrieval(retrieval)
        self.retrieval.check(replay_batch_size)
        self.joint = joint
        self.generator = torch.Generator().manual_seed(seed)
        self.skipped_steps = 0  # replay steps skipped for a non-finite loss
        self.steps = StepFeed(self)  # the step's Gram, for a buffer that wants it
        self._fused = False  # this step's joint replay loss joined the incoming backward

    def before_forward(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Record the incoming batch's step for a buffer that scores by it (:class:`StepFeed`)."""
        self.steps.start(strategy)

    def after_forward(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Stop recording the incoming batch's forward."""
        self.steps.stop()

    def _fuses(self, strategy: SupervisedTemplate) -> bool:
        """Whether the joint replay loss joins the incoming batch's backward pass.

        It does with ``joint``, on an :class:`OnlineTemplate` (its ``joint_losses``), when
        neither the retrieval (MIR) nor the buffer (a step's Gram) needs the incoming
        batch's gradient or backward alone. The gradients are the same: those of the sum.
        """
        return (self.joint and isinstance(strategy, OnlineTemplate)
                and type(self.retrieval).before_update is Retrieval.before_update
                and not self.steps.active)

    def before_backward(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """With ``joint`` (:meth:`_fuses`), hand the replay loss to the incoming backward."""
        self._fused = self._fuses(strategy)
        if not self._fused:
            return
        loss = self._joint_replay_loss(strategy)
        if loss is not None:
            cast(OnlineTemplate, strategy).joint_losses.append(loss)

    def before_update(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """Let the retrieval see the batch's gradient; with ``joint``, add the replay loss's."""
        self.retrieval.before_update(strategy, self.storage_policy, self.replay_batch_size,
                                     self.generator)
        if not self.joint or self._fused:
            return
        loss = self._joint_replay_loss(strategy)
        if loss is not None:
            loss.backward()

    def _joint_replay_loss(self, strategy: SupervisedTemplate) -> Tensor | None:
        """The joint step's replay loss; ``None`` with an empty buffer or a non-finite loss.

        A non-finite one is counted in :attr:`skipped_steps` and left out of the step.
        """
        batch = self.retrieval.retrieve(strategy, self.storage_policy, self.replay_batch_size,
                                        self.generator)
        if batch is None:
            return None
        loss = self._recorded_replay_loss(strategy, batch)
        if is_finite(loss):
            return loss
        self.skipped_steps += 1
        warnings.warn(f"{type(self).__name__}: non-finite replay loss "
                      f"({float(loss.detach().sum())}); this step learns the incoming batch "
                      "alone", RuntimeWarning, stacklevel=3)
        return None

    def after_training_iteration(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """One SGD step on a replay batch (none while the buffer is empty, or with ``joint``)."""
        if self.joint:
            return
        batch = self.retrieval.retrieve(strategy, self.storage_policy, self.replay_batch_size,
                                        self.generator)
        if batch is None:
            return
        strategy.optimizer.zero_grad()
        loss = self._recorded_replay_loss(strategy, batch)
        loss.backward()
        if finite_loss(loss, self):
            strategy.optimizer.step()

    def _replay_loss(self, strategy: SupervisedTemplate, batch: tuple[Tensor, Tensor, Tensor]
                     ) -> Tensor:
        """The strategy's loss on a replay batch (``avalanche_forward``: task labels).

        The loss is the criterion's :func:`~avalanche_gss.training.ace.replay_criterion`
        (the criterion itself, but for one that learns replayed samples otherwise, as
        ER-ACE's :class:`~avalanche_gss.training.ace.AsymmetricCrossEntropy`). A method
        whose replay loss differs overrides this (as
        :class:`~avalanche_gss.training.weighted_replay.GCRReplayPlugin` does).
        """
        x, y, t = batch
        with single_sample_norm(strategy.model, len(y)):
            criterion = replay_criterion(criterion_of(strategy))
            out = avalanche_forward(strategy.model, x, t)
            loss: Tensor = criterion(out, y)
        return self._with_replay_terms(strategy, loss, x, t, out)

    def _with_replay_terms(self, strategy: SupervisedTemplate, loss: Tensor, x: Tensor,
                           t: Tensor, out: Tensor) -> Tensor:
        """``loss`` plus the terms other plugins add to a replay batch's loss.

        A plugin of the strategy with a ``replay_term(strategy, x, t, out)`` method (as
        :class:`~avalanche_gss.training.mkd.MKDPlugin`) adds what it returns (``None``:
        nothing) for the replayed inputs ``x`` and the learner's logits ``out`` on them.
        """
        for plugin in strategy.plugins:
            # looked up on the class: an EvaluationPlugin's own attribute lookup is slow
            if plugin is self or not callable(getattr(type(plugin), "replay_term", None)):
                continue
            extra = plugin.replay_term(strategy, x, t, out)
            if extra is not None:
                loss = loss + extra
        return loss

    def _recorded_replay_loss(self, strategy: SupervisedTemplate,
                              batch: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """:meth:`_replay_loss`, its step recorded for a buffer that scores by it."""
        return self.steps.replay_loss(strategy, lambda: self._replay_loss(strategy, batch))

    def after_training_exp(self, strategy: SupervisedTemplate, **kwargs: Any) -> None:
        """The storage policy sees the experience once, after it was learnt."""
        self.steps.hand_over()
        self.storage_policy.post_adapt(strategy, strategy.experience)

    def state_dict(self) -> dict[str, Any]:
        """The replay generator (every retrieval's draws), the counter and the buffer's state.

        Tensors and plain values only (loadable with ``torch.load(weights_only=True)``).
        :raises TypeError: the storage policy has no ``state_dict`` (an Avalanche buffer).
        """
        policy_state = getattr(self.storage_policy, "state_dict", None)
        if policy_state is None:
            raise TypeError(f"{type(self.storage_policy).__name__} has no state_dict()")
        return {
            "generator": self.generator.get_state(),
            "skipped_steps": self.skipped_steps,
            "storage_policy": policy_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (a batch chosen and not yet replayed is dropped)."""
        self.generator.set_state(state["generator"])
        self.skipped_steps = int(state["skipped_steps"])
        self.storage_policy.load_state_dict(state["storage_policy"])
        self.retrieval.reset()


def single_sample_norm(model: nn.Module, n: int) -> AbstractContextManager[None]:
    """One sample: a BatchNorm layer seeing one value per channel uses its running statistics.

    PyTorch cannot take the batch statistics of a single value (a train-mode BatchNorm
    raises ``Expected more than 1 value per channel``); such a layer normalises with its
    running statistics instead, as in eval mode, and leaves them unchanged. Layers that see
    more values (a ``BatchNorm2d`` on a feature map), layers without running statistics and
    every other module run as usual. With ``n > 1`` nothing changes.

    :param model: the network.
    :param n: the number of samples of the forward.
    """
    if n != 1:  # (every replay step but those of one sample: no generator to run)
        return nullcontext()
    return _running_statistics_for_one_value(model)


@contextmanager
def _running_statistics_for_one_value(model: nn.Module) -> Iterator[None]:
    """:func:`single_sample_norm` for a forward of one sample."""
    switched: list[nn.Module] = []

    def one_value(module: nn.Module, args: tuple[Any, ...]) -> None:
        x = args[0] if args else None
        if (module.training and getattr(module, "track_running_stats", False)
                and isinstance(x, Tensor) and x.dim() >= 2
                and x.shape[0] * math.prod(x.shape[2:]) == 1):
            module.training = False
            switched.append(module)

    handles = [m.register_forward_pre_hook(one_value) for m in model.modules()
               if isinstance(m, _BatchNorm)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module in switched:
            module.training = True


class OnlineRehearsal(OnlineTemplate):
    """The paper's online rehearsal with any storage policy.

    :param storage_policy: the buffer (any :class:`~avalanche_gss.buffers.OnlineBuffer`
        or Avalanche ``ExemplarsBuffer``).
    :param replay_batch_size: buffer samples per replay step (10).
    :param seed: seed of the replay draws.
    :param retrieval: which buffer samples a replay step learns: ``"random"`` (the
        default), ``"mir"``, ``"other-classes"`` or a
        :class:`~avalanche_gss.training.retrieval.Retrieval` (see
        :class:`OnlineRehearsalPlugin`).
    :param joint: replay in the incoming batch's step instead of a separate one (see
        :class:`OnlineRehearsalPlugin`).
    :param plugins: extra plugins (the caller's list is copied, never modified).
    :param kwargs: :class:`~avalanche_gss.training.template.OnlineTemplate`'s arguments
        (``model``, ``optimizer``, ``n_iter``, ...).
    """

    plugin_class: ClassVar[type[OnlineRehearsalPlugin]] = OnlineRehearsalPlugin
    """The rehearsal plugin built; a method whose replay loss differs subclasses it."""

    def __init__(
        self, *, storage_policy: ExemplarsBuffer, replay_batch_size: int = 10, seed: int = 0,
        retrieval: Retrieval | str | None = None, joint: bool = False,
        plugins: Sequence[BasePlugin] | None = None, **kwargs: Any,
    ) -> None:
        self.rehearsal = self.plugin_class(storage_policy, replay_batch_size, seed=seed,
                                           retrieval=retrieval, joint=joint)
        super().__init__(plugins=[self.rehearsal, *(plugins or [])], **kwargs)

    @property
    def storage_policy(self) -> OnlineBuffer:
        """The buffer: an :class:`~avalanche_gss.buffers.OnlineBuffer` in every ready strategy.

        An Avalanche ``ExemplarsBuffer`` given to :class:`OnlineRehearsal` is returned as it is.
        """
        return cast(OnlineBuffer, self.rehearsal.storage_policy)


class BufferStrategy(OnlineRehearsal):
    """Online rehearsal with a buffer of class :attr:`buffer_class`: a ready strategy's base.

    A ready strategy whose buffer has no option is one line, ``buffer_class = MyBuffer``.
    One whose buffer has options names them in its own ``__init__`` (typed, with the
    buffer's defaults), builds the buffer with them and hands it to :meth:`rehearse`, as
    :class:`~avalanche_gss.methods.gss_greedy.GSSGreedy` does.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param options: :class:`OnlineRehearsal`'s arguments (``model``, ``optimizer``,
        ``replay_batch_size``, ...); a ``retrieval`` left out or ``None`` is
        :attr:`default_retrieval`.
    """

    buffer_class: ClassVar[type[OnlineBuffer]]
    """The storage policy this strategy builds."""

    default_retrieval: ClassVar[str] = "random"
    """The retrieval used when none is given (``retrieval=None``): a name of
    :data:`~avalanche_gss.training.retrieval.RETRIEVALS`."""

    def __init__(self, *, mem_size: int, seed: int = 0, **options: Any) -> None:
        self.rehearse(self.buffer_class(mem_size, seed=seed), seed, options)

    def rehearse(self, buffer: OnlineBuffer, seed: int, options: dict[str, Any]) -> None:
        """Rehearse ``buffer`` (:class:`OnlineRehearsal` with ``options``).

        The extension point of a ready strategy whose buffer has options: its ``__init__``
        builds the buffer and calls ``self.rehearse(buffer, seed, options)`` (see the
        README's "Your own policy").

        :param buffer: the storage policy, built from the strategy's buffer options.
        :param seed: seed of the replay draws (the buffer's own seed).
        :param options: :class:`OnlineRehearsal`'s arguments (the caller's dict, changed).
        """
        if options.get("retrieval") is None:
            options["retrieval"] = self.default_retrieval
        OnlineRehearsal.__init__(self, storage_policy=buffer, seed=seed, **options)
