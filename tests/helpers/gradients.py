"""The gradient engine's tests' oracle (a float64 loop of per-sample ``autograd.grad``) and
the models the engine is checked on.

Tolerances: the engine runs in float32 and the reference in float64, so Gram matrices must
agree to ``1e-4`` relative to the reference's largest entry (``RTOL``) and cosines, whose
scale is 1, to ``1e-4`` absolute. Float32 round-off is ~1e-7 here, so a wrong term (a missed
bias, a mis-ordered patch, a batch-coupled BatchNorm) fails by orders of magnitude.
"""

from __future__ import annotations

import copy
import types

import torch
from avalanche.models import MTSimpleMLP, MultiTaskModule
from avalanche.models.dynamic_modules import avalanche_model_adaptation
from torch import Tensor, nn
from torch.nn import functional as F

from avalanche_gss.gradients import (
    per_sample_grad_loop,
    sample_gram,
)

RTOL = 1e-4  # Gram: relative to the reference's largest |entry|; cosines: absolute


def reference_grads(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    names: list[str] | None = None,
    task_labels: Tensor | None = None,
) -> Tensor:
    """Per-sample gradients (N, P) of a float64 copy of ``model`` by the loop oracle.

    With ``task_labels``, sample i is run alone as ``model(x[i:i+1], task_labels[i:i+1])``,
    with float64 as the default dtype (Avalanche's ``MultiTaskModule.forward`` writes the
    heads' outputs into a ``torch.zeros`` of the default dtype).
    """
    ref = copy.deepcopy(model).double()
    named = dict(ref.named_parameters())
    params = None if names is None else [named[n] for n in names]
    xd = x.double() if x.is_floating_point() else x
    if task_labels is None:
        return per_sample_grad_loop(ref, xd, y, params=params)  # (N, P)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return per_sample_grad_loop(ref, xd, y, params=params, task_labels=task_labels)
    finally:
        torch.set_default_dtype(default)


def assert_gram_close(gram: Tensor, ref_grads: Tensor) -> None:
    ref = ref_grads @ ref_grads.T  # (N, N)
    assert gram.shape == ref.shape
    scale = ref.abs().max().item()
    assert scale > 0, "degenerate reference: every gradient is zero"
    torch.testing.assert_close(gram.double(), ref, rtol=RTOL, atol=RTOL * scale)


def assert_each_parameter_close(
    model: nn.Module, x: Tensor, y: Tensor, task_labels: Tensor | None = None
) -> None:
    """Compare the Gram of every parameter on its own, so no layer hides behind another."""
    ref = reference_grads(model, x, y, task_labels=task_labels)  # (N, P)
    start = 0
    for name, p in model.named_parameters():
        block = ref[:, start : start + p.numel()]  # (N, p.numel())
        start += p.numel()
        try:
            assert_gram_close(sample_gram(model, x, y, params=[p], task_labels=task_labels), block)
        except AssertionError as err:
            raise AssertionError(f"parameter {name}") from err
    assert start == ref.shape[1]


def cosines(grads: Tensor) -> Tensor:
    unit = grads / grads.norm(dim=1, keepdim=True)  # (N, P)
    return unit @ unit.T  # (N, N)


def set_bn_stats(model: nn.Module) -> None:
    """Give every BatchNorm non-trivial running statistics and affine parameters."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            assert m.running_mean is not None and m.running_var is not None
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
            m.eps = 0.1  # large enough that dropping it would show


class SmallCNN(nn.Module):
    """Conv (stride 2, padding 1) + BN + conv with bias + BN + linear, for 3x8x8 inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False)  # 8x8 -> 4x4
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 16, 3, stride=2, padding=1)  # 4x4 -> 2x2
        self.bn2 = nn.BatchNorm2d(16)
        self.classifier = nn.Linear(16 * 4, 5)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return self.classifier(out.flatten(1))


