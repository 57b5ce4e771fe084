"""Checkpoints that cannot lie: a file from another configuration, or a damaged one, is
refused with one line naming the file; every single-byte flip is caught. Writing one
follows symbolic links and names the file when the disk is full or access is denied."""

import errno
import os
import tempfile

import pytest
import torch
from helpers import Tiny

from avalanche_gss.benchmarks import TensorExperience
from avalanche_gss.checkpoint import (
    CheckpointError,
    load_state,
    read_state,
    save_state,
    train_resumable,
)
from avalanche_gss.methods.cb_gss import CBGSS
from avalanche_gss.methods.clust import FSSClust, GSSClust
from avalanche_gss.methods.gss_greedy import GSSGreedy
from avalanche_gss.methods.gss_iqp import GSSIQP
from avalanche_gss.methods.reservoir import Reservoir
from avalanche_gss.training.retrieval import MIRRetrieval

BUILD = {
    "Reservoir": lambda **kw: Reservoir(**kw),
    "GSS-Greedy": lambda **kw: GSSGreedy(n=3, **kw),
    "GSS-IQP": lambda **kw: GSSIQP(recent_size=4, **kw),
    "GSS-Clust": lambda **kw: GSSClust(recent_size=4, growth=1.01, **kw),
    "FSS-Clust": lambda **kw: FSSClust(recent_size=4, features="logits", **kw),
    "CB-GSS": lambda **kw: CBGSS(n=3, **kw),
}


def make(method="Reservoir", *, mem_size=6, seed=0, lr=0.05, optimizer="sgd", hidden=5,
         **options):
    torch.manual_seed(0)
    model = Tiny(hidden)
    opt = (torch.optim.SGD(model.parameters(), lr=lr) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=lr))
    return BUILD[method](model=model, optimizer=opt, mem_size=mem_size, n_iter=1, seed=seed,
                         **options)


def stream(n=6):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5 * n, 4, generator=gen)
    y = torch.arange(5 * n) % 3
    return [TensorExperience(x[i : i + 5], y[i : i + 5]) for i in range(0, 5 * n, 5)]


def saved(tmp_path, method="Reservoir", **kw):
    strategy = make(method, **kw)
    strategy.train(stream()[:3])
    path = tmp_path / f"{method}.ckpt"
    save_state(strategy, path, experiences=3)
    return path


@pytest.mark.parametrize("source, target, kw, difference", [
    ("Reservoir", "GSS-Greedy", {}, "strategy: 'Reservoir' in the file, 'GSSGreedy' here"),
    ("GSS-Greedy", "Reservoir", {}, "strategy: 'GSSGreedy' in the file, 'Reservoir' here"),
    ("GSS-Greedy", "GSS-IQP", {}, "strategy"),
    ("GSS-Clust", "GSS-IQP", {}, "strategy"),
    ("GSS-Clust", "FSS-Clust", {}, "strategy"),
    ("GSS-IQP", "GSS-Clust", {}, "strategy"),
    ("Reservoir", "Reservoir", {"mem_size": 5}, "buffer.max_size: 6 in the file, 5 here"),
    ("Reservoir", "Reservoir", {"seed": 1}, "buffer.seed: 0 in the file, 1 here"),
    ("Reservoir", "Reservoir", {"lr": 0.5}, "lr: 0.05 in the file, 0.5 here"),
    ("Reservoir", "Reservoir", {"optimizer": "adam"}, "optimizer.class: 'SGD' in the file"),
    ("Reservoir", "Reservoir", {"hidden": 7}, "model.body.weight: [5, 4] in the file, [7, 4]"),
    ("CB-GSS", "CB-GSS", {"victim": "random"}, "buffer.victim: 'score' in the file, 'random'"),
    ("CB-GSS", "CB-GSS", {"retrieval": "random"},
     "buffer_plugin.retrieval.class: 'OtherClassesRetrieval' in the file, 'RandomRetrieval'"),
    ("CB-GSS", "CB-GSS", {"retrieval": "mir"},
     "buffer_plugin.retrieval.class: 'OtherClassesRetrieval' in the file, 'MIRRetrieval'"),
])
def test_a_checkpoint_of_another_configuration_is_refused_naming_the_difference(
        tmp_path, source, target, kw, difference):
    path = saved(tmp_path, source)
    strategy = make(target, **kw)
    before = [p.detach().clone() for p in strategy.model.parameters()]
    with pytest.raises(CheckpointError) as info:
        load_state(strategy, path)
    message = str(info.value)
    assert str(path) in message and difference in message and "\n" not in message
    assert all(torch.equal(a, b) for a, b in zip(before, strategy.model.parameters(),
                                                  strict=True))  # nothing was loaded


