"""The online rehearsal plugin: its draws, its state and its argument checks."""

import pytest
import torch
from avalanche.training.storage_policy import ReservoirSamplingBuffer
from helpers import filled_reservoir as _filled

from avalanche_gss.methods.reservoir import ReservoirBuffer
from avalanche_gss.training import OnlineRehearsalPlugin
from avalanche_gss.training.retrieval import draw


def _replay(plugin):
    """The plugin's next uniform replay batch (its retrieval's draw, on the CPU)."""
    return draw(plugin.storage_policy, plugin.replay_batch_size, plugin.generator, "cpu")


def test_replay_draws_replay_batch_size_distinct_stored_rows():
    buf = _filled()
    plugin = OnlineRehearsalPlugin(buf, replay_batch_size=7, seed=1)
    stored = buf.tensors()[0]
    for _ in range(5):
        x, y, t = _replay(plugin)
        assert x.shape == (7, 4) and y.shape == (7,) and t.shape == (7,)
        rows = [int((stored == xi).all(dim=1).nonzero()) for xi in x]  # each a stored row
        assert len(set(rows)) == 7  # distinct


def test_a_buffer_smaller_than_the_replay_batch_is_replayed_whole():
    buf = _filled(4)
    x, _, _ = _replay(OnlineRehearsalPlugin(buf, replay_batch_size=10))
    assert len(x) == 4


def test_state_round_trip_gives_the_same_next_draws():
    first = OnlineRehearsalPlugin(_filled(), replay_batch_size=5, seed=3)
    _replay(first)
    state = first.state_dict()
    expected = _replay(first)[0]
    second = OnlineRehearsalPlugin(ReservoirBuffer(30), replay_batch_size=5, seed=99)
    second.load_state_dict(state)
    assert torch.equal(_replay(second)[0], expected)


def test_a_buffer_without_state_dict_is_named():
    plugin = OnlineRehearsalPlugin(ReservoirSamplingBuffer(10))
    with pytest.raises(TypeError, match="ReservoirSamplingBuffer has no state_dict"):
        plugin.state_dict()


def test_replay_batch_size_must_be_positive():
    with pytest.raises(ValueError, match="replay_batch_size must be >= 1, got 0"):
        OnlineRehearsalPlugin(ReservoirBuffer(5), replay_batch_size=0)
