"""CB-GSS with ``score_from="step"``: GSS's scores read off the training step, at no pass.

The scores must be GSS-Greedy's scores of the Gram of the incoming samples that take a slot
against the replayed samples (checked with the parameters frozen, where the step's Gram and
the engine's own pass see the same parameters); the pass counter must see Reservoir's
passes only; the routes that cannot hand the buffer a step are refused in one line.
"""

from __future__ import annotations

import pytest
import torch
from avalanche.benchmarks import nc_benchmark, split_online_stream
from avalanche.benchmarks.utils import _make_taskaware_tensor_classification_dataset
from avalanche.training import Naive
from avalanche.training.plugins import ReplayPlugin
from helpers import C, experiences, small_data
from helpers import small_mlp as _model

from avalanche_gss.gradients import sample_gram
from avalanche_gss.methods.cb_gss import CBGSS, CBGSSBuffer
from avalanche_gss.reproduce.runs.budget import PassCounter
from avalanche_gss.selection.greedy import memory_scores
from avalanche_gss.training import OnlineRehearsalPlugin, quiet_evaluator


def _stream(seed: int = 0, n: int = 200):
    x, y = small_data(n, seed)
    return x, y, experiences(x, y)


def _avalanche_stream():
    """The same samples as Avalanche's benchmark: classes in two experiences, then online
    experiences of 10 (Avalanche's dataloader shuffles each one)."""
    x, y = small_data(200, 0)
    data = _make_taskaware_tensor_classification_dataset(x, y, task_labels=0)
    bench = nc_benchmark(data, data, 2, task_labels=False, shuffle=False,
                         fixed_class_order=list(range(C)))
    return split_online_stream(bench.train_stream, experience_size=10, shuffle=False)


def _strategy(model, *, lr=0.05, **options):
    return CBGSS(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                 mem_size=20, replay_batch_size=6, n_iter=1, seed=1, **options)


@pytest.mark.parametrize("retrieval", ["other-classes", "random"])
def test_step_scores_are_gss_scores_against_the_replayed_samples(retrieval):
    # Given CB-GSS scoring by the step, the parameters frozen (lr 0), and a spy on the
    # samples each replay step learns
    model = _model()
    strategy = _strategy(model, lr=0.0, score_from="step", retrieval=retrieval)
    plugin = strategy.rehearsal
    replayed = []
    learn = plugin._replay_loss

    def spy(strat, batch):
        replayed.append(batch)
        return learn(strat, batch)

    plugin._replay_loss = spy
    buffer = strategy.storage_policy
    checked = 0
    x, y, stream = _stream()
    for i, exp in enumerate(stream):
        replayed.clear()
        strategy.train(exp)
        scores = buffer.last_scores
        scored = torch.isfinite(scores).nonzero().flatten()
        if not replayed or len(scored) == 0:
            continue
        # Then each scored sample's score is GSS-Greedy's (max cosine + 1) against the
        # samples its iteration replayed, from the engine's own Gram at those parameters
        (rx, ry, _), = replayed
        bx, by = x[10 * i: 10 * i + 10], y[10 * i: 10 * i + 10]
        gram = sample_gram(model, torch.cat([bx[scored], rx]), torch.cat([by[scored], ry]))
        expected = memory_scores(gram, len(scored))[0]
        torch.testing.assert_close(scores[scored], expected, rtol=1e-5, atol=1e-5)
        checked += 1
    assert checked > 10  # not vacuous: most batches were scored against a replay


def test_step_scores_cost_no_pass_beyond_training():
    # Given the same stream learnt by CB-GSS scoring by the step, by its own pass, and by
    # CBRS's random victims (whose class decisions, and so replay sizes, are the same)
    counts = {}
    for name, options in {"step": {"score_from": "step"}, "pass": {},
                          "random": {"victim": "random"}}.items():
        model = _model()
        strategy = _strategy(model, **options)
        with PassCounter(model) as counter:
            strategy.train(_stream()[2])
        counts[name] = counter.count
    # Then scoring by the step costs exactly the training's passes; the own pass costs more
    assert counts["step"] == counts["random"]
    assert counts["pass"].forward > counts["random"].forward