def test_mir_candidates_of_another_number_are_refused(tmp_path):
    path = saved(tmp_path, "CB-GSS", retrieval=MIRRetrieval(candidates=20))
    with pytest.raises(CheckpointError, match="buffer_plugin.retrieval.candidates: 20 in the "
                                              "file, 50 here"):
        load_state(make("CB-GSS", retrieval="mir"), path)
    assert load_state(make("CB-GSS", retrieval=MIRRetrieval(candidates=20)), path) == 3


def test_the_same_configuration_loads(tmp_path):
    path = saved(tmp_path, "GSS-Clust")
    assert path.stat().st_mode & 0o044 == 0o044  # readable like a file open() writes
    assert load_state(make("GSS-Clust"), path) == 3


def test_a_checkpoint_of_another_run_identity_is_refused(tmp_path):
    path = tmp_path / "run.ckpt"
    train_resumable(make(), stream()[:4], path, every=2, identity={"data": "abc"})
    with pytest.raises(CheckpointError, match="identity.data: 'abc' in the file, 'xyz' here"):
        train_resumable(make(), stream()[:4], path, every=2, identity={"data": "xyz"})
    with pytest.raises(CheckpointError, match="stream_length: 4 in the file, 6 here"):
        train_resumable(make(), stream(), path, every=2, identity={"data": "abc"})
    assert train_resumable(make(), stream()[:4], path, every=2, identity={"data": "abc"}) == 4


def test_a_truncated_or_empty_checkpoint_is_refused_naming_the_file(tmp_path):
    path = saved(tmp_path)
    data = path.read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match=str(path)):
            load_state(make(), path)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape \
            and torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and (a == b or (a != a and b != b))


def test_every_single_byte_flip_of_a_checkpoint_is_refused_or_harmless(tmp_path):
    path = saved(tmp_path, "GSS-Greedy")
    data = path.read_bytes()
    original = read_state(data)
    refused = identical = 0
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        try:
            state = read_state(bytes(flipped), name="flipped.ckpt")
        except CheckpointError as err:
            assert str(err).startswith("flipped.ckpt"), err
            refused += 1
        else:
            assert _same(state, original), f"byte {i} loaded another state"
            identical += 1
    assert refused + identical == len(data) and refused > 0


def test_a_checkpoint_path_that_is_a_symlink_keeps_pointing_where_it_pointed(tmp_path):
    # Given a checkpoint path that is a link to a file in another folder
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "real.ckpt"
    link = tmp_path / "run.ckpt"
    link.symlink_to(target)  # dangling until the first save
    strategy = make()
    for done in (2, 4):
        # When the run saves through the link
        strategy.train(stream()[done - 2 : done])
        save_state(strategy, link, experiences=done)
        # Then the link is still a link to that file, which holds the new state
        assert link.is_symlink() and os.readlink(link) == str(target)
        assert read_state(target)["experiences"] == done
    # And no temporary file is left in either folder; loading through the link works
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["real.ckpt", "run.ckpt", "store"]
    assert load_state(make(), link) == 4


@pytest.mark.parametrize("failing, code", [("fsync", errno.ENOSPC), ("replace", errno.EACCES),
                                           ("mkstemp", errno.EACCES)])
def test_a_full_disk_or_denied_access_while_saving_names_the_file(tmp_path, monkeypatch,
                                                                  failing, code):
    path = saved(tmp_path)
    before = path.read_bytes()
    strategy = make()
    strategy.train(stream()[:4])

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    # Given a disk that fills up (fsync) or a folder that refuses the file
    if failing == "mkstemp":
        monkeypatch.setattr(tempfile, "mkstemp", fail)
    else:
        monkeypatch.setattr(os, failing, fail)
    # When a checkpoint is saved, Then the error says which file, in one line, with errno
    with pytest.raises(OSError) as info:
        save_state(strategy, path, experiences=4)
    monkeypatch.undo()
    message = str(info.value)
    assert info.value.errno == code and str(path) in message and "\n" not in message
    assert os.strerror(code) in message
    # And the previous checkpoint is whole, with no temporary file beside it
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
