"""The paper's networks: sizes, shapes, initialisation and the by-name factory."""

import math

import pytest
import torch
from torch import nn

from avalanche_gss.models import MLP, ReducedResNet18, make_model, mlp_for


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def resnet_params(num_classes: int, nf: int, in_channels: int) -> int:
    """Parameter count of the documented architecture, written out independently."""
    def block(cin: int, cout: int, stride: int) -> int:
        count = cin * cout * 9 + 2 * cout + cout * cout * 9 + 2 * cout  # two 3x3 convs + BN
        if stride != 1 or cin != cout:
            count += cin * cout + 2 * cout  # 1x1 projection shortcut + BN
        return count

    total = in_channels * nf * 9 + 2 * nf  # stem conv (no bias) + BN
    cin = nf
    for mult, stride in ((1, 1), (2, 2), (4, 2), (8, 2)):
        total += block(cin, nf * mult, stride) + block(nf * mult, nf * mult, 1)
        cin = nf * mult
    return total + cin * num_classes + num_classes  # linear head


def test_default_mlp_is_the_papers_784_100_100_10_network():
    model = MLP()
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(784, 100), (100, 100),
                                                                 (100, 10)]
    assert n_params(model) == 784 * 100 + 100 + 100 * 100 + 100 + 100 * 10 + 10 == 89_610
    assert model.classifier is linears[-1]


def test_mlp_flattens_images_and_exposes_its_last_hidden_layer():
    model = MLP(input_size=12, hidden_sizes=(7, 5), num_classes=3)
    x = torch.randn(4, 3, 2, 2)  # 12 features once flattened
    features = model.features(x)
    assert features.shape == (4, 5)
    assert (features >= 0).all()  # after a ReLU
    logits = model(x)
    assert logits.shape == (4, 3)
    assert torch.allclose(logits, model.classifier(features))
    assert torch.allclose(model(x.flatten(1)), logits)


def test_mlp_weights_are_xavier_uniform_and_biases_zero():
    torch.manual_seed(0)
    model = MLP(input_size=300, hidden_sizes=(200,), num_classes=50)
    for layer in (m for m in model.modules() if isinstance(m, nn.Linear)):
        bound = math.sqrt(6.0 / (layer.in_features + layer.out_features))
        w = layer.weight.detach()
        assert w.abs().max() <= bound
        assert w.abs().max() > 0.9 * bound  # uniform over the whole range, not narrower
        assert torch.count_nonzero(layer.bias) == 0


@pytest.mark.parametrize("kwargs", [{"input_size": 0}, {"num_classes": 0},
                                    {"hidden_sizes": (10, 0)}])
def test_mlp_rejects_non_positive_sizes(kwargs):
    with pytest.raises(ValueError, match="positive"):
        MLP(**kwargs)


def test_reduced_resnet18_has_the_documented_stages_and_size():
    model = ReducedResNet18()
    assert n_params(model) == resnet_params(10, 20, 3) == 1_094_750
    # Two blocks per stage, widths nf, 2nf, 4nf, 8nf
    assert [blk.conv2.out_channels for blk in model.layers] == [20, 20, 40, 40, 80, 80,
                                                               160, 160]
    small = ReducedResNet18(num_classes=5, nf=4, in_channels=1, image_size=16)
    assert n_params(small) == resnet_params(5, 4, 1)
    assert small.classifier.in_features == 32 and small.classifier.out_features == 5


def test_reduced_resnet18_shapes_and_flat_inputs():
    torch.manual_seed(0)
    model = ReducedResNet18(num_classes=7, nf=4).eval()
    images = torch.rand(3, 3, 32, 32)
    assert model.features(images).shape == (3, 8 * 4)
    assert model.layers(model.bn1(model.conv1(images))).shape == (3, 32, 4, 4)  # 32 / 2^3
    logits = model(images)
    assert logits.shape == (3, 7)
    # The authors store CIFAR-10 flat (3072 features): reshaped to the same images
    assert torch.allclose(model(images.flatten(1)), logits)
    assert torch.allclose(logits, model.classifier(model.features(images)))


def test_mlp_for_sizes_the_input_layer_from_the_sample_shape():
    model = mlp_for((3, 8, 8), 4)
    assert isinstance(model, MLP)
    first = model.body[0]
    assert (first.in_features, first.out_features) == (192, 100)
    assert model.classifier.out_features == 4
    assert model(torch.rand(2, 3, 8, 8)).shape == (2, 4)


def test_make_model_builds_by_name_and_rejects_the_rest():
    mlp = make_model("mlp", (1, 28, 28), 10)
    assert isinstance(mlp, MLP) and n_params(mlp) == 89_610
    resnet = make_model("resnet18", (1, 16, 16), 6)
    assert isinstance(resnet, ReducedResNet18)
    assert (resnet.in_channels, resnet.image_size) == (1, 16)
    assert resnet.classifier.out_features == 6
    assert resnet(torch.rand(2, 256)).shape == (2, 6)  # flat inputs use the given shape
    with pytest.raises(ValueError, match=r"\(C, H, W\)"):
        make_model("resnet18", (784,), 10)
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        make_model("vgg", (3, 32, 32), 10)
