"""The start of a run: its device, its forked random state, its network and its optimizer.

:func:`~avalanche_gss.reproduce.runs.training.run` and
:func:`~avalanche_gss.reproduce.runs.evaluation.run_curve`
must start the same settings from the same network and draw the same random numbers
while training, so that a curve's last point equals the run's result. Both use these
helpers:

* :func:`seeded_rng`: a block under torch's CPU generator seeded with a run's seed, in a
  forked state (the caller's random stream is neither read nor shifted);
* :func:`seeded_model_and_optimizer`: the network of ``settings.model`` initialised under
  ``seeded_rng(settings.seed)``, and plain SGD over its parameters at ``settings.lr``.

:func:`resolve_device` turns a device name into the one a run trains on. It needs torch
only, so that a command line can refuse a device before it loads Avalanche.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from avalanche_gss.models import make_model

if TYPE_CHECKING:
    from avalanche_gss.streams import TaskSplit

__all__ = ["SeededSettings", "resolve_device", "seeded_rng", "seeded_model_and_optimizer"]


class SeededSettings(Protocol):
    """What :func:`seeded_model_and_optimizer` reads of a run's settings.

    A :class:`~avalanche_gss.reproduce.runs.training.RunSettings` has it.
    """

    @property
    def model(self) -> str:
        """The network's name (``"mlp"``, ``"resnet18"``)."""

    @property
    def seed(self) -> int:
        """The run's seed."""

    @property
    def lr(self) -> float:
        """The SGD learning rate."""


@contextmanager
def seeded_rng(seed: int) -> Iterator[None]:
    """Run the ``with`` block with torch's CPU generator seeded with ``seed``.

    The generator's state is forked (``torch.random.fork_rng(devices=[])``): the block
    starts from ``seed`` whatever was drawn before, and the caller's state is restored
    when the block ends (also on an exception). CUDA generators are not touched.

    :param seed: the seed of the block's draws.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def seeded_model_and_optimizer(settings: SeededSettings, split: TaskSplit
                               ) -> tuple[nn.Module, torch.optim.SGD]:
    """Build a run's network, initialised from its seed, and its SGD optimizer.

    The network is :func:`~avalanche_gss.models.make_model` of ``settings.model`` for the
    split's input shape and classes, created under :func:`seeded_rng` with
    ``settings.seed`` (the same settings give the same initial weights, and the caller's
    random state is left as it was); the optimizer is ``torch.optim.SGD`` at
    ``settings.lr`` (no momentum, no weight decay).

    :param settings: the run's settings (``model``, ``seed`` and ``lr`` are read).
    :param split: the task sequence (``input_shape`` and ``num_classes`` are read).
    :return: ``(model, optimizer)``, the model on the CPU.
    """
    with seeded_rng(settings.seed):
        model = make_model(settings.model, split.input_shape, split.num_classes)
    return model, torch.optim.SGD(model.parameters(), lr=settings.lr)


def resolve_device(device: str) -> str:
    """Return the device a run trains on: ``"auto"`` is ``"cuda"`` when CUDA is present.

    :param device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    :raises ValueError: another name, or a CUDA device on a machine without it.
    """
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but this machine has no CUDA "
                             "device; use auto or cpu")
        index = int(device[5:]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
        return device
    raise ValueError(f"unknown device {device!r}; choose auto, cpu, cuda or cuda:N")
