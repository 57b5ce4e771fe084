"""A run's settings in parts: each part checks itself, names are namespaced, and the flat
record (every run's cache key and what users read) is the one it always was."""

import dataclasses

import pytest

from avalanche_gss import methods
from avalanche_gss.methods.reservoir import Reservoir, ReservoirBuffer
from avalanche_gss.methods.spec import Method
from avalanche_gss.reproduce.experiments.policies import parse_method_text
from avalanche_gss.reproduce.runs.settings import (
    FLAT_NAMES,
    PARTS,
    LossSettings,
    ReplaySettings,
    RunSettings,
    TrainingSettings,
    make_settings,
    settings_dict,
    settings_from_dict,
)


class LrBuffer(ReservoirBuffer):
    """A buffer with an option that shares a run setting's name."""

    def __init__(self, max_size, *, seed=0, lr=1.0):
        super().__init__(max_size, seed=seed)
        self.own_lr = lr


class LrStrategy(Reservoir):
    buffer_class = LrBuffer


@pytest.fixture
def lr_method():
    methods.register(Method("LrBuffered", LrBuffer, LrStrategy))
    yield "LrBuffered"
    methods._USER.pop("LrBuffered")
    methods.REGISTRY.remove("LrBuffered")


def test_the_record_is_the_flat_dict_runs_have_always_been_keyed_by():
    settings = RunSettings(method="GSS-Clust", options={"growth": 1.5}, buffer_size=200,
                           seed=2, lr=0.1, replay_batch_size=12, logit_adjustment=1.0)
    assert list(settings_dict(settings).items()) == [
        ("method", "GSS-Clust"), ("options", {"growth": 1.5}), ("buffer_size", 200),
        ("seed", 2), ("n_iter", 3), ("lr", 0.1), ("batch_size", 10),
        ("replay_batch_size", 12), ("model", "mlp"), ("device", "cpu"), ("iid_epochs", 5),
        ("gem_memory_strength", 0.5), ("update", "rehearsal"), ("constraint_margin", 0.0),
        ("retrieval", "random"), ("mir_candidates", 60), ("joint", False),
        ("logit_adjustment", 1.0), ("prior_window", 1000), ("criterion", "cross-entropy"),
        ("mkd_weight", 0.0), ("mkd_momentum", 0.99), ("mkd_temperature", 4.0)]
    assert RunSettings(**settings_dict(settings)) == settings
    assert settings_from_dict(settings_dict(settings)) == settings


def test_flat_keywords_land_in_their_parts_and_read_back_flat():
    settings = RunSettings("CB-GSS", seed=1, lr=0.2, replay_batch_size=7, prior_window=50)
    assert settings.training == TrainingSettings(lr=0.2)
    assert settings.replay == ReplaySettings(batch_size=7, retrieval="other-classes")
    assert settings.loss == LossSettings(prior_window=50)
    assert (settings.lr, settings.replay_batch_size, settings.retrieval) == (
        0.2, 7, "other-classes")
    assert RunSettings.mir_candidates == 50  # on the class: the part's default
    assert settings == RunSettings("CB-GSS", seed=1, training=TrainingSettings(lr=0.2),
                                   replay=ReplaySettings(batch_size=7),
                                   loss=LossSettings(prior_window=50))
    smaller = dataclasses.replace(settings, buffer_size=20)
    assert smaller.buffer_size == 20 and smaller.lr == 0.2
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.training.lr = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword 'learning_rate'"):
        RunSettings("Reservoir", learning_rate=0.1)


@pytest.mark.parametrize(("part", "values", "words"), [
    (TrainingSettings, {"lr": 0}, "lr must be positive, got 0"),
    (TrainingSettings, {"n_iter": 0}, "n_iter must be >= 1"),
    (ReplaySettings, {"update": "sgd"}, "unknown update 'sgd'"),
    (ReplaySettings, {"retrieval": "mir", "mir_candidates": 5}, "mir_candidates must be >="),
    (LossSettings, {"logit_adjustment": 1e39}, "logit_adjustment must be at most 100"),
    (PARTS["buffer"], {"size": 0}, "buffer_size must be >= 1"),
])
def test_each_part_refuses_its_own_bad_values(part, values, words):
    with pytest.raises(ValueError, match=words):
        part(**values)


def test_what_spans_parts_is_checked_by_the_run_settings():
    with pytest.raises(ValueError, match="retrieval='mir'.*not of 'GEM'"):
        RunSettings("GEM", retrieval="mir")
    with pytest.raises(ValueError, match="update='constrained' is implemented for GSS-IQP"):
        RunSettings("Reservoir", update="constrained")
    with pytest.raises(ValueError, match="Reservoir has no option 'growth'"):
        RunSettings("Reservoir", options={"growth": 1.5})


def test_namespaced_names_reach_their_part_and_bare_names_the_options():
    settings = make_settings("GSS-Clust", growth=1.5, seed=3,
                             **{"training.lr": 0.1, "replay.batch_size": 4})
    assert settings.options == {"growth": 1.5}
    assert (settings.lr, settings.replay_batch_size, settings.seed) == (0.1, 4, 3)
    assert {FLAT_NAMES["replay_batch_size"], FLAT_NAMES["buffer_size"]} == {
        ("replay", "batch_size"), ("buffer", "size")}
    for bad, words in (({"trainig.lr": 1}, "unknown settings part 'trainig'"),
                       ({"training.rate": 1}, "training has no setting 'rate'"),
                       ({"lr": 0.1, "training.lr": 0.2}, "training.lr given twice"),
                       ({"buffer.options": {}}, "buffer has no setting 'options'")):
        with pytest.raises(ValueError, match=words):
            make_settings("GSS-Clust", **bad)


def test_an_option_named_like_a_run_setting_never_lands_in_the_wrong_part(lr_method):
    # Given a method whose buffer takes an option called lr
    # When a text sets both its option and the learning rate
    method, keywords = parse_method_text(f"{lr_method}:lr=0.5,training.lr=0.2")
    settings = make_settings(method, **keywords)
    # Then each lands where the text put it
    assert settings.options == {"lr": 0.5} and settings.lr == 0.2
    # And a bare flat lr, which could be either, is refused rather than guessed
    with pytest.raises(ValueError, match="'lr' is both a run setting and an option of "
                                         "LrBuffered; write training.lr"):
        make_settings(method, lr=0.5)