def test_a_stock_avalanche_strategy_with_the_rehearsal_plugin_scores_by_the_step():
    # Given Avalanche's Naive with the library's rehearsal plugin (no n_iter: every
    # iteration is recorded, the last one is used)
    model = _model()
    buffer = CBGSSBuffer(20, score_from="step", seed=0)
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                     train_mb_size=10, train_epochs=2, evaluator=quiet_evaluator(),
                     plugins=[OnlineRehearsalPlugin(buffer, 6)])
    # When it learns Avalanche's online stream (each experience shuffled by its dataloader)
    for exp in _avalanche_stream():
        strategy.train(exp)
    # Then the buffer filled by CBRS's quotas and holds finite scores
    assert len(buffer) == 20 and buffer.n_seen == 200
    assert bool(torch.isfinite(buffer.scores[:20]).all())
    assert len(torch.unique(buffer.tensors()[1])) == C


def test_the_stock_replay_plugin_route_is_refused_in_one_line():
    model = _model()
    buffer = CBGSSBuffer(20, score_from="step", seed=0)
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                     train_mb_size=10, evaluator=quiet_evaluator(),
                     plugins=[ReplayPlugin(mem_size=20, storage_policy=buffer)])
    with pytest.raises(ValueError, match=r"^CB-GSS with score_from='step' reads its gradients "
                       r"off the training step, and this batch came without one") as err:
        strategy.train(next(iter(_avalanche_stream())))
    assert "\n" not in str(err.value)
    assert buffer.n_seen == 0  # refused: nothing changed


def test_an_experience_learnt_in_several_steps_is_refused():
    model = _model()
    strategy = _strategy(model, score_from="step", train_mb_size=5)
    with pytest.raises(ValueError, match=r"not the one the last training step learnt \(5\); "
                       r"learn each experience as one batch"):
        strategy.train(_stream()[2][0])


def test_the_options_are_checked():
    with pytest.raises(ValueError, match=r"score_from must be 'pass' or 'step', got 'both'"):
        CBGSSBuffer(10, score_from="both")
    with pytest.raises(ValueError, match=r"loss_fn applies to score_from='pass' only"):
        CBGSSBuffer(10, score_from="step", loss_fn=lambda out, y: out.sum(1))
    # random victims need no score: nothing is recorded for them
    assert CBGSSBuffer(10, score_from="step").wants_step_gram
    assert not CBGSSBuffer(10, score_from="step", victim="random").wants_step_gram
    assert not CBGSSBuffer(10).wants_step_gram


def test_a_model_whose_steps_cannot_be_recorded_is_refused_at_its_first_step():
    # Given a model with a BatchNorm layer in train mode (its batch statistics couple the
    # samples of a step)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.ReLU(), torch.nn.Linear(8, C))
    strategy = _strategy(model, score_from="step")
    # Then its first step is refused in one line that names the layer and the way out
    with pytest.raises(ValueError, match=r"^CB-GSS scores by the training step, but "
                       r"BatchNorm1d is in train mode.*; use score_from='pass'$"):
        strategy.train(_stream()[2][0])


def test_a_model_whose_steps_cannot_be_recorded_is_known_before_training():
    # Given the model above, in eval mode, and the ResNet-18 of the CIFAR-10 protocol
    from avalanche_gss.models import make_model
    from avalanche_gss.reproduce.runs.training import RunSettings, training_problem
    from avalanche_gss.training.step_feed import feed_problem

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.ReLU(), torch.nn.Linear(8, C)).eval()
    # Then the buffer is told before any step what its first training step would raise
    said = feed_problem(CBGSSBuffer(20, score_from="step"), model)
    with pytest.raises(ValueError) as refused:
        _strategy(model, score_from="step").train(_stream()[2][0])
    assert said == str(refused.value)
    # asking leaves the model's modes as they were
    model.eval()
    feed_problem(CBGSSBuffer(20, score_from="step"), model)
    assert not any(m.training for m in model.modules())
    # and nothing is said where nothing is recorded, or where the steps can be
    assert feed_problem(CBGSSBuffer(20), model) is None
    assert feed_problem(CBGSSBuffer(20, score_from="step", victim="random"), model) is None
    assert feed_problem(CBGSSBuffer(20, score_from="step"), _model()) is None
    # A run's settings are asked the same, with the model the run would build
    resnet = make_model("resnet18", (3, 32, 32), 10)
    step = RunSettings(method="CB-GSS", options={"score_from": "step"}, model="resnet18")
    assert training_problem(step, resnet) == (
        "CB-GSS scores by the training step, but BatchNorm2d is in train mode: its batch "
        "statistics mix the samples of a step, so the step's gradients are not per sample; "
        "use score_from='pass'")
    for settings in (RunSettings(method="CB-GSS", model="resnet18"),
                     RunSettings(method="Single", model="resnet18")):
        assert training_problem(settings, resnet) is None
    assert training_problem(RunSettings(method="CB-GSS", options={"score_from": "step"}),
                            _model()) is None
