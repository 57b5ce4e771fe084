"""Gradients read off a training step (``StepRecord``, ``step_gram``) against the float64 loop.

A step's loss is a mean, so the recorded Gram is ``w_i w_j <g_i, g_j>`` with ``w_i = 1 / B``
of the sample's own step; records taken around an SGD step compare gradients at the
parameters of their own step. The oracle computes exactly that, sample by sample.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import seeded
from torch import Tensor, nn

from avalanche_gss.gradients import per_sample_grad_loop
from avalanche_gss.gradients.step import StepLayers, StepRecord, step_gram, step_problem
from avalanche_gss.reproduce.runs.budget import PassCounter


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 9), nn.ReLU(), nn.Linear(9, 5))


def _cnn() -> nn.Module:
    """Strided and padded convolutions, with and without bias, then a linear head."""
    return nn.Sequential(nn.Conv2d(1, 3, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(3, 4, 2, bias=False), nn.ReLU(), nn.Flatten(),
                         nn.Linear(36, 5))


MODELS = {"mlp": (_mlp, (12,)), "cnn": (_cnn, (1, 8, 8))}


def _batch(n: int, shape: tuple[int, ...], classes: int,
           g: torch.Generator) -> tuple[Tensor, Tensor]:
    return (torch.randn(n, *shape, generator=g, dtype=torch.float64),
            torch.randint(0, classes, (n,), generator=g))


def _recorded_step(model: nn.Module, x: Tensor, y: Tensor) -> StepRecord:
    """One training step's forward and backward (a mean loss), recorded."""
    with StepRecord(model) as record:
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return record


def _outputs(model: nn.Module, shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        return int(model(torch.zeros(1, *shape, dtype=torch.float64)).shape[1])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", list(MODELS))
def test_two_steps_at_the_same_parameters_give_the_weighted_per_sample_gram(kind, seed):
    # Given a float64 model and two batches of different sizes, each learnt by a recorded
    # step with a mean loss, the parameters unchanged between them
    make, shape = MODELS[kind]
    torch.manual_seed(seed)
    model = make().double()
    classes = _outputs(model, shape)
    g = seeded(seed)
    (x1, y1), (x2, y2) = _batch(6, shape, classes, g), _batch(4, shape, classes, g)
    records = [_recorded_step(model, x1, y1), _recorded_step(model, x2, y2)]
    # When their Gram is formed
    gram = step_gram(records)
    # Then it is the loop oracle's Gram, each sample weighted by 1 / its step's batch size
    grads = per_sample_grad_loop(model, torch.cat([x1, x2]), torch.cat([y1, y2]))
    w = torch.cat([torch.full((6,), 1 / 6, dtype=torch.float64),
                   torch.full((4,), 1 / 4, dtype=torch.float64)])
    expected = (grads @ grads.T) * w[:, None] * w[None, :]
    torch.testing.assert_close(gram, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_records_around_an_sgd_step_compare_gradients_at_their_own_parameters(seed):
    # Given a recorded step on batch 1, an SGD update, then a recorded step on batch 2
    torch.manual_seed(seed)
    model = _mlp().double()
    before = copy.deepcopy(model)
    g = seeded(seed)
    (x1, y1), (x2, y2) = _batch(5, (12,), 5, g), _batch(3, (12,), 5, g)
    sgd = torch.optim.SGD(model.parameters(), lr=0.5)
    first = _recorded_step(model, x1, y1)
    sgd.step()
    sgd.zero_grad()
    second = _recorded_step(model, x2, y2)
    # When their Gram is formed
    gram = step_gram([first, second])
    # Then batch 1's gradients are those before the update, batch 2's those after it
    g1 = per_sample_grad_loop(before, x1, y1) / 5
    g2 = per_sample_grad_loop(model, x2, y2) / 3
    both = torch.cat([g1, g2])
    torch.testing.assert_close(gram, both @ both.T, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(g1, per_sample_grad_loop(model, x1, y1) / 5)  # they did move


def test_recording_adds_no_forward_or_backward_pass():
    # Given the same step run twice, once recorded
    model = _mlp()
    x, y = torch.randn(7, 12, generator=seeded(0)), torch.arange(7) % 5

    def step(recorded: bool) -> object:
        with PassCounter(model) as counter:
            if recorded:
                _recorded_step(model, x, y)
            else:
                nn.functional.cross_entropy(model(x), y).backward()
        return counter.count

    # Then the pass counter sees the same passes: the Gram costs none
    assert step(True) == step(False)


def test_a_layer_without_a_closed_form_is_refused_in_one_line_naming_it():
    model = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.Linear(6, 3))
    with pytest.raises(ValueError, match=r"no closed form for LayerNorm's parameters"):
        StepRecord(model)


def test_a_batch_norm_in_train_mode_is_refused_its_samples_are_coupled():
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 3))
    with pytest.raises(ValueError, match=r"BatchNorm1d is in train mode"):
        StepRecord(model).__enter__()


def test_a_batch_norm_in_eval_mode_is_recorded_exactly():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3)).double()
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    model.eval()
    x, y = torch.randn(5, 4, dtype=torch.float64, generator=seeded(1)), torch.arange(5) % 3
    gram = step_gram([_recorded_step(model, x, y)])
    grads = per_sample_grad_loop(model, x, y) / 5
    torch.testing.assert_close(gram, grads @ grads.T, rtol=1e-10, atol=1e-12)


def test_a_record_whose_backward_did_not_run_is_refused():
    model = _mlp()
    with StepRecord(model) as record:
        model(torch.randn(3, 12))
    with pytest.raises(RuntimeError, match="run the step's backward first"):
        step_gram([record])
    with pytest.raises(RuntimeError, match="nothing was recorded"):
        step_gram([StepRecord(model)])


def test_the_hooks_are_gone_after_the_block():
    model = _mlp()
    with StepRecord(model):
        pass
    assert all(not m._forward_hooks for m in model.modules())


def test_planned_layers_follow_the_model_and_its_parameters():
    model = _mlp()
    layers = StepLayers(model)
    assert layers.key == StepLayers.key_of(model)
    model[3] = nn.Linear(9, 7)  # a grown head: other parameters, other shapes
    assert layers.key != StepLayers.key_of(model)
    head = list(model[3].parameters())
    assert StepLayers.key_of(model, head) != StepLayers.key_of(model)
    assert len(StepLayers(model, head).layers) == 1


def test_what_a_record_would_refuse_is_said_before_any_step():
    # Given models a record refuses and models it takes
    norm = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.Linear(6, 3))
    batch_norm = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 3))
    # Then step_problem says what StepRecord raises, in one line, and None where it records
    assert step_problem(norm) == ("a training step's gradients have no closed form for "
                                  "LayerNorm's parameters; score with the gradient engine's "
                                  "own pass instead")
    with pytest.raises(ValueError) as refused:
        StepRecord(batch_norm).__enter__()
    assert step_problem(batch_norm) == str(refused.value)
    assert "BatchNorm1d is in train mode" in str(refused.value)
    assert step_problem(batch_norm.eval()) is None and step_problem(_mlp()) is None
    # only the selected parameters count: the head alone has a closed form
    assert step_problem(norm, list(norm[2].parameters())) is None
