"""GCR's training loss (Tiwari et al., CVPR 2022): weighted label and distillation terms on
the replayed samples, with the coreset weights and the logits the buffer stores."""

import pytest
import torch
from torch.nn import functional as F

from avalanche_gss.methods.gcr import GCR, GCRBuffer, GCRReplayPlugin, SlotRetrieval
from avalanche_gss.models import MLP
from avalanche_gss.training.rehearsal import OnlineRehearsalPlugin

D, C = 12, 4


def _model(seed=0):
    torch.manual_seed(seed)
    return MLP(input_size=D, hidden_sizes=(16,), num_classes=C)


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, D, generator=g), torch.randint(0, C, (n,), generator=g)


def _strategy(model, **kw):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return GCR(mem_size=8, recent_size=10, model=model, optimizer=opt, **kw)


def _filled(strategy, model, n=30):
    buf = strategy.storage_policy
    for i in range(0, n, 10):
        buf.add(*_data(10, i), model)
    return buf


def test_the_buffer_stores_the_models_logits_with_each_sample():
    model = _model()
    buf = GCRBuffer(8, recent_size=10)
    x, y = _data(10, 0)
    buf.add(x, y, model)  # a merge: 10 > 8
    model.eval()
    with torch.no_grad():
        want = {tuple(r.tolist()): o for r, o in zip(x, model(x), strict=True)}
    assert buf.logits is not None and buf.logits.shape == (8, C)
    for row, logit in zip(buf.x[: buf.size], buf.logits[: buf.size], strict=True):
        torch.testing.assert_close(logit, want[tuple(row.tolist())])


def test_the_weighted_replay_loss_is_the_authors_formula():
    model = _model()
    strategy = _strategy(model, alpha=0.3, beta=0.7)
    buf = _filled(strategy, model)
    plugin = strategy.rehearsal
    assert isinstance(plugin, GCRReplayPlugin) and isinstance(plugin.retrieval, SlotRetrieval)
    batch = plugin.retrieval.retrieve(strategy, buf, 5, plugin.generator)
    slots = plugin.retrieval.last_slots
    x, y, _ = batch
    torch.testing.assert_close(x, buf.x[slots])
    got = plugin._replay_loss(strategy, batch)
    out = model(x)
    w = buf.weights[slots] / buf.weights[slots].sum()
    want = (0.7 * w * F.cross_entropy(out, y, reduction="none")).sum() + (
        0.3 * w * ((out - buf.logits[slots]) ** 2).mean(1)).sum()
    torch.testing.assert_close(got, want)
    # the weights matter: uniform weights give another loss
    assert not torch.allclose(w, torch.full_like(w, 1 / len(w)))


def test_the_distillation_term_skips_the_columns_a_sample_did_not_have():
    # A head that grew since a sample was stored leaves NaN in its logits' new columns:
    # its squared error is the mean over the columns it has.
    model = _model()
    strategy = _strategy(model, alpha=0.3, beta=0.7)
    buf = _filled(strategy, model)
    plugin = strategy.rehearsal
    batch = plugin.retrieval.retrieve(strategy, buf, 5, plugin.generator)
    slots = plugin.retrieval.last_slots
    buf.logits[slots[0], C - 1] = float("nan")
    got = plugin._replay_loss(strategy, batch)
    x, y, _ = batch
    out = model(x)
    z = buf.logits[slots]
    w = buf.weights[slots] / buf.weights[slots].sum()
    per = torch.stack([((o[~torch.isnan(r)] - r[~torch.isnan(r)]) ** 2).mean()
                       for o, r in zip(out, z, strict=True)])
    want = (0.7 * w * F.cross_entropy(out, y, reduction="none")).sum() + (0.3 * w * per).sum()
    torch.testing.assert_close(got, want)


def test_selection_only_replays_with_the_plain_criterion():
    model = _model()
    strategy = _strategy(model, replay_loss="uniform")
    buf = _filled(strategy, model)
    plugin = strategy.rehearsal
    batch = plugin.retrieval.retrieve(strategy, buf, 5, plugin.generator)
    torch.testing.assert_close(plugin._replay_loss(strategy, batch),
                               OnlineRehearsalPlugin._replay_loss(plugin, strategy, batch))


def test_the_weighted_draw_is_the_uniform_draw():
    model = _model()
    a, b = _strategy(model), _strategy(model, replay_loss="uniform")
    for s in (a, b):
        _filled(s, model)
    ga, gb = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    xa = a.rehearsal.retrieval.retrieve(a, a.storage_policy, 5, ga)[0]
    xb = b.rehearsal.retrieval.retrieve(b, b.storage_policy, 5, gb)[0]
    torch.testing.assert_close(xa, xb)


def test_the_logits_and_class_counts_are_part_of_the_state():
    model = _model()
    buf = GCRBuffer(8, recent_size=10)
    for i in range(3):
        buf.add(*_data(10, i), model)
    buf.add(*_data(5, 9), model)  # 5 waiting, with their logits
    state = buf.state_dict()
    assert state["logits"] is not None and state["recent_logits"].shape == (5, C)
    assert int(state["class_seen"].sum()) == 35
    other = GCRBuffer(8, recent_size=10)
    other.load_state_dict(state)
    x, y = _data(5, 10)
    buf.add(x, y, model)
    other.add(x, y, model)
    for key in ("x", "y", "scores", "logits", "class_seen"):
        assert torch.equal(getattr(buf, key), getattr(other, key)), key


def test_a_shrink_keeps_each_samples_logits():
    model = _model()
    buf = GCRBuffer(8, recent_size=10)
    buf.add(*_data(10, 0), model)
    pairs = {tuple(r.tolist()): z.clone() for r, z in zip(buf.x[:8], buf.logits[:8],
                                                          strict=True)}
    buf.resize(None, 5)
    assert buf.size == 5 and buf.logits.shape == (5, C)
    for r, z in zip(buf.x[:5], buf.logits[:5], strict=True):
        assert torch.equal(pairs[tuple(r.tolist())], z)


def test_bad_options_are_refused():
    model = _model()
    with pytest.raises(ValueError, match="replay_loss must be one of weighted, uniform"):
        _strategy(model, replay_loss="mean")
    with pytest.raises(ValueError, match="retrieval 'mir' is not allowed"):
        _strategy(model, retrieval="mir")
    _strategy(model, replay_loss="uniform", retrieval="mir")  # selection only: any retrieval
