"""The online template: Avalanche's ``SupervisedTemplate`` on a stream of small experiences.

:class:`OnlineTemplate` treats each experience as one incoming batch and learns it
``n_iter`` times, firing every Avalanche callback; the per-experience work that makes
Avalanche slow on 10-sample experiences (a new ``DataLoader``, model adaptation and an
optimizer update that change nothing) is skipped where it is a no-op.

The fast path: for the library's tensor experiences
(:class:`~avalanche_gss.streams.online.TensorExperience`, no transform), the dataloader
is the experience's tensors cut into mini-batches of ``train_mb_size`` (``eval_mb_size``
in evaluation), in order, instead of a new ``DataLoader``; model adaptation and the
optimizer update are skipped when the model has no Avalanche ``DynamicModule`` (they would
change nothing).
``strategy.dataloader`` and ``strategy.adapted_dataset`` are set as usual, so plugins that
replace the dataloader (``ReplayPlugin``) take effect. When a plugin replaces the adapted
dataset (GDumb, ...), a subclass overrides ``make_train_dataloader``, or the experiences
are not tensor experiences, the template builds Avalanche's own dataloader, and says so
once (a :class:`SlowPathWarning`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from avalanche.core import BasePlugin
from avalanche.models import DynamicModule, avalanche_forward
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.templates import SupervisedTemplate
from avalanche.training.templates.strategy_mixin_protocol import SGDStrategyProtocol
from torch import Tensor, nn
from torch.optim import Optimizer

from avalanche_gss._avalanche import criterion_of
from avalanche_gss.streams.online import TensorExperience
from avalanche_gss.training.finite import finite_loss
from avalanche_gss.training.hooks import FastHooks
from avalanche_gss.training.pickling import PicklableStrategy

__all__ = ["quiet_evaluator", "RepeatedBatchMixin", "OnlineTemplate", "SlowPathWarning"]


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


class RepeatedBatchMixin(SGDStrategyProtocol[Any, Any, Any]):
    """Learn every mini-batch ``n_iter`` times in a row (the paper's iterations per batch).

    Mix it in before an Avalanche ``SupervisedTemplate`` subclass (``class
    MyGEM(RepeatedBatchMixin, GEM)``) and set ``self.n_iter``: Avalanche's own training
    epoch then sees each mini-batch ``n_iter`` times, each a full iteration with every
    plugin callback. ``stop_training()`` takes effect at the next iteration, and a
    periodic evaluation between two iterations of a batch does not lose the batch. The
    paper treats ``n_iter`` as a hyper-parameter of GEM and iCaRL too. The template's
    attributes it uses are typed by Avalanche's ``SGDStrategyProtocol``.
    """

    n_iter: int = 1

    def training_epoch(self, **kwargs: Any) -> None:
        """Avalanche's training epoch over the mini-batches, each repeated ``n_iter`` times."""
        loader = self.dataloader
        self.dataloader: Iterable[Any] = self._batches(loader)
        try:
            super().training_epoch(**kwargs)
        finally:
            self.dataloader = loader

    def _batches(self, loader: Any) -> Iterator[Any]:
        """Each mini-batch of ``loader``, ``n_iter`` times (one list, moved once)."""
        for batch in loader:
            batch = list(batch) if isinstance(batch, tuple) else batch
            for _ in range(self.n_iter):
                yield batch


class SlowPathWarning(UserWarning):
    """:class:`OnlineTemplate` trains through Avalanche's ``DataLoader`` path (said once)."""


class _TensorBatches(list[list[Tensor]]):
    """An experience's tensors cut into ``[x, y, t]`` mini-batches: the fast path's loader."""


class _EvalBatches:
    """A test experience's tensors in ``[x, y, t]`` mini-batches: the evaluation's loader.

    The batches hold ``size`` samples and are copied one at a time, as they are read, as
    a ``DataLoader``'s collation copies them: a view into the middle of the tensors may sit
    at another alignment, and kernels may then sum in another order.
    Only the batch being evaluated is held, as with a ``DataLoader``.
    """

    def __init__(self, x: Tensor, y: Tensor, task_label: int, size: int) -> None:
        self.x, self.y, self.task_label, self.size = x, y, task_label, size

    def __len__(self) -> int:
        return -(-len(self.y) // self.size)

    def __iter__(self) -> Iterator[list[Tensor]]:
        for i in range(0, len(self.y), self.size):
            y = self.y[i : i + self.size].clone()
            yield [self.x[i : i + self.size].clone(), y, torch.full_like(y, self.task_label)]


def check_labels(span: tuple[int, int] | None, out: Any, loss: Any) -> None:
    """Refuse class-index labels (``span``: their min and max) outside ``out``'s outputs.

    :param span: the batch's smallest and largest label, or ``None`` (not class indices).
    :param out: the model's output on the batch.
    :param loss: the criterion; only cross-entropy and NLL take class indices.
    :raises ValueError: a label is negative (not the ignore index) or not below the outputs.
    """
    if span is None or not isinstance(out, torch.Tensor) or out.dim() < 2:
        return
    if not isinstance(loss, (nn.CrossEntropyLoss, nn.NLLLoss)):
        return
    low, high = span
    outputs = out.shape[1]
    if high >= outputs or (low < 0 and low != loss.ignore_index):
        bad = high if high >= outputs else low
        raise ValueError(f"label {bad} is outside the model's {outputs} outputs (labels must "
                         f"be in [0, {outputs - 1}])")


def _label_range(y: Any) -> tuple[int, int] | None:
    """``(min, max)`` of a batch's integer labels (read before they move to the device)."""
    if not isinstance(y, torch.Tensor) or len(y) == 0:
        return None
    if y.is_floating_point() or y.dtype == torch.bool:
        return None
    return int(y.min()), int(y.max())


class OnlineTemplate(FastHooks, PicklableStrategy, RepeatedBatchMixin, SupervisedTemplate):
    """Online learning on a stream of small experiences: each one is an incoming batch.

    A ``SupervisedTemplate`` whose every experience is one epoch in which each mini-batch
    is learnt ``n_iter`` times in a row (the paper's iterations per batch), each a full
    Avalanche iteration (``before_training_iteration`` ... ``after_training_iteration``).
    Every Avalanche callback fires, in Avalanche's order. Loggers see one epoch per
    experience. ``eval_every`` / ``peval_mode`` work as in Avalanche.

    It takes the fast path of this module's docstring where it can. A step whose loss is
    not finite is skipped and counted in ``skipped_steps``. A plugin may add losses to the
    step in ``before_backward`` by appending them to ``joint_losses``: one backward pass
    learns their sum with the loss, which stays the incoming batch's own (as
    :class:`~avalanche_gss.training.OnlineRehearsalPlugin` with ``joint=True`` does).
    Pass the whole stream to one :meth:`train` call.

    :param model: the network.
    :param optimizer: its optimizer (plain SGD in the paper).
    :param criterion: training loss (mean over the batch); cross-entropy by default.
    :param n_iter: iterations per incoming batch (paper: 1-5; 3 in its MNIST protocol).
    :param train_mb_size: largest batch learnt in one step (normally the experience).
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
        self, *, model: nn.Module, optimizer: Optimizer, criterion: nn.Module | None = None,
        n_iter: int = 3, train_mb_size: int = 10, eval_mb_size: int = 1000,
        device: str | torch.device = "cpu", plugins: Sequence[BasePlugin] | None = None,
        evaluator: EvaluationPlugin | None = None, eval_every: int = -1,
        peval_mode: str = "epoch",
    ) -> None:
        if n_iter < 1:
            raise ValueError(f"n_iter must be >= 1, got {n_iter}")
        if train_mb_size < 1:
            raise ValueError(f"train_mb_size must be >= 1, got {train_mb_size}")
        if peval_mode not in ("epoch", "iteration"):
            raise ValueError(f"peval_mode must be 'epoch' or 'iteration', got {peval_mode!r}")
        super().__init__(
            model=model, optimizer=optimizer,
            criterion=criterion if criterion is not None else nn.CrossEntropyLoss(),
            train_mb_size=train_mb_size, train_epochs=1, eval_mb_size=eval_mb_size,
            device=device, plugins=list(plugins or []),
            evaluator=evaluator if evaluator is not None else quiet_evaluator(),
            eval_every=eval_every, peval_mode=peval_mode,
        )
        self.n_iter = n_iter
        self.skipped_steps = 0  # training steps skipped for a non-finite loss
        self.joint_losses: list[Tensor] = []  # learnt in this step's backward (see backward)
        self._static_model = False  # no DynamicModule: adaptation would change nothing
        self._slow_reason: str | None = None  # why the last experience took the slow path
        self._reset_hooks()

    def train(self, experiences: Any, eval_streams: Sequence[Any] | None = None,
              **kwargs: Any) -> Any:
        """Learn the experiences in order (a stream, a list, or one experience).

        :param experiences: the online stream (may be lazy) or one experience.
        :param eval_streams: the streams periodic evaluation (``eval_every``) uses; ``None``
            is, as in Avalanche, the training experiences, except with ``eval_every=-1``.
        :return: the last value of every metric, as Avalanche's ``train``.
        """
        self._reset_hooks()  # plugins may have changed since the last call
        self._static_model = not any(isinstance(m, DynamicModule) for m in self.model.modules())
        if eval_streams is None and self.eval_every < 0:
            eval_streams = []
        return super().train(experiences, eval_streams=eval_streams, **kwargs)

    def check_model_and_optimizer(self, reset_optimizer_state: bool = False,
                                  **kwargs: Any) -> None:
        """Avalanche's model adaptation and optimizer update, unless they are no-ops."""
        if self._static_model and not reset_optimizer_state and self.optimized_param_id:
            return
        super().check_model_and_optimizer(reset_optimizer_state=reset_optimizer_state, **kwargs)

    def forward(self) -> Any:
        """The model's output (``avalanche_forward``: task labels to a ``MultiTaskModule``)."""
        mbatch = self.mbatch
        assert mbatch is not None
        if len(mbatch) >= 3:
            return avalanche_forward(self.model, mbatch[0], mbatch[-1])
        return self.model(mbatch[0])

    def backward(self) -> None:
        """The backward pass of the loss and of the :attr:`joint_losses`, in one pass.

        The gradients are those of ``loss + sum(joint_losses)``; ``loss`` itself (what
        metrics and the finite-loss check read) is left as it is. The list is emptied.
        """
        extra = self.joint_losses
        if not extra:
            super().backward()
            return
        self.joint_losses = []
        torch.autograd.backward([self.loss, *extra], retain_graph=self.retain_graph)

    def optimizer_step(self) -> None:
        """Take the optimizer step, unless the loss is not finite (then warn and skip it)."""
        if finite_loss(self.loss, self):
            self.optimizer.step()

    # The fast data path (see the class's docstring).

    @property
    def adapted_dataset(self) -> Any:
        """The dataset of this experience's training, as in Avalanche.

        On the fast path it is the tensor experience's own dataset, built when it is first
        read (a plugin may read it, or replace it as in Avalanche).
        """
        if self.__dict__.get("_adapted_is_experience"):
            return self.experience.dataset
        return self.__dict__.get("_adapted_dataset")

    @adapted_dataset.setter
    def adapted_dataset(self, value: Any) -> None:
        self.__dict__["_adapted_is_experience"] = False
        self.__dict__["_adapted_dataset"] = value

    def _tensor_adaptation(self) -> bool:
        """For a tensor experience, make its own dataset ``adapted_dataset`` (built if read).

        It has no transform, so switching its transform group (Avalanche's ``train()`` or
        ``eval()``) would be a no-op. Returns whether the experience is one.
        """
        if not isinstance(self.experience, TensorExperience):
            return False
        self.adapted_dataset = None
        self.__dict__["_adapted_is_experience"] = True
        return True

    def _slow_path(self, loader: str) -> str | None:
        """Why this experience's loader must be Avalanche's ``DataLoader``; ``None``: it need not.

        :param loader: the method that builds it, ``"make_train_dataloader"`` or
            ``"make_eval_dataloader"`` (a subclass overriding it keeps Avalanche's).
        """
        experience = self.experience
        if not isinstance(experience, TensorExperience):
            return f"the experiences are {type(experience).__name__}, not tensor experiences"
        if not (self.__dict__.get("_adapted_is_experience")
                or self.adapted_dataset is experience.dataset):
            return "a plugin replaced the adapted dataset"
        if getattr(type(self), loader) is not getattr(OnlineTemplate, loader):
            return f"{type(self).__name__} overrides {loader}"
        return None

    def train_dataset_adaptation(self, **kwargs: Any) -> None:
        """``adapted_dataset``: the experience's dataset (in its train transform group)."""
        if not self._tensor_adaptation():
            super().train_dataset_adaptation(**kwargs)

    def make_train_dataloader(self, **kwargs: Any) -> None:
        """The experience's tensors in mini-batches, or Avalanche's ``DataLoader``."""
        reason = self._slow_path("make_train_dataloader")
        if reason is not None:
            self._slow_reason = reason
            if not getattr(self, "_warned_slow", False):
                self._warned_slow = True
                warnings.warn(f"{type(self).__name__}: {reason}, so training goes through "
                              "Avalanche's DataLoader (slower than the tensor path)",
                              SlowPathWarning, stacklevel=3)
            super().make_train_dataloader(**kwargs)
            return
        experience = self.experience
        assert isinstance(experience, TensorExperience)
        x, y = experience.tensors
        t = torch.full_like(y, experience.task_label)
        step = self.train_mb_size
        self.dataloader = _TensorBatches(
            [x[i : i + step], y[i : i + step], t[i : i + step]] for i in range(0, len(y), step)
        )

    def eval_dataset_adaptation(self, **kwargs: Any) -> None:
        """``adapted_dataset``: the experience's dataset (in its eval transform group)."""
        if not self._tensor_adaptation():
            super().eval_dataset_adaptation(**kwargs)

    def make_eval_dataloader(self, **kwargs: Any) -> None:
        """The experience's tensors in mini-batches of ``eval_mb_size``, or Avalanche's.

        The batches are those Avalanche's ``DataLoader`` makes (the samples in order, with
        their task label), without its per-sample reads. Avalanche's own loader is built
        where training's would be (:meth:`_slow_path`), without a warning: evaluation is
        not what the tensor path is for.
        """
        if self._slow_path("make_eval_dataloader") is not None:
            super().make_eval_dataloader(**kwargs)
            return
        experience = self.experience
        assert isinstance(experience, TensorExperience)
        x, y = experience.tensors
        self.dataloader = _EvalBatches(x, y, experience.task_label, self.eval_mb_size)

    # Class-index labels checked against the model's outputs, with no device sync.

    _label_range: tuple[int, int] | None = None  # of the current training mini-batch

    def _batches(self, loader: Any) -> Iterator[Any]:
        def noted() -> Iterator[Any]:
            for batch in loader:
                batch = list(batch) if isinstance(batch, tuple) else batch
                y = batch[1] if isinstance(batch, list) and len(batch) > 1 else None
                self._label_range = _label_range(y)  # read on the CPU, before the move
                yield batch

        return super()._batches(noted())

    def criterion(self) -> Any:
        """The training loss, after checking the labels against the model's outputs.

        :raises ValueError: with a class-index criterion (cross-entropy, NLL), a label of
            the batch is negative or not below the model's number of outputs (PyTorch would
            raise an ``IndexError``, or a device-side assert on CUDA).
        """
        if self.is_training:
            check_labels(self._label_range, self.mb_output, criterion_of(self))
        return super().criterion()
