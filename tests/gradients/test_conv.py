"""The convolution rules, the grouped route included, against the loop oracle."""

from __future__ import annotations

import pytest
import torch
from helpers.gradients import (
    MIXED_TARGETS,
    MIXED_TASKS,
    RTOL,
    MultiHeadConvNet,
    OddConvs,
    SmallCNN,
    assert_each_parameter_close,
    assert_gram_close,
    reference_grads,
    set_bn_stats,
)
from torch import Tensor, nn

from avalanche_gss.gradients import (
    conv,
    patches,
    sample_gram,
)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("chunk", [patches._CHUNK_ELEMENTS, 7])
@pytest.mark.parametrize("grouped", [False, True])
def test_unusual_convolutions_and_repeated_module_match_loop(
    monkeypatch: pytest.MonkeyPatch, chunk: int, grouped: bool
) -> None:
    monkeypatch.setattr(patches, "_CHUNK_ELEMENTS", chunk)  # 7: every route in small chunks
    # grouped=True: the accelerators' grouped-convolution route, forced on the CPU
    monkeypatch.setattr(conv, "_grouped_route", lambda device, size: grouped)
    monkeypatch.setattr(conv, "_GROUPED_ELEMENTS", chunk)  # 7: one output channel a block
    built, used = conv._add_grouped_conv_gram, []
    monkeypatch.setattr(conv, "_add_grouped_conv_gram", lambda *a: used.append(1) or built(*a))
    torch.manual_seed(2)
    model = OddConvs()
    x, y = torch.randn(5, 2, 6, 6), torch.randint(0, 3, (5,))
    assert_gram_close(sample_gram(model, x, y), reference_grads(model, x, y))
    assert_each_parameter_close(model, x, y)
    assert bool(used) == grouped  # the route under test is the one that ran


# The smallest block of per-sample weight gradients the grouped route builds for each
# convolution (one output channel, N * Cin * kh * kw; with groups the whole weight,
# N * Cin / groups * kh * kw * C), in module order, for the batches of test_cuda_matches_cpu.
SMALLEST_BLOCKS = {
    "SmallCNN": [6 * 3 * 9, 6 * 4 * 9],  # N=6: conv1 162, conv2 216
    "OddConvs": [5 * 2 * 3, 5 * 1 * 4, 5 * 4 * 9, 5 * 4 * 9, 5 * 2 * 9 * 6],  # N=5, 540 grouped
}


def conv_cases() -> list[tuple[nn.Module, Tensor, Tensor]]:
    """The models and batches of test_cuda_matches_cpu, on the CPU."""
    torch.manual_seed(13)
    cnn = SmallCNN()
    set_bn_stats(cnn)
    cases = [(cnn, torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,)))]
    cases.append((OddConvs(), torch.randn(5, 2, 6, 6), torch.randint(0, 3, (5,))))
    return cases


def test_grouped_route_needs_an_accelerator_and_a_block_within_the_limit() -> None:
    limit = conv._GROUPED_ELEMENTS
    cuda = torch.device("cuda")  # a device object only: nothing runs on it
    assert conv._grouped_route(cuda, limit)
    assert not conv._grouped_route(cuda, limit + 1)
    assert not conv._grouped_route(torch.device("cpu"), 1)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_grouped_route_builds_the_block_the_selection_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the grouped route forced on the CPU with a block limit of 7 elements, the case
    # test_cuda_matches_cpu[7] runs on CUDA, and a record of the size each route decision
    # measured and of each block of per-sample weight gradients the route then built
    monkeypatch.setattr(conv, "_GROUPED_ELEMENTS", 7)
    events: list[tuple[str, int]] = []
    route, cuda = conv._grouped_route, torch.device("cuda")

    def decide(device: torch.device, size: int) -> bool:
        events.append(("route", size))
        return True

    weight_grad = conv.conv2d_weight

    def block(*args: object, **kwargs: object) -> Tensor:
        grads = weight_grad(*args, **kwargs)  # type: ignore[arg-type]
        events.append(("block", grads.numel()))
        return grads

    monkeypatch.setattr(conv, "_grouped_route", decide)
    monkeypatch.setattr(conv, "conv2d_weight", block)
    for model, x, y in conv_cases():
        events.clear()
        # When scoring: Then the Gram matches the loop (one output channel a block)
        assert_gram_close(sample_gram(model, x, y), reference_grads(model, x, y))
        # and each convolution's decision measured its smallest block, which is exactly
        # what the route built, block after block
        sizes = [size for kind, size in events if kind == "route"]
        assert sizes == SMALLEST_BLOCKS[type(model).__name__]
        measured = 0
        for kind, size in events:
            if kind == "route":
                measured = size
            else:
                assert size == measured
        # so with a limit of 7 the real selection refuses every one of them on an accelerator:
        # a 7-element limit cannot make CUDA take the grouped route (test_cuda_matches_cpu)
        assert not any(route(cuda, size) for size in sizes)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("block", [conv._GROUPED_ELEMENTS, 216, 7])
def test_cuda_matches_cpu(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    # On CUDA a convolution takes the grouped route exactly when its smallest block
    # (SMALLEST_BLOCKS) fits in the limit: the default limit fits all of them; 216 all but
    # the grouped convolution's 540, most of them one output channel a block; 7 none, so
    # every convolution takes the CPU's routes, on CUDA
    monkeypatch.setattr(conv, "_GROUPED_ELEMENTS", block)
    # float32 arithmetic, not TF32 (PyTorch's default for cuDNN): the routes are checked here
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    route, decisions = conv._grouped_route, []

    def decide(device: torch.device, size: int) -> bool:
        taken = route(device, size)
        if device.type == "cuda":
            decisions.append(taken)
        return taken

    grouped, used = conv._add_grouped_conv_gram, []
    monkeypatch.setattr(conv, "_grouped_route", decide)
    monkeypatch.setattr(
        conv, "_add_grouped_conv_gram", lambda *a: used.append(a[0].device.type) or grouped(*a)
    )
    expected = []
    for model, x, y in conv_cases():
        expected += [size <= block for size in SMALLEST_BLOCKS[type(model).__name__]]
        cpu = sample_gram(model, x, y)
        gpu = sample_gram(model.cuda(), x.cuda(), y.cuda())
        assert gpu.device.type == "cuda"
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=RTOL, atol=RTOL * cpu.abs().max().item())
    # Then each convolution took the grouped route on CUDA exactly when its block fits
    assert decisions == expected
    assert used == ["cuda"] * sum(expected)


@pytest.mark.parametrize("grouped", [False, True])
def test_multi_head_convolutions_on_the_grouped_route_match_loop(
    monkeypatch: pytest.MonkeyPatch, grouped: bool
) -> None:
    # The accelerators' grouped-convolution route, forced on the CPU, with rows scattered back
    monkeypatch.setattr(conv, "_grouped_route", lambda device, size: grouped)
    torch.manual_seed(22)
    model = MultiHeadConvNet()
    set_bn_stats(model)
    x, y, t = torch.randn(10, 2, 6, 6), MIXED_TARGETS, MIXED_TASKS
    ref = reference_grads(model, x, y, task_labels=t)
    assert_gram_close(sample_gram(model, x, y, task_labels=t), ref)
