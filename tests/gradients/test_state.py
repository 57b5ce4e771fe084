"""The engine leaves a model as it found it: parameters, buffers, gradients, modes."""

from __future__ import annotations

import copy

import torch
from helpers.gradients import (
    SmallCNN,
    set_bn_stats,
)
from torch import Tensor, nn
from torch.nn import functional as F

from avalanche_gss.gradients import (
    preserved_state,
    sample_gram,
)


def assert_state_and_grads_equal(
    model: nn.Module, state: dict[str, Tensor], grads: dict[str, Tensor | None]
) -> None:
    """Every parameter and buffer equals ``state``; every ``.grad`` equals ``grads`` (None too)."""
    for name, value in model.state_dict().items():
        assert torch.equal(value, state[name]), name
    for name, p in model.named_parameters():
        saved = grads[name]
        if saved is None:
            assert p.grad is None, name
        else:
            assert p.grad is not None and torch.equal(p.grad, saved), name


def test_engine_is_state_neutral() -> None:
    # Given a CNN in training mode with one eval submodule, some .grad set and some None,
    # and an SGD-with-momentum optimizer that has taken a step
    torch.manual_seed(11)
    model = SmallCNN()
    set_bn_stats(model)
    model.train()
    model.bn2.eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    model.conv1.weight.grad = None
    before = copy.deepcopy(model.state_dict())
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    opt_before = copy.deepcopy(optimizer.state_dict())
    modes = {n: m.training for n, m in model.named_modules()}
    # When scoring (twice, so a leak would also compound)
    for _ in range(2):
        gram = sample_gram(model, x, y)
    # Then the Gram is a plain tensor, not tied to the forward graph
    assert not gram.requires_grad and gram.grad_fn is None
    # and parameters, buffers (BN stats), .grad (None stays None), modes and the
    # optimizer's momentum buffers are exactly as before
    assert_state_and_grads_equal(model, before, grads)
    assert {n: m.training for n, m in model.named_modules()} == modes
    opt_after = optimizer.state_dict()
    assert opt_after["param_groups"] == opt_before["param_groups"]
    for key, state in opt_before["state"].items():
        assert torch.equal(opt_after["state"][key]["momentum_buffer"], state["momentum_buffer"])


def test_preserved_state_undoes_a_training_step() -> None:
    # Given a model, some .grad, and an optimizer with momentum state
    torch.manual_seed(12)
    model = SmallCNN()
    set_bn_stats(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    model.classifier.bias.grad = None
    model.eval()
    before = copy.deepcopy(model.state_dict())
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    momentum = {k: v["momentum_buffer"].clone() for k, v in optimizer.state_dict()["state"].items()}
    # When a full training step (train mode, BN updates, backward, step) runs inside it
    with preserved_state(model, optimizer):
        model.train()
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        assert not torch.equal(model.conv1.weight, before["conv1.weight"])  # it did change
    # Then everything is back
    assert not model.training
    assert_state_and_grads_equal(model, before, grads)
    state = optimizer.state_dict()["state"]
    assert all(torch.equal(state[k]["momentum_buffer"], v) for k, v in momentum.items())