class OddConvs(nn.Module):
    """Convolutions the closed form must unfold right: Conv1d, 'same' with an even kernel
    (asymmetric padding), reflect padding, dilation, groups; a Linear on a sequence; and
    modules called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.c1d = nn.Conv1d(2, 4, 3, stride=2, padding=1)
        self.same = nn.Conv2d(1, 4, 2, padding="same")
        self.reflect = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")  # called twice
        self.dilated = nn.Conv2d(4, 6, 3, padding=2, dilation=2)
        self.grouped = nn.Conv2d(6, 6, 3, padding=1, groups=3)
        self.shared = nn.Linear(6, 6)  # called twice
        self.tokenwise = nn.Linear(4, 4)  # on (N, T, 4): a sum over T positions
        self.head = nn.Linear(6 + 4, 3)

    def forward(self, x: Tensor) -> Tensor:
        seq = F.relu(self.c1d(x.flatten(2)))  # (N, 4, 18)
        seq = torch.tanh(self.tokenwise(seq.transpose(1, 2))).transpose(1, 2)  # (N, 4, 18)
        img = F.relu(self.same(x[:, :1]))  # (N, 4, 6, 6)
        img = F.relu(self.reflect(F.relu(self.reflect(img))))  # a conv called twice
        img = self.grouped(F.relu(self.dilated(img)))  # (N, 6, 6, 6)
        img = F.relu(img.permute(0, 2, 3, 1))  # (N, 6, 6, 6): a strided output gradient
        pooled = img.mean(dim=(1, 2))  # (N, 6)
        pooled = torch.tanh(self.shared(torch.tanh(self.shared(pooled))))
        return self.head(torch.cat([pooled, seq.mean(dim=2)], dim=1))


class NeedsFallback(nn.Module):
    """LayerNorm, a raw parameter in a custom module and a tied weight: no closed form."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.norm = nn.LayerNorm(8)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 8))
        self.out = nn.Linear(8, 8)
        self.tied = nn.Linear(8, 8, bias=False)
        self.tied.weight = self.out.weight

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(torch.tanh(self.fc(x))) * self.scale
        return self.tied(torch.tanh(self.out(h)))


TASK_CLASSES = {0: [0, 1, 2], 1: [0, 1, 2, 3], 2: [1, 2]}  # heads of 3, 4 and 3 units


# 10 samples of the three tasks, interleaved, with targets among each task's classes
MIXED_TASKS = torch.tensor([2, 0, 1, 1, 0, 2, 1, 0, 2, 1])


MIXED_TARGETS = torch.tensor([1, 0, 3, 0, 2, 2, 1, 1, 1, 2])


def mt_simple_mlp() -> MTSimpleMLP:
    """Avalanche's MTSimpleMLP (20 -> 16 -> heads) with heads for tasks 0, 1 and 2."""
    torch.manual_seed(20)
    model = MTSimpleMLP(input_size=20, hidden_size=16)
    for task, classes in TASK_CLASSES.items():  # as a strategy adapts it to each experience
        experience = types.SimpleNamespace(classes_in_this_experience=classes, task_labels=[task])
        avalanche_model_adaptation(model, experience)
    assert sorted(model.classifier.classifiers) == ["0", "1", "2"]
    return model


class MultiHeadConvNet(MultiTaskModule):
    """Avalanche multi-task module: a shared conv + BN trunk, then per task a strided conv,
    a BN and a linear head, then a shared Linear called twice, for 2x6x6 inputs (optionally
    a LayerNorm, which has no closed form, between trunk and heads)."""

    def __init__(self, layer_norm: bool = False) -> None:
        super().__init__()
        self.max_class_label = 4  # MultiTaskModule.forward's output width
        self.trunk = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.norm = nn.LayerNorm([4, 6, 6]) if layer_norm else nn.Identity()
        self.heads = nn.ModuleDict(
            {
                str(task): nn.Sequential(
                    nn.Conv2d(4, 3, 3, stride=2),  # 6x6 -> 2x2
                    nn.BatchNorm2d(3),
                    nn.ReLU(),
                    nn.Flatten(),
                    nn.Linear(3 * 2 * 2, 4),
                )
                for task in TASK_CLASSES
            }
        )
        self.mix = nn.Linear(4, 4)

    def forward_single_task(self, x: Tensor, task_label: int) -> Tensor:
        logits = self.heads[str(task_label)](self.norm(self.trunk(x)))
        return self.mix(torch.tanh(self.mix(logits)))  # two calls per task group


class RowwiseMultiHead(nn.Module):
    """A task-aware model that vmap can batch: a LayerNorm (no closed form), a Linear run on
    one row at a time (calls on part of a task group, which the hooks must not use), and a
    head picked with the label of the call's task (one task per call)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(6)
        self.rowwise = nn.Linear(6, 8)
        self.heads = nn.ModuleList([nn.Linear(8, 4) for _ in TASK_CLASSES])

    def forward(self, x: Tensor, task_labels: Tensor) -> Tensor:
        h = self.norm(x)
        h = torch.tanh(torch.cat([self.rowwise(h[i : i + 1]) for i in range(h.shape[0])]))
        return self.heads[int(task_labels[0])](h)
