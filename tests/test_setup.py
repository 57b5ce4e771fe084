"""The seeded start of a run: forked seeded RNG, initial network and optimizer."""

import pytest
import torch

from avalanche_gss.reproduce.runs.seeding import seeded_model_and_optimizer, seeded_rng
from avalanche_gss.reproduce.runs.training import RunSettings


def test_seeded_rng_draws_from_the_seed_and_restores_the_outer_state():
    torch.manual_seed(123)
    expected_outer = torch.rand(3)
    torch.manual_seed(123)
    with seeded_rng(7):
        inside = torch.rand(3)
    # The caller's stream continues as if the block had drawn nothing
    assert torch.equal(torch.rand(3), expected_outer)
    torch.manual_seed(7)
    assert torch.equal(inside, torch.rand(3))


def test_seeded_rng_restores_the_state_on_an_exception():
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    with pytest.raises(RuntimeError), seeded_rng(0):
        torch.rand(10)
        raise RuntimeError
    assert torch.equal(torch.rand(2), expected)


def test_model_depends_on_the_seed_only_and_the_optimizer_is_plain_sgd(tiny_split):
    a, opt = seeded_model_and_optimizer(RunSettings("Rand", seed=3, lr=0.125), tiny_split)
    torch.rand(100)  # the caller's draws do not change the initial weights
    b, _ = seeded_model_and_optimizer(RunSettings("Rand", seed=3), tiny_split)
    c, _ = seeded_model_and_optimizer(RunSettings("Rand", seed=4), tiny_split)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    assert isinstance(opt, torch.optim.SGD)
    assert opt.param_groups[0]["lr"] == 0.125 and opt.param_groups[0]["momentum"] == 0
    assert {id(p) for p in opt.param_groups[0]["params"]} == {id(p) for p in a.parameters()}
    out = a(tiny_split.train[0][0][:4])
    assert out.shape == (4, tiny_split.num_classes)
