"""Ready Avalanche strategies for task-free online streams.

:class:`OnlineTemplate` is a ``SupervisedTemplate`` that treats each experience as one
incoming batch and learns it ``n_iter`` times, firing the usual plugin callbacks but
without the per-experience work (a new ``DataLoader`` per experience and epoch, model
adaptation and optimizer reset) that makes Avalanche slow on 10-sample experiences.
The ready strategies (:class:`Reservoir`, :class:`Rand`, :class:`GSSGreedy`) are that
template plus :class:`~avalanche_gss.plugins.OnlineRehearsalPlugin` and a buffer.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from avalanche.core import BasePlugin, BaseSGDPlugin, SupervisedPlugin
from avalanche.evaluation.metric_definitions import PluginMetric
from avalanche.models import DynamicModule, avalanche_forward
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.templates import SupervisedTemplate
from torch import nn
from torch.optim import Optimizer

from avalanche_gss.benchmarks.online import TensorExperience
from avalanche_gss.plugins import ConstrainedUpdatePlugin, OnlineRehearsalPlugin, finite_loss
from avalanche_gss.storage import (
    ClustFeatures,
    FSSClustBuffer,
    GSSClustBuffer,
    GSSGreedyBuffer,
    GSSIQPBuffer,
    IQPSolver,
    OnlineBuffer,
    RandBuffer,
    ReservoirBuffer,
    Variant,
)

__all__ = [
    "quiet_evaluator",
    "RepeatedBatchMixin",
    "OnlineTemplate",
    "SlowPathWarning",
    "OnlineRehearsal",
    "Reservoir",
    "Rand",
    "GSSGreedy",
    "GSSIQP",
    "GSSClust",
    "FSSClust",
    "GSSIQPConstrained",
]


def quiet_evaluator(*metrics: Any, loggers: Sequence[Any] = ()) -> EvaluationPlugin:
    """Build an ``EvaluationPlugin`` with these metrics and loggers (none by default).

    Avalanche warns "No loggers specified" when there is none; results are read from
    ``strategy.eval``'s return value, so the warning is silenced.

    :param metrics: Avalanche metrics (e.g. ``accuracy_metrics(experience=True)``).
    :param loggers: Avalanche loggers (e.g. ``TensorboardLogger(dir)``).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "No loggers specified")
        return EvaluationPlugin(*metrics, loggers=list(loggers))


class RepeatedBatchMixin:
    """Learn every mini-batch ``n_iter`` times in a row (the paper's iterations per batch).

    Mix it in before an Avalanche ``SupervisedTemplate`` subclass (``class
    MyGEM(RepeatedBatchMixin, GEM)``) and set ``self.n_iter``: each mini-batch of an epoch
    then gets ``n_iter`` full Avalanche iterations, plugin callbacks included. The paper
    treats this as a hyper-parameter of GEM and iCaRL too.
    """

    n_iter: int = 1

    def training_epoch(self: Any, **kwargs: Any) -> None:
        """One pass over the dataloader, ``n_iter`` iterations per mini-batch.

        ``stop_training()`` takes effect at the next iteration, and a periodic evaluation
        between two iterations of a batch does not lose the batch.
        """
        for mbatch in self.dataloader:
            if self._stop_training:
                break
            self.mbatch = mbatch
            self._unpack_minibatch()
            batch = self.mbatch
            for _ in range(self.n_iter):
                if self._stop_training:
                    break
                self.mbatch = batch  # a periodic evaluation in between resets it
                self._iteration(**kwargs)

    def _iteration(self: Any, **kwargs: Any) -> None:
        """One Avalanche training iteration on ``self.mbatch`` (SGDUpdate's loop body)."""
        self._before_training_iteration(**kwargs)
        self.optimizer.zero_grad()
        self.loss = self._make_empty_loss()
        self._before_forward(**kwargs)
        self.mb_output = self.forward()
        self._after_forward(**kwargs)
        self.loss += self.criterion()
        self._before_backward(**kwargs)
        self.backward()
        self._after_backward(**kwargs)
        self._before_update(**kwargs)
        self.optimizer_step()
        self._after_update(**kwargs)
        self._after_training_iteration(**kwargs)


_TRAINING_EVENTS = (
    "before_train_dataset_adaptation", "after_train_dataset_adaptation",
    "before_training_exp", "after_training_exp", "before_training_epoch",
    "after_training_epoch", "before_training_iteration", "before_forward", "after_forward",
    "before_backward", "after_backward", "before_update", "after_update",
    "after_training_iteration",
)
_NO_OPS = {event: {getattr(c, event, None) for c in (BasePlugin, BaseSGDPlugin, SupervisedPlugin,
                                                     PluginMetric)} for event in _TRAINING_EVENTS}


