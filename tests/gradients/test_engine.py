"""The gradient engine against its oracle: whole models, parameter subsets, multi-head
models with task labels, bad inputs.

The tolerances (``RTOL``) and why they catch a wrong term are said in :mod:`helpers.gradients`.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from avalanche.models import MTSimpleMLP
from helpers.gradients import (
    MIXED_TARGETS,
    MIXED_TASKS,
    RTOL,
    MultiHeadConvNet,
    SmallCNN,
    assert_each_parameter_close,
    assert_gram_close,
    cosines,
    mt_simple_mlp,
    reference_grads,
    set_bn_stats,
)
from torch import Tensor, nn
from torch.nn import functional as F

from avalanche_gss.gradients import (
    registry,
    sample_cosine,
    sample_gram,
)
from avalanche_gss.models import MLP


def test_the_engine_takes_each_layer_rule_from_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the Linear rule replaced, in the registry, by a spy that records the layers
    seen: list[nn.Module] = []
    rule = registry.RULES[nn.Linear]

    def spy(out: Tensor, module: nn.Module, *rest: object) -> None:
        seen.append(module)
        rule(out, module, *rest)  # type: ignore[arg-type]

    monkeypatch.setitem(registry.RULES, nn.Linear, spy)
    torch.manual_seed(16)
    model = MLP()
    x, y = torch.randn(6, 784), torch.randint(0, 10, (6,))
    # When scoring: Then every Linear's Gram came from the registered rule, once each,
    # and the Gram still matches the loop
    gram = sample_gram(model, x, y)
    assert seen == [m for m in model.modules() if type(m) is nn.Linear]
    assert_gram_close(gram, reference_grads(model, x, y))


def test_mlp_gram_and_cosine_match_loop() -> None:
    # Given the paper's MLP (784-100-100-10) and 12 samples
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(12, 784), torch.randint(0, 10, (12,))
    # When the engine builds the Gram and cosines
    gram = sample_gram(model, x, y)
    cos = sample_cosine(model, x, y)
    # Then both match the float64 loop
    ref = reference_grads(model, x, y)
    assert_gram_close(gram, ref)
    torch.testing.assert_close(cos.double(), cosines(ref), rtol=0, atol=RTOL)
    assert cos.dtype == torch.float32 and not torch.allclose(cos, torch.eye(12))
    # and a caller's no_grad() does not change the result
    with torch.no_grad():
        torch.testing.assert_close(sample_gram(model, x, y), gram)


def test_resnet_like_block_with_inplace_relu_matches_loop() -> None:
    # Given in-place ReLUs right after Linear/BN outputs (they overwrite the layer outputs)
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1),
        nn.BatchNorm2d(3),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(3 * 5 * 5, 7),
        nn.ReLU(inplace=True),
        nn.Linear(7, 4),
    )
    set_bn_stats(model)
    x, y = torch.randn(6, 2, 5, 5), torch.randint(0, 4, (6,))
    assert_gram_close(sample_gram(model, x, y), reference_grads(model, x, y))
    assert_each_parameter_close(model, x, y)


@pytest.mark.parametrize(
    "names",
    [
        ["classifier.weight", "classifier.bias"],  # the classifier only
        ["conv2.weight", "classifier.weight"],  # weight without its bias
        ["conv2.bias", "bn2.weight"],  # bias without its weight, BN gamma without beta
    ],
)
def test_parameter_subsets_match_loop(names: list[str]) -> None:
    torch.manual_seed(4)
    model = SmallCNN()
    set_bn_stats(model)
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))
    named = dict(model.named_parameters())
    gram = sample_gram(model, x, y, params=[named[n] for n in names])
    ref = reference_grads(model, x, y, names)
    assert ref.shape[1] == sum(named[n].numel() for n in names)
    assert_gram_close(gram, ref)


def test_parameters_used_outside_their_module_are_not_missed() -> None:
    # Given a Linear whose parameters are used through F.linear (its hook never runs),
    # a Linear called with a keyword argument, and a module that is never used at all
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.unused = nn.Linear(5, 4), nn.Linear(4, 3), nn.Linear(3, 3)

        def forward(self, x: Tensor) -> Tensor:
            hidden = torch.tanh(self.a(input=x))  # a keyword call: the hook sees no input
            return F.linear(hidden, self.b.weight, self.b.bias)

    torch.manual_seed(7)
    model = Functional()
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
    assert_gram_close(sample_gram(model, x, y), reference_grads(model, x, y))


def test_invalid_inputs_raise() -> None:
    model = MLP(20, (16,), 4)
    x, y = torch.randn(4, 20), torch.randint(0, 4, (4,))
    with pytest.raises(ValueError, match="samples"):
        sample_gram(model, x, y[:3])
    with pytest.raises(ValueError, match="do not belong"):
        sample_gram(model, x, y, params=[nn.Parameter(torch.zeros(3))])
    frozen = nn.Parameter(torch.zeros(3), requires_grad=False)
    with pytest.raises(ValueError, match="requires_grad"):
        sample_gram(model, x, y, params=[frozen])
    with pytest.raises(ValueError, match="shape"):
        sample_gram(model, x, y, loss_fn=lambda logits, t: F.cross_entropy(logits, t))


def test_mt_simple_mlp_mixed_tasks_match_loop() -> None:
    # Given Avalanche's MTSimpleMLP (in training mode: dropout must be off when scoring)
    # and one batch mixing tasks 0, 1 and 2
    model = mt_simple_mlp()
    x, y, t = torch.randn(10, 20), MIXED_TARGETS, MIXED_TASKS
    # When the engine builds the Gram and cosines with the samples' task labels
    gram = sample_gram(model, x, y, task_labels=t)
    cos = sample_cosine(model, x, y, task_labels=t)
    # Then they equal the float64 loop that runs each sample with its own task label
    ref = reference_grads(model, x, y, task_labels=t)  # (N, P)
    assert_gram_close(gram, ref)
    torch.testing.assert_close(cos.double(), cosines(ref), rtol=0, atol=RTOL)
    assert_each_parameter_close(model, x, y, task_labels=t)
    # and a head gives exactly nothing to samples of other tasks (zero gradient, not round-off)
    head = model.classifier.classifiers["1"].classifier
    head_gram = sample_gram(model, x, y, params=[head.weight, head.bias], task_labels=t)
    others = t != 1
    assert torch.all(head_gram[others] == 0) and torch.all(head_gram[:, others] == 0)
    assert torch.all(head_gram[~others][:, ~others].diagonal() > 0)
    # while the shared layer couples every pair, whatever their tasks
    shared = sample_gram(model, x, y, params=list(model.features.parameters()), task_labels=t)
    assert torch.all(shared.diagonal() > 0) and shared[0, 1] != 0  # tasks 2 and 0


def test_multi_head_conv_and_batchnorm_mixed_tasks_match_loop() -> None:
    # Given a multi-task module with shared and per-task convolutions and BatchNorms
    # (training mode, non-trivial running statistics)
    torch.manual_seed(21)
    model = MultiHeadConvNet()
    set_bn_stats(model)
    model.train()
    x, y, t = torch.randn(10, 2, 6, 6), MIXED_TARGETS, MIXED_TASKS
    # When scoring a batch of mixed tasks: Then the Gram equals the per-sample loop's,
    # parameter by parameter too (each head's conv, BN and linear see one task's rows)
    assert_gram_close(
        sample_gram(model, x, y, task_labels=t), reference_grads(model, x, y, task_labels=t)
    )
    assert_each_parameter_close(model, x, y, task_labels=t)
    assert model.training  # modes restored


@pytest.mark.parametrize("make", [mt_simple_mlp, MultiHeadConvNet], ids=["mtsimplemlp", "conv"])
def test_single_task_label_batch_matches_loop(make: type[nn.Module]) -> None:
    # Given a batch whose samples all belong to task 1
    torch.manual_seed(23)
    model = make()
    set_bn_stats(model)
    shape = (20,) if isinstance(model, MTSimpleMLP) else (2, 6, 6)
    x, y = torch.randn(6, *shape), torch.tensor([0, 3, 1, 2, 3, 0])
    t = torch.ones(6, dtype=torch.long)
    # When: Then the Gram equals the loop's, and the heads of tasks 0 and 2 play no part
    ref = reference_grads(model, x, y, task_labels=t)
    assert_gram_close(sample_gram(model, x, y, task_labels=t), ref)
    names = [n for n, _ in model.named_parameters()]
    unused = [n for n in names if "classifiers.0." in n or "classifiers.2." in n]
    unused += [n for n in names if n.startswith(("heads.0.", "heads.2."))]
    assert unused
    named = dict(model.named_parameters())
    assert torch.all(
        sample_gram(model, x, y, params=[named[n] for n in unused], task_labels=t) == 0
    )


@pytest.mark.parametrize(
    "names",
    [
        ["trunk.0.weight", "trunk.0.bias", "trunk.1.weight"],  # shared layers only
        ["heads.1.0.weight", "heads.1.1.bias", "heads.1.4.weight"],  # one task's head
        ["trunk.0.bias", "heads.0.0.weight", "heads.2.4.bias"],  # shared and two heads
    ],
)
def test_multi_head_parameter_subsets_match_loop(names: list[str]) -> None:
    torch.manual_seed(24)
    model = MultiHeadConvNet()
    set_bn_stats(model)
    x, y, t = torch.randn(10, 2, 6, 6), MIXED_TARGETS, MIXED_TASKS
    named = dict(model.named_parameters())
    gram = sample_gram(model, x, y, params=[named[n] for n in names], task_labels=t)
    ref = reference_grads(model, x, y, names, task_labels=t)
    assert ref.shape[1] == sum(named[n].numel() for n in names)
    assert_gram_close(gram, ref)


def test_engine_does_not_import_avalanche() -> None:
    code = "import sys, avalanche_gss.gradients; sys.exit('avalanche' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
