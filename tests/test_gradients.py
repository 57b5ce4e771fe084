"""The gradient engine against its oracle: a float64 loop of per-sample ``autograd.grad``.

Tolerances: the engine runs in float32 and the reference in float64, so Gram matrices must
agree to ``1e-4`` relative to the reference's largest entry (``RTOL``) and cosines, whose
scale is 1, to ``1e-4`` absolute. Float32 round-off is ~1e-7 here, so a wrong term (a missed
bias, a mis-ordered patch, a batch-coupled BatchNorm) fails by orders of magnitude.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import types
import warnings

import pytest
import torch
from avalanche.models import MTSimpleMLP, MultiTaskModule
from avalanche.models.dynamic_modules import avalanche_model_adaptation
from torch import Tensor, nn
from torch.nn import functional as F

from avalanche_gss.gradients import (
    conv,
    cosine_from_gram,
    cross_cosine,
    cross_entropy_per_sample,
    fallback,
    group_gram,
    patches,
    per_sample_grad_loop,
    per_sample_grad_vmap,
    preserved_state,
    registry,
    sample_cosine,
    sample_gram,
)
from avalanche_gss.models import MLP

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


def test_oracle_matches_hand_computed_gradients() -> None:
    # Given a linear map W (no bias) and the loss 0.5 |W x_i - y_i|^2,
    # whose per-sample gradient is (W x_i - y_i) x_i^T
    torch.manual_seed(14)
    model = nn.Linear(3, 2, bias=False).double()
    x, y = torch.randn(4, 3).double(), torch.randn(4, 2).double()

    def loss_fn(out: Tensor, target: Tensor) -> Tensor:
        return 0.5 * ((out - target) ** 2).sum(dim=1)

    expected = torch.einsum("nc,nk->nck", x @ model.weight.T - y, x).reshape(4, -1)  # (N, P)
    # When: Then the loop oracle, the vmap helper and the engine all agree with it
    torch.testing.assert_close(per_sample_grad_loop(model, x, y, loss_fn=loss_fn), expected)
    torch.testing.assert_close(per_sample_grad_vmap(model, x, y, loss_fn=loss_fn), expected)
    torch.testing.assert_close(sample_gram(model, x, y, loss_fn=loss_fn), expected @ expected.T)


def test_default_loss_is_the_public_per_sample_cross_entropy() -> None:
    # Given logits and targets: cross_entropy_per_sample is the unreduced cross-entropy
    torch.manual_seed(15)
    logits, labels = torch.randn(5, 4), torch.randint(0, 4, (5,))
    expected = F.cross_entropy(logits, labels, reduction="none")
    assert torch.equal(cross_entropy_per_sample(logits, labels), expected)
    # and it is the engine's default loss: passing it changes nothing, bit for bit
    model = MLP()
    x, y = torch.randn(6, 784), torch.randint(0, 10, (6,))
    assert torch.equal(sample_gram(model, x, y, loss_fn=cross_entropy_per_sample),
                       sample_gram(model, x, y))


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


def test_cnn_with_batchnorm_matches_loop_and_uses_running_stats() -> None:
    # Given a CNN in training mode whose BatchNorms have non-trivial running statistics
    torch.manual_seed(1)
    model = SmallCNN()
    set_bn_stats(model)
    model.train()
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))
    # When scoring: Then the engine matches the loop run in eval mode (running statistics)
    assert_gram_close(sample_gram(model, x, y), reference_grads(model, x, y))
    assert_each_parameter_close(model, x, y)
    # and the batch-statistics alternative would have been far off (the test can fail)
    batch_stats = copy.deepcopy(model).double()
    for m in batch_stats.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.track_running_stats, m.running_mean, m.running_var = False, None, None
    with pytest.raises(ValueError, match="batch statistics"):
        sample_gram(batch_stats, x.double(), y)


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


@pytest.mark.parametrize("chunk", [patches._CHUNK_ELEMENTS, 7])
def test_both_conv_routes_agree_with_explicit_per_sample_grads(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # Given patches U_i (K, T) and output gradients D_i (C, T) of 4 samples
    monkeypatch.setattr(patches, "_CHUNK_ELEMENTS", chunk)  # 7 forces many small chunks
    torch.manual_seed(5)
    cols, dout = torch.randn(4, 6, 5, dtype=torch.float64), torch.randn(4, 3, 5).double()
    explicit = torch.bmm(dout, cols.transpose(1, 2)).reshape(4, -1)  # (N, C*K)
    expected = explicit @ explicit.T  # (N, N)
    # When each route adds the weight Gram
    pair, materialised = torch.zeros(4, 4).double(), torch.zeros(4, 4).double()
    patches._add_pair_sum_gram(pair, cols, dout)
    patches._add_materialised_gram(materialised, cols[:, None], dout[:, None])
    # Then both equal the Gram of the explicit per-sample gradients D_i U_i^T
    torch.testing.assert_close(pair, expected)
    torch.testing.assert_close(materialised, expected)


def test_fallback_modules_match_loop() -> None:
    torch.manual_seed(6)
    model = NeedsFallback()
    x, y = torch.randn(7, 6), torch.randint(0, 8, (7,))
    ref = reference_grads(model, x, y)
    assert_gram_close(sample_gram(model, x, y), ref)
    assert_each_parameter_close(model, x, y)
    torch.testing.assert_close(per_sample_grad_vmap(model, x, y).double(), ref, atol=1e-5, rtol=0)


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


def test_cross_cosine_matches_loop() -> None:
    torch.manual_seed(8)
    model = SmallCNN()
    set_bn_stats(model)
    xa, ya = torch.randn(3, 3, 8, 8), torch.randint(0, 5, (3,))
    xb, yb = torch.randn(5, 3, 8, 8), torch.randint(0, 5, (5,))
    cos = cross_cosine(model, xa, ya, xb, yb)
    ref = cosines(reference_grads(model, torch.cat([xa, xb]), torch.cat([ya, yb])))[:3, 3:]
    assert cos.shape == (3, 5)
    torch.testing.assert_close(cos.double(), ref, rtol=0, atol=RTOL)


def test_group_gram_matches_loop_group_means() -> None:
    # Given 8 samples in groups {0,1,2}, {3,4}, {5,6}, sample 7 left out, group 3 empty
    torch.manual_seed(9)
    model = MLP(20, (16,), 4)
    x, y = torch.randn(8, 20), torch.randint(0, 4, (8,))
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 2, -1])
    ref = reference_grads(model, x, y)  # (N, P)
    means = torch.stack([ref[ids == g].mean(0) for g in range(3)] + [torch.zeros_like(ref[0])])
    # When grouping the per-sample Gram by ids and by an explicit weight matrix
    gram = sample_gram(model, x, y)
    by_ids = group_gram(gram, ids, num_groups=4)
    weights = torch.zeros(2, 8)
    weights[0, :3] = 1 / 3  # group 0's mean
    weights[1, 7] = 1.0  # sample 7 alone
    by_weights = group_gram(gram, weights)
    # Then they equal the Gram of the loop's group-mean gradients
    scale = (ref @ ref.T).abs().max().item()
    torch.testing.assert_close(by_ids.double(), means @ means.T, rtol=RTOL, atol=RTOL * scale)
    rows = torch.stack([means[0], ref[7]])
    torch.testing.assert_close(by_weights.double(), rows @ rows.T, rtol=RTOL, atol=RTOL * scale)
    with pytest.raises(ValueError):
        group_gram(gram, ids, num_groups=2)


def test_cosine_from_gram_hand_computed_and_zero_norm() -> None:
    # Given gradients (2, 0), (1, 1.7320508) (60 degrees apart) and the zero vector
    g = torch.tensor([[2.0, 0.0], [1.0, 3.0**0.5], [0.0, 0.0]])
    cos = cosine_from_gram(g @ g.T)
    expected = torch.tensor([[1.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(cos, expected)


def test_zero_gradient_sample_has_cosine_zero() -> None:
    # Given a loss that ignores sample 2, whose gradient is therefore exactly zero
    torch.manual_seed(10)
    model = MLP(20, (16,), 4)
    x, y = torch.randn(4, 20), torch.randint(0, 4, (4,))
    weight = torch.tensor([1.0, 1.0, 0.0, 1.0])

    def loss_fn(logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits, target, reduction="none") * weight[: len(target)]

    gram = sample_gram(model, x, y, loss_fn=loss_fn)
    cos = cosine_from_gram(gram)
    assert torch.all(gram[2] == 0) and torch.all(cos[2] == 0) and torch.all(cos[:, 2] == 0)
    keep = [0, 1, 3]
    ref = reference_grads(model, x[keep], y[keep])
    torch.testing.assert_close(cos[keep][:, keep].double(), cosines(ref), rtol=0, atol=RTOL)


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


# Multi-head (task-aware) models: the model is called as model(x, task_labels), once per task.

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


def test_multi_task_module_without_closed_form_falls_back_to_the_loop() -> None:
    # Given a MultiTaskModule with a LayerNorm: its forward writes each task's output into a
    # fresh tensor in place, which vmap cannot batch
    torch.manual_seed(25)
    model = MultiHeadConvNet(layer_norm=True)
    set_bn_stats(model)
    x, y, t = torch.randn(10, 2, 6, 6), MIXED_TARGETS, MIXED_TASKS
    # When scoring: Then the LayerNorm's gradients come from the per-sample loop, with a
    # warning, and the Gram is still exact
    with pytest.warns(RuntimeWarning, match="one sample at a time"):
        gram = sample_gram(model, x, y, task_labels=t)
    assert_gram_close(gram, reference_grads(model, x, y, task_labels=t))


def test_task_groups_on_the_vmap_route_match_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a task-aware model vmap can batch, whose Linear runs on one row at a time
    torch.manual_seed(26)
    model = RowwiseMultiHead()
    x, y, t = torch.randn(10, 6), MIXED_TARGETS, MIXED_TASKS
    ref = reference_grads(model, x, y, task_labels=t)
    vmap, routed = fallback.per_sample_grad_vmap, []

    def spy(*args: object, **kwargs: object) -> Tensor:
        routed.extend(id(p) for p in kwargs["params"])  # type: ignore[attr-defined]
        return vmap(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fallback, "per_sample_grad_vmap", spy)
    # When scoring (any RuntimeWarning, i.e. a fall back to the loop, fails the test)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        gram = sample_gram(model, x, y, task_labels=t)
    # Then the Gram is exact, the LayerNorm and the Linear called on single rows (not whole
    # task groups) went to the torch.func route, and the heads stayed in closed form
    assert_gram_close(gram, ref)
    assert {id(p) for p in [*model.norm.parameters(), *model.rowwise.parameters()]} == set(routed)
    # and per_sample_grad_vmap with task labels gives the loop's per-sample gradients
    grads = vmap(model, x, y, task_labels=t)
    torch.testing.assert_close(grads.double(), ref, atol=1e-5, rtol=0)


def test_cross_cosine_with_task_labels_matches_loop() -> None:
    model = mt_simple_mlp()
    x, y, t = torch.randn(10, 20), MIXED_TARGETS, MIXED_TASKS
    cos = cross_cosine(model, x[:4], y[:4], x[4:], y[4:], task_labels_a=t[:4], task_labels_b=t[4:])
    ref = cosines(reference_grads(model, x, y, task_labels=t))[:4, 4:]
    torch.testing.assert_close(cos.double(), ref, rtol=0, atol=RTOL)
    with pytest.raises(ValueError, match="both"):
        cross_cosine(model, x[:4], y[:4], x[4:], y[4:], task_labels_a=t[:4])


def test_invalid_task_labels_raise() -> None:
    model = mt_simple_mlp()
    x, y = torch.randn(4, 20), torch.tensor([0, 1, 2, 1])
    with pytest.raises(ValueError, match="shape"):
        sample_gram(model, x, y, task_labels=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        sample_gram(model, x, y, task_labels=torch.zeros(4))
    with pytest.raises(ValueError, match="integer"):
        per_sample_grad_loop(model, x, y, task_labels=torch.zeros(4))


def test_engine_does_not_import_avalanche() -> None:
    code = "import sys, avalanche_gss.gradients; sys.exit('avalanche' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