def _acts_on(plugin: Any, event: str) -> bool:
    """Whether ``plugin`` does anything on ``event`` (Avalanche's no-op defaults do not)."""
    if isinstance(plugin, EvaluationPlugin):
        if not getattr(plugin, "_active", True):
            return False
        parts = [*plugin.metrics, *plugin.loggers]
        return any(getattr(type(p), event, None) not in _NO_OPS[event] for p in parts)
    return getattr(type(plugin), event, None) not in _NO_OPS[event]


def _fast_trigger(event: str) -> Any:
    def trigger(self: OnlineTemplate, **kwargs: Any) -> None:
        for hook in self._hooks(event):
            hook(self, **kwargs)

    trigger.__doc__ = f"Call the plugins that act on ``{event}``."
    return trigger


class SlowPathWarning(UserWarning):
    """:class:`OnlineTemplate` trains through Avalanche's ``DataLoader`` path (said once)."""


class _TensorBatches(list):  # type: ignore[type-arg]
    """An experience's tensors cut into ``[x, y, t]`` mini-batches: the fast path's loader."""


class OnlineTemplate(RepeatedBatchMixin, SupervisedTemplate):
    """Online learning on a stream of small experiences: each one is an incoming batch.

    A ``SupervisedTemplate`` whose every experience is one epoch in which each mini-batch
    is learnt ``n_iter`` times in a row (the paper's iterations per batch), each a full
    Avalanche iteration (``before_training_iteration`` ... ``after_training_iteration``).
    Every Avalanche callback fires, in Avalanche's order: dataset adaptation, dataloader,
    model adaptation (``IncrementalClassifier`` grows) and optimizer update, then
    ``before_training_exp``, one epoch, ``after_training_exp``. Loggers see one epoch per
    experience. ``eval_every`` / ``peval_mode`` work as in Avalanche.

    The fast path: for the library's tensor experiences
    (:class:`~avalanche_gss.benchmarks.online.TensorExperience`, no transform), the
    dataloader is the experience's tensors cut into mini-batches of ``train_mb_size``, in
    order, instead of a new ``DataLoader``; model adaptation and the optimizer update
    are skipped when the model has no Avalanche ``DynamicModule`` (they would change
    nothing). ``strategy.dataloader`` and ``strategy.adapted_dataset`` are set as usual,
    so plugins that replace the dataloader (``ReplayPlugin``) take effect. When a plugin
    replaces the adapted dataset (GDumb, ...), a subclass overrides
    ``make_train_dataloader``, or the experiences are not tensor experiences, the
    template builds Avalanche's own dataloader, and says so once (a
    :class:`SlowPathWarning`).

    Pass the whole stream to one :meth:`train` call.

    :param model: the network.
    :param optimizer: its optimizer (plain SGD in the paper).
    :param criterion: training loss (mean over the batch); cross-entropy by default.
    :param n_iter: iterations per incoming batch (paper: "few iterations (1-5)"; 3 in its
        MNIST protocol).
    :param train_mb_size: largest batch learnt in one step (an experience is normally
        exactly one batch).
    :param eval_mb_size: mini-batch size for evaluation.
    :param device: where the model runs.
    :param plugins: extra plugins (the caller's list is copied, never modified).
    :param evaluator: Avalanche ``EvaluationPlugin``; an empty one (no metric, no logger)
        by default, since per-experience logging would dominate an online run.
    :param eval_every: as in Avalanche: -1 never evaluates during training, 0 after each
        experience, ``k > 0`` every ``k`` epochs (one epoch per experience) or iterations.
    :param peval_mode: ``"epoch"`` or ``"iteration"``, the unit of ``eval_every``.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: Optimizer,
        criterion: nn.Module | None = None,
        n_iter: int = 3,
        train_mb_size: int = 10,
        eval_mb_size: int = 1000,
        device: str | torch.device = "cpu",
        plugins: Sequence[BasePlugin] | None = None,
        evaluator: EvaluationPlugin | None = None,
        eval_every: int = -1,
        peval_mode: str = "epoch",
    ) -> None:
        if n_iter < 1:
            raise ValueError(f"n_iter must be >= 1, got {n_iter}")
        if train_mb_size < 1:
            raise ValueError(f"train_mb_size must be >= 1, got {train_mb_size}")
        if peval_mode not in ("epoch", "iteration"):
            raise ValueError(f"peval_mode must be 'epoch' or 'iteration', got {peval_mode!r}")
        super().__init__(
            model=model,
            optimizer=optimizer,
            criterion=criterion if criterion is not None else nn.CrossEntropyLoss(),
            train_mb_size=train_mb_size,
            train_epochs=1,
            eval_mb_size=eval_mb_size,
            device=device,
            plugins=list(plugins or []),
            evaluator=evaluator if evaluator is not None else quiet_evaluator(),
            eval_every=eval_every,
            peval_mode=peval_mode,
        )
        self.n_iter = n_iter
        self._stop_training: bool = False
        self.skipped_steps = 0  # training steps skipped for a non-finite loss
        self._hook_cache: dict[str, list[Any]] = {}
        self._label_range: tuple[int, int] | None = None  # of the current mini-batch
        self._static_model = False  # no DynamicModule: adaptation would change nothing
        self._slow_reason: str | None = None  # why the last experience took the slow path
        self._warned_slow = False

    def _hooks(self, event: str) -> list[Any]:
        """The bound callbacks of the plugins that act on ``event`` (cached per ``train``).

        Skipping Avalanche's no-op callbacks, and an ``EvaluationPlugin`` whose metrics and
        loggers ignore the event, removes most of the per-iteration overhead.
        """
        hooks = self._hook_cache.get(event)
        if hooks is None:
            hooks = [getattr(p, event) for p in self.plugins if _acts_on(p, event)]
            self._hook_cache[event] = hooks
        return hooks

    _before_train_dataset_adaptation = _fast_trigger("before_train_dataset_adaptation")
    _after_train_dataset_adaptation = _fast_trigger("after_train_dataset_adaptation")
    _before_training_epoch = _fast_trigger("before_training_epoch")
    _after_training_epoch = _fast_trigger("after_training_epoch")
    _before_training_iteration = _fast_trigger("before_training_iteration")
    _before_forward = _fast_trigger("before_forward")
    _after_forward = _fast_trigger("after_forward")
    _before_backward = _fast_trigger("before_backward")
    _after_backward = _fast_trigger("after_backward")
    _before_update = _fast_trigger("before_update")
    _after_update = _fast_trigger("after_update")
    _after_training_iteration = _fast_trigger("after_training_iteration")
    _after_training_exp = _fast_trigger("after_training_exp")

    def train(
        self,
        experiences: Any,
        eval_streams: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Learn the experiences in order (a stream, a list, or one experience).

        :param experiences: the online stream (may be lazy) or one experience.
        :param eval_streams: the streams that periodic evaluation (``eval_every``) uses.
            With ``eval_every=-1`` (the default) nothing is evaluated during training and a
            lazy stream is not walked twice; otherwise, as in Avalanche, ``None`` means
            the training experiences.
        :return: the last value of every metric, as Avalanche's ``train``.
        """
        self._hook_cache = {}  # plugins may have changed since the last call
        self._static_model = not any(isinstance(m, DynamicModule) for m in self.model.modules())
        if eval_streams is None and self.eval_every < 0:
            eval_streams = []
        return super().train(experiences, eval_streams=eval_streams, **kwargs)

    def _before_training_exp(self, **kwargs: Any) -> None:
        """Avalanche's set-up of an experience, with the fast path where it applies."""
        self._before_train_dataset_adaptation(**kwargs)
        self.train_dataset_adaptation(**kwargs)
        self._after_train_dataset_adaptation(**kwargs)
        self.make_train_dataloader(**kwargs)
        self.check_model_and_optimizer(**kwargs)
        for hook in self._hooks("before_training_exp"):
            hook(self, **kwargs)

    def train_dataset_adaptation(self, **kwargs: Any) -> None:
        """``adapted_dataset``: the experience's dataset (in its train transform group)."""
        assert self.experience is not None
        if isinstance(self.experience, TensorExperience):
            self.adapted_dataset = self.experience.dataset  # no transform: train() is a no-op
        else:
            super().train_dataset_adaptation(**kwargs)

    def make_train_dataloader(self, **kwargs: Any) -> None:
        """The experience's tensors in mini-batches, or Avalanche's ``DataLoader``."""
        experience = self.experience
        reason = None
        if not isinstance(experience, TensorExperience):
            reason = f"the experiences are {type(experience).__name__}, not tensor experiences"
        elif self.adapted_dataset is not experience.dataset:
            reason = "a plugin replaced the adapted dataset"
        elif type(self).make_train_dataloader is not OnlineTemplate.make_train_dataloader:
            reason = f"{type(self).__name__} overrides make_train_dataloader"
        if reason is not None:
            self._say_slow(reason)
            super().make_train_dataloader(**kwargs)
            return
        assert isinstance(experience, TensorExperience)
        x, y = experience.tensors
        t = torch.full_like(y, experience.task_label)
        step = self.train_mb_size
        self.dataloader = _TensorBatches(
            [x[i : i + step], y[i : i + step], t[i : i + step]] for i in range(0, len(y), step)
        )

    def _say_slow(self, reason: str) -> None:
        self._slow_reason = reason
        if not self._warned_slow:
            self._warned_slow = True
            warnings.warn(
                f"{type(self).__name__}: {reason}, so training goes through Avalanche's "
                "DataLoader (slower than the tensor path)",
                SlowPathWarning,
                stacklevel=4,
            )

    def check_model_and_optimizer(self, reset_optimizer_state: bool = False,
                                  **kwargs: Any) -> None:
        """Avalanche's model adaptation and optimizer update, skipped when they are no-ops.

        Without a ``DynamicModule`` the model cannot change between experiences, so after
        the first experience of a :meth:`train` call there is nothing to adapt or update.
        """
        if self._static_model and not reset_optimizer_state and self.optimized_param_id:
            return
        super().check_model_and_optimizer(reset_optimizer_state=reset_optimizer_state, **kwargs)

    def _unpack_minibatch(self) -> None:
        """Note a training batch's label range while it is still on the CPU, then move it."""
        if self.is_training:  # an evaluation in between keeps the training batch's range
            self._label_range = _label_range(self.mb_y)  # no device sync
        super()._unpack_minibatch()

    def forward(self) -> Any:
        """The model's output on the mini-batch, with its task labels when it has them.

        As Avalanche's ``avalanche_forward``: a ``MultiTaskModule`` gets
        ``model(x, task_labels)``, any other model ``model(x)``. Unlike Avalanche 0.6's
        template, mini-batches of online experiences (``split_online_stream``) keep their
        task labels too.
        """
        mbatch = self.mbatch
        assert mbatch is not None
        if len(mbatch) >= 3:
            return avalanche_forward(self.model, mbatch[0], mbatch[-1])
        return self.model(mbatch[0])

    def criterion(self) -> Any:
        """The training loss, after checking the labels against the model's outputs.

        :raises ValueError: with a class-index criterion (cross-entropy, NLL), a label of
            the batch is negative or not below the model's number of outputs (PyTorch would
            raise an ``IndexError``, or a device-side assert on CUDA).
        """
        if self.is_training:
            self._check_labels()
        return super().criterion()

    def _check_labels(self) -> None:
        span, out = self._label_range, self.mb_output
        if span is None or not isinstance(out, torch.Tensor) or out.dim() < 2:
            return
        if not isinstance(self._criterion, (nn.CrossEntropyLoss, nn.NLLLoss)):
            return
        low, high = span
        outputs = out.shape[1]
        if high >= outputs or (low < 0 and low != self._criterion.ignore_index):
            bad = high if high >= outputs else low
            raise ValueError(
                f"label {bad} is outside the model's {outputs} outputs (labels must be in "
                f"[0, {outputs - 1}])"
            )

    def optimizer_step(self) -> None:
        """Take the optimizer step, unless the loss is not finite (then warn and skip it).

        A NaN or infinite loss would turn every parameter into NaN; the step is skipped
        and counted in :attr:`skipped_steps` (:func:`~avalanche_gss.plugins.finite_loss`).
        """
        if finite_loss(self.loss, self):
            self.optimizer.step()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle state for Avalanche's ``save_checkpoint`` (``dill``) and ``deepcopy``.

        The optimizer is pickled by class name: ``dill`` 0.4 cannot locate
        ``torch.optim.sgd.SGD`` (``torch.optim`` deletes its submodule attributes), tries
        to pickle the class itself and fails. The hook cache is rebuilt on use.
        """
        state = self.__dict__.copy()
        state["_hook_cache"] = {}
        if isinstance(state.get("optimizer"), Optimizer):
            state["optimizer"] = _OptimizerByName(state["optimizer"])
        return state

    def __copy__(self) -> OnlineTemplate:
        """A shallow copy sharing every attribute (not routed through :meth:`__getstate__`)."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new


