"""The paper's networks: the MLP for MNIST and GEM's reduced ResNet-18 for CIFAR-10.

Both expose ``features(x)`` (the representation before the classifier, used by FSS-Clust)
and ``classifier`` (the last ``nn.Linear``), so every selector can reach either part.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["MLP", "ReducedResNet18", "mlp_for", "make_model"]


class MLP(nn.Module):
    """Fully connected ReLU network, 784-100-100-10 in the paper (GEM's MNIST model).

    Weights are Xavier-uniform and biases zero, as in the authors' ``model/common.py``.

    :param input_size: number of input features; images are flattened first.
    :param hidden_sizes: widths of the hidden layers.
    :param num_classes: number of outputs (a single shared head).
    """

    def __init__(
        self,
        input_size: int = 784,
        hidden_sizes: tuple[int, ...] = (100, 100),
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        if input_size < 1 or num_classes < 1 or any(h < 1 for h in hidden_sizes):
            raise ValueError("MLP sizes must be positive integers")
        layers: list[nn.Module] = []
        width = input_size
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.classifier = nn.Linear(width, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Return the last hidden layer's activations, shape ``(N, hidden_sizes[-1])``."""
        return self.body(x.flatten(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the logits, shape ``(N, num_classes)``."""
        return self.classifier(self.features(x))


class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ReducedResNet18(nn.Module):
    """GEM's "reduced" ResNet-18 (``nf=20``), the CIFAR-10 model of the paper and its code.

    Four stages of two basic blocks with ``nf, 2nf, 4nf, 8nf`` channels, 4x4 average
    pooling and a linear head; expects ``(N, 3, 32, 32)`` inputs (flattened inputs of
    3072 features are reshaped, as the authors' data are stored flat).

    :param num_classes: number of outputs (shared head).
    :param nf: width of the first stage (20 in GEM and the authors' code).
    :param in_channels: image channels.
    :param image_size: side of the square input images.
    """

    def __init__(
        self, num_classes: int = 10, nf: int = 20, in_channels: int = 3, image_size: int = 32
    ) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.image_size = image_size
        self.conv1 = nn.Conv2d(in_channels, nf, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(nf)
        stages: list[nn.Module] = []
        in_planes = nf
        for mult, stride in ((1, 1), (2, 2), (4, 2), (8, 2)):
            planes = nf * mult
            stages += [_BasicBlock(in_planes, planes, stride), _BasicBlock(planes, planes, 1)]
            in_planes = planes
        self.layers = nn.Sequential(*stages)
        self.classifier = nn.Linear(in_planes, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Return the pooled representation before the classifier, shape ``(N, 8 * nf)``."""
        if x.dim() == 2:
            x = x.view(-1, self.in_channels, self.image_size, self.image_size)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.adaptive_avg_pool2d(out, 1)
        return out.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the logits, shape ``(N, num_classes)``."""
        return self.classifier(self.features(x))


def mlp_for(input_shape: tuple[int, ...], num_classes: int) -> MLP:
    """The paper's MNIST MLP (two hidden layers of 100) sized for ``input_shape``."""
    size = 1
    for dim in input_shape:
        size *= dim
    return MLP(size, (100, 100), num_classes)


def make_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Build a model by name: ``"mlp"`` or ``"resnet18"`` (the reduced ResNet-18).

    :param name: ``"mlp"`` or ``"resnet18"``.
    :param input_shape: shape of one sample, without the batch dimension.
    :param num_classes: number of outputs.
    """
    if name == "mlp":
        return mlp_for(input_shape, num_classes)
    if name == "resnet18":
        if len(input_shape) != 3:
            raise ValueError(f"resnet18 needs (C, H, W) inputs, got shape {input_shape}")
        return ReducedResNet18(num_classes, in_channels=input_shape[0], image_size=input_shape[1])
    raise ValueError(f"unknown model {name!r}; choose 'mlp' or 'resnet18'")
