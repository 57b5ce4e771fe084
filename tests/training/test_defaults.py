"""Defaults a user can rely on: the configuration that reproduces the paper's numbers."""

from __future__ import annotations

import inspect

import pytest
import torch

from avalanche_gss import (
    GSSIQP,
    FSSClust,
    FSSClustBuffer,
    GSSClust,
    GSSClustBuffer,
    GSSGreedy,
    GSSGreedyBuffer,
    OnlineTemplate,
    Rand,
    Reservoir,
)
from avalanche_gss.models import MLP
from avalanche_gss.reproduce.runs.training import RunSettings, run_label


@pytest.mark.parametrize("cls", [GSSGreedyBuffer, GSSClustBuffer, FSSClustBuffer,
                                 GSSGreedy, GSSClust, FSSClust])
def test_every_gss_class_takes_variant_the_same_way_and_defaults_to_the_authors(cls):
    param = inspect.signature(cls).parameters["variant"]
    assert param.default == "authors" and param.kind is inspect.Parameter.KEYWORD_ONLY
    assert run_label(RunSettings(method="GSS-Greedy")) == "GSS-Greedy-authors-M300-seed0"


def test_variant_sets_each_buffers_options():
    assert GSSGreedyBuffer(5).gate == "batch" and GSSGreedyBuffer(5).memory_grads == "groups"
    assert GSSGreedyBuffer(5, variant="paper").gate == "sample"
    assert GSSClustBuffer(5).clustering.growth == pytest.approx(1.01)
    assert GSSClustBuffer(5, variant="paper").clustering.growth == 2.0
    assert GSSClustBuffer(5, variant="paper", growth=1.5).clustering.growth == 1.5
    fss = FSSClustBuffer(5)
    assert (fss.features, fss.squared) == ("logits", True)
    fss = FSSClustBuffer(5, variant="paper")
    assert (fss.features, fss.squared) == ("penultimate", False)
    with pytest.raises(ValueError, match="variant"):
        GSSClustBuffer(5, variant="code")


@pytest.mark.parametrize("cls", [Reservoir, Rand, GSSGreedy, GSSIQP, GSSClust, FSSClust])
def test_ready_strategies_learn_each_batch_three_times_as_the_paper(cls):
    model = MLP(16, (8,), 3)
    strategy = cls(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                   mem_size=5)
    assert strategy.n_iter == 3
    assert inspect.signature(OnlineTemplate).parameters["n_iter"].default == 3