def _label_range(y: Any) -> tuple[int, int] | None:
    """``(min, max)`` of a batch's integer labels (read before they move to the device)."""
    if not isinstance(y, torch.Tensor) or len(y) == 0:
        return None
    if y.is_floating_point() or y.dtype == torch.bool:
        return None
    return int(y.min()), int(y.max())


def _rebuild_optimizer(module: str, qualname: str, state: dict[str, Any]) -> Optimizer:
    """Recreate a pickled optimizer from its class's import path and ``__getstate__``."""
    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    optimizer = cls.__new__(cls)
    optimizer.__setstate__(state)
    return optimizer


class _OptimizerByName:
    """Pickles as the wrapped optimizer, its class referenced by import path."""

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer

    def __reduce__(self) -> tuple[Any, ...]:
        cls = type(self.optimizer)
        return _rebuild_optimizer, (cls.__module__, cls.__qualname__, self.optimizer.__getstate__())


class OnlineRehearsal(OnlineTemplate):
    """The paper's online rehearsal with any storage policy.

    :param storage_policy: the buffer (any :class:`~avalanche_gss.storage.OnlineBuffer`
        or Avalanche ``ExemplarsBuffer``).
    :param replay_batch_size: buffer samples per replay step (10).
    :param seed: seed of the replay draws.
    :param kwargs: :class:`OnlineTemplate`'s arguments (``model``, ``optimizer``,
        ``n_iter``, ...).
    """

    def __init__(
        self,
        *,
        storage_policy: OnlineBuffer,
        replay_batch_size: int = 10,
        seed: int = 0,
        plugins: Sequence[BasePlugin] | None = None,
        **kwargs: Any,
    ) -> None:
        self.rehearsal = OnlineRehearsalPlugin(storage_policy, replay_batch_size, seed=seed)
        super().__init__(plugins=[self.rehearsal, *(plugins or [])], **kwargs)

    @property
    def storage_policy(self) -> OnlineBuffer:
        """The buffer."""
        return self.rehearsal.storage_policy  # type: ignore[return-value]


class Reservoir(OnlineRehearsal):
    """Online rehearsal with a reservoir-sampling buffer (``Reservoir``).

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param kwargs: :class:`OnlineRehearsal`'s other arguments.
    """

    def __init__(self, *, mem_size: int, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(storage_policy=ReservoirBuffer(mem_size, seed=seed), seed=seed, **kwargs)


class Rand(OnlineRehearsal):
    """Online rehearsal with the paper's ``Rand`` buffer.

    :param mem_size: buffer size ``M``.
    :param seed: seed of the buffer and of the replay draws.
    :param kwargs: :class:`OnlineRehearsal`'s other arguments.
    """

    def __init__(self, *, mem_size: int, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(storage_policy=RandBuffer(mem_size, seed=seed), seed=seed, **kwargs)


class GSSGreedy(OnlineRehearsal):
    """Online rehearsal with the ``GSS-Greedy`` buffer (paper Algorithm 2).

    :param mem_size: buffer size ``M``.
    :param n: buffer gradients each new sample is compared with (paper ``n``, 10).
    :param variant: ``"authors"`` (default: the authors' code, which reproduces the paper's
        published numbers) or ``"paper"`` (Algorithm 2 as written); see
        :class:`~avalanche_gss.storage.GSSGreedyBuffer`.
    :param seed: seed of the buffer and of the replay draws.
    :param kwargs: :class:`OnlineRehearsal`'s other arguments.
    """

    def __init__(
        self, *, mem_size: int, n: int = 10, variant: Variant = "authors", seed: int = 0,
        **kwargs: Any,
    ) -> None:
        buffer = GSSGreedyBuffer(mem_size, n=n, variant=variant, seed=seed)
        super().__init__(storage_policy=buffer, seed=seed, **kwargs)


class GSSIQP(OnlineRehearsal):
    """Online rehearsal with the ``GSS-IQP`` buffer (paper Algorithm 1).

    :param mem_size: buffer size ``M``.
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param solver: ``"fast"`` or ``"exact"`` (see :class:`~avalanche_gss.storage.GSSIQPBuffer`).
    :param time_limit: the exact solver's time limit per selection, in seconds.
    :param seed: seed of the buffer and of the replay draws.
    :param kwargs: :class:`OnlineRehearsal`'s other arguments.
    """

    def __init__(
        self, *, mem_size: int, recent_size: int = 100, solver: IQPSolver = "fast",
        time_limit: float = 60.0, seed: int = 0, **kwargs: Any,
    ) -> None:
        buffer = GSSIQPBuffer(mem_size, recent_size=recent_size, solver=solver,
                              time_limit=time_limit, seed=seed)
        super().__init__(storage_policy=buffer, seed=seed, **kwargs)


class GSSClust(OnlineRehearsal):
    """Online rehearsal with the ``GSS-Clust`` buffer (doubling clustering of gradients).

    :param mem_size: buffer size ``M``.
    :param variant: ``"authors"`` (default: threshold x1.01 per round, which reproduces the
        paper's published numbers) or ``"paper"`` (doubling); see
        :class:`~avalanche_gss.storage.GSSClustBuffer`.
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param growth: threshold factor per merge round; ``None``: by ``variant``.
    :param seed: seed of the buffer and of the replay draws.
    :param kwargs: :class:`OnlineRehearsal`'s other arguments.
    """

    def __init__(
        self, *, mem_size: int, variant: Variant = "authors", recent_size: int = 100,
        growth: float | None = None, seed: int = 0, **kwargs: Any,
    ) -> None:
        buffer = GSSClustBuffer(mem_size, variant=variant, recent_size=recent_size,
                                growth=growth, seed=seed)
        super().__init__(storage_policy=buffer, seed=seed, **kwargs)


class FSSClust(OnlineRehearsal):
    """Online rehearsal with the ``FSS-Clust`` buffer (doubling clustering of features).

    :param mem_size: buffer size ``M``.
    :param variant: ``"authors"`` (default: squared distances between logits, which
        reproduces the paper's published numbers) or ``"paper"`` (Euclidean distances
        between penultimate features); see :class:`~avalanche_gss.storage.FSSClustBuffer`.
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param features: ``"penultimate"`` or ``"logits"``; ``None``: by ``variant``.
    :param squared: squared Euclidean distances; ``None``: by ``variant``.
    :param growth: threshold factor per merge round (2: doubling).
    :param seed: seed of the buffer and of the replay draws.
    :param kwargs: :class:`OnlineRehearsal`'s other arguments.
    """

    def __init__(
        self, *, mem_size: int, variant: Variant = "authors", recent_size: int = 100,
        features: ClustFeatures | None = None, squared: bool | None = None,
        growth: float = 2.0, seed: int = 0, **kwargs: Any,
    ) -> None:
        buffer = FSSClustBuffer(mem_size, variant=variant, recent_size=recent_size,
                                features=features, squared=squared, growth=growth, seed=seed)
        super().__init__(storage_policy=buffer, seed=seed, **kwargs)


class GSSIQPConstrained(OnlineTemplate):
    """``GSS-IQP (Constrained)`` (appendix C): a GSS-IQP buffer used as GEM constraints.

    Each step on the incoming batch is projected by
    :class:`~avalanche_gss.plugins.ConstrainedUpdatePlugin` so that it increases the loss
    of no buffer sample; no replay step is taken. The buffer is updated after each batch
    by Algorithm 1, as in :class:`GSSIQP`.

    :param mem_size: buffer size ``M``.
    :param recent_size: recent buffer size ``M_r`` (the authors' 100).
    :param solver: ``"fast"`` or ``"exact"`` IQP solver.
    :param margin: GEM's ``memory_strength`` (lower bound of the dual variables; 0: the
        plain projection, see :class:`~avalanche_gss.plugins.ConstrainedUpdatePlugin`).
    :param seed: seed of the buffer.
    :param plugins: extra plugins (the caller's list is copied, never modified).
    :param kwargs: :class:`OnlineTemplate`'s other arguments (``model``, ``optimizer``,
        ``n_iter``, ...).
    """

    def __init__(
        self, *, mem_size: int, recent_size: int = 100, solver: IQPSolver = "fast",
        margin: float = 0.0, seed: int = 0, plugins: Sequence[BasePlugin] | None = None,
        **kwargs: Any,
    ) -> None:
        buffer = GSSIQPBuffer(mem_size, recent_size=recent_size, solver=solver, seed=seed)
        self.constrained = ConstrainedUpdatePlugin(buffer, margin=margin)
        super().__init__(plugins=[self.constrained, *(plugins or [])], **kwargs)

    @property
    def storage_policy(self) -> GSSIQPBuffer:
        """The buffer."""
        return self.constrained.storage_policy  # type: ignore[return-value]
