"""Checkpoints that cannot lie: a file from another configuration or another model, or a
damaged one, is refused with one line naming the file; every single-byte flip is caught.
A file whose checksum was recomputed after its content was crafted (anyone can) allocates
nothing its sizes fake, yields a short message, and leaves the strategy as it was when it
is refused late. A path that is a symbolic link is refused, written or read; a file read
is checked to be a regular one of bounded size first. Writing one names the file when the
disk is full or access is denied."""

import copy
import errno
import hashlib
import io
import os
import random
import tempfile

import pytest
import torch
from avalanche.models import SimpleMLP
from helpers import Tiny
from helpers.fifo import fifo

from avalanche_gss.checkpoint import (
    CheckpointError,
    load_state,
    read_state,
    save_state,
    strategy_config,
    strategy_state_dict,
    train_resumable,
)
from avalanche_gss.checkpoint.config import first_difference
from avalanche_gss.methods.cb_gss import CBGSS
from avalanche_gss.methods.clust import FSSClust, GSSClust
from avalanche_gss.methods.csrel import CSReL
from avalanche_gss.methods.gss_greedy import GSSGreedy
from avalanche_gss.methods.gss_iqp import GSSIQP
from avalanche_gss.methods.reservoir import Reservoir
from avalanche_gss.models import ReducedResNet18
from avalanche_gss.streams import TensorExperience
from avalanche_gss.training import MKDPlugin
from avalanche_gss.training.retrieval import MIRRetrieval

BUILD = {
    "Reservoir": lambda **kw: Reservoir(**kw),
    "GSS-Greedy": lambda **kw: GSSGreedy(n=3, **kw),
    "GSS-IQP": lambda **kw: GSSIQP(recent_size=4, **kw),
    "GSS-Clust": lambda **kw: GSSClust(recent_size=4, growth=1.01, **kw),
    "FSS-Clust": lambda **kw: FSSClust(recent_size=4, features="logits", **kw),
    "CB-GSS": lambda **kw: CBGSS(n=3, **kw),
    "ER+MKD": lambda momentum=0.99, temperature=4.0, weight=8.0, **kw: Reservoir(
        plugins=[MKDPlugin(momentum, temperature, weight)], **kw),
    "CSReL": lambda **kw: CSReL(**{"refit_every": 2, "refit_steps": 2, **kw}),
}


def make(method="Reservoir", *, mem_size=6, seed=0, lr=0.05, optimizer="sgd", hidden=5,
         model=None, **options):
    torch.manual_seed(0)
    model = Tiny(hidden) if model is None else model()
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


def test_a_checkpoint_path_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    # Given a checkpoint path that is a link to a file in another folder, and a dangling one
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "real.ckpt"
    target.write_bytes(b"someone's file")
    link = tmp_path / "run.ckpt"
    link.symlink_to(target)
    dangling = tmp_path / "new.ckpt"
    dangling.symlink_to(tmp_path / "store" / "created.ckpt")
    strategy = make()
    strategy.train(stream()[:2])
    for path in (link, dangling):
        # When the run saves there, Then the save is refused in one line naming the link
        with pytest.raises(OSError, match=f"refusing to write {path}: it is a symbolic link"):
            save_state(strategy, path, experiences=2)
        # And reading through it is refused too, in one line
        with pytest.raises(CheckpointError, match=f"^{path}: is a symbolic link"):
            read_state(path)
    # And nothing was written through either link, no temporary file is left
    assert target.read_bytes() == b"someone's file"
    assert sorted(p.name for p in tmp_path.rglob("*")) == [
        "new.ckpt", "real.ckpt", "run.ckpt", "store"]


def test_a_huge_sparse_file_at_the_checkpoint_path_is_refused_before_it_is_read(tmp_path):
    # Given a 40 GiB file (sparse: it takes no disk) where the checkpoint should be
    path = tmp_path / "run.ckpt"
    path.touch()
    os.truncate(path, 40 * 2**30)
    # When it is read or loaded, Then one line names it and its size, nothing is read
    for call in (lambda: read_state(path), lambda: load_state(make(), path)):
        with pytest.raises(CheckpointError) as info:
            call()
        message = str(info.value)
        assert message.startswith(f"{path}: holds 40.0 GiB") and "\n" not in message


def test_a_fifo_at_the_checkpoint_path_is_refused_without_blocking(tmp_path):
    # Given a FIFO (no writer will ever come) where the checkpoint should be
    with fifo(tmp_path / "run.ckpt") as path:
        # When it is read, Then the open does not block, and one line says what it is
        with pytest.raises(CheckpointError, match=f"^{path}: is a FIFO .*not a regular file$"):
            read_state(path)


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


# ------------------------------------------------------------------ another model
class Twin(Tiny):
    """Another class with Tiny's layers and shapes (it learns something else)."""

    def forward(self, x):
        return self.classifier(torch.tanh(self.body(x)))


def _mlp(drop_rate):
    return lambda: SimpleMLP(num_classes=3, input_size=4, hidden_size=5, drop_rate=drop_rate)


@pytest.mark.parametrize("source, target, difference", [
    (_mlp(0.0), _mlp(0.9), "model_modules.features.2: 'Dropout(p=0.0, inplace=False)' in "
                           "the file, 'Dropout(p=0.9, inplace=False)' here"),
    (Tiny, Twin, "model_class: 'helpers.Tiny' in the file, "),
], ids=["dropout-rate", "class"])
def test_a_checkpoint_of_another_model_with_the_same_shapes_is_refused(tmp_path, source,
                                                                      target, difference):
    # Given a checkpoint of a model, and another model with the same tensor shapes
    path = saved(tmp_path, model=source)
    strategy = make(model=target)
    assert [p.shape for p in strategy.model.parameters()] == \
        [p.shape for p in make(model=source).model.parameters()]
    before = copy.deepcopy(strategy_state_dict(strategy))
    # When the other model loads it, Then it is refused in one line naming what differs
    with pytest.raises(CheckpointError) as info:
        load_state(strategy, path)
    message = str(info.value)
    assert str(path) in message and difference in message and "\n" not in message
    assert _same(before, strategy_state_dict(strategy))  # nothing was loaded
    # And the same model loads it
    assert load_state(make(model=source), path) == 3


def _config_of(model):
    return strategy_config(make(model=lambda: model))


def _with_address():
    """Tiny, its first layer's extra_repr showing an object's address (one per process)."""
    model = Tiny()
    model.body.extra_repr = lambda: f"hook={object()!r}"
    return model


def test_the_configuration_records_the_options_a_model_keeps():
    # ReducedResNet18 keeps in_channels and image_size: inputs of another size, same shapes
    small, large = (_config_of(ReducedResNet18(nf=2, image_size=size)) for size in (8, 32))
    assert first_difference(small, large) == "model_options.image_size: 8 in the file, 32 here"
    assert small["model_class"] == "avalanche_gss.models.ReducedResNet18"
    # And an object's address in a module's extra_repr is not part of the record
    assert first_difference(_config_of(_with_address()), _config_of(_with_address())) is None


def rewrite(path, change):
    """Change a checkpoint's content and recompute its checksum, as anyone can."""
    header, _, payload = path.read_bytes().split(b"\n", 2)
    state = torch.load(io.BytesIO(payload), weights_only=True)
    change(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    path.write_bytes(header + b"\n" + hashlib.sha256(data).hexdigest().encode() + b"\n" + data)


def test_a_checkpoint_saved_before_the_model_was_recorded_still_loads(tmp_path):
    path = saved(tmp_path, model=_mlp(0.5))
    rewrite(path, lambda state: [state["config"].pop(key, None)
                                 for key in ("model_class", "model_options", "model_modules")])
    assert load_state(make(model=_mlp(0.5)), path) == 3  # compared on its shapes alone
    with pytest.raises(CheckpointError, match="model.features.0.weight: \\[5, 4\\] in the file"):
        load_state(make(model=lambda: SimpleMLP(3, 4, hidden_size=6)), path)


# ------------------------------------------------------------------ crafted content
def _buffer_state(state):
    return state["plugins"][0]["plugin"]["storage_policy"]


def _everything(strategy):
    """A copy of all a load may change: model, optimizer, plugins, buffer, clock, RNGs."""
    return copy.deepcopy({**strategy_state_dict(strategy), "python": random.getstate()})


def test_a_faked_buffer_size_is_refused_before_anything_is_allocated(tmp_path):
    # Given a checkpoint whose buffer state claims 2**47 slots (a petabyte of columns)
    path = saved(tmp_path)
    rewrite(path, lambda state: _buffer_state(state).update(max_size=2**47))
    strategy = make()
    before = _everything(strategy)
    # When it is loaded, Then it is refused against the configuration, nothing allocated
    with pytest.raises(CheckpointError) as info:
        load_state(strategy, path)
    message = str(info.value)
    assert str(path) in message and "max_size 140737488355328" in message
    assert "its configuration 6" in message and "\n" not in message
    assert _same(before, _everything(strategy))
    # And a buffer given such a state directly checks it against its saved columns
    trained = make()
    trained.train(stream()[:2])
    state = _buffer_state(strategy_state_dict(trained))
    buffer = next(p.storage_policy for p in strategy.plugins if hasattr(p, "storage_policy"))
    with pytest.raises(ValueError, match="saved column x does not have the saved max_size"):
        buffer.load_state_dict({**state, "max_size": 2**47})


@pytest.mark.parametrize("where", ["buffer", "model"])
def test_a_tensor_whose_elements_repeat_is_refused_before_it_is_copied(tmp_path, where):
    # Given a checkpoint holding a tensor of 2**40 float elements over 4 bytes (zero strides)
    path = saved(tmp_path)
    huge = torch.zeros(1).expand(6, 2**40)

    def change(state):
        if where == "buffer":
            _buffer_state(state)["x"] = huge
        else:  # the right shape, repeated: what grows or copies it would allocate it all
            state["model"]["body.weight"] = torch.zeros(1).expand(5, 4)

    rewrite(path, change)
    strategy = make()
    before = _everything(strategy)
    # When it is read or loaded, Then it is refused in one line naming the tensor
    with pytest.raises(CheckpointError) as info:
        load_state(strategy, path)
    name = "plugins[0].plugin.storage_policy.x" if where == "buffer" else "model.body.weight"
    message = str(info.value)
    assert message.startswith(f"{path}: {name}: a tensor of shape") and "holds 4" in message
    assert _same(before, _everything(strategy))


@pytest.mark.parametrize("where", ["config", "format", "plugin name"])
def test_an_error_quoting_the_file_is_short(tmp_path, where):
    # Given a checkpoint holding a 4 MB string where an error quotes the file
    path = saved(tmp_path)
    text = "x" * 4_000_000

    def change(state):
        if where == "config":
            state["config"]["strategy"] = text
        elif where == "format":
            state["format"] = text
        else:
            state["plugins"][0]["name"] = text

    rewrite(path, change)
    # When it is loaded, Then the error is one line of a few hundred characters
    with pytest.raises(CheckpointError) as info:
        load_state(make(), path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert len(message) < len(str(path)) + 600


def _python_rng(state):
    state["rng"]["python"] = (3, (0,), None)


def _optimizer_groups(state):
    state["optimizer"]["param_groups"][0]["params"] = [0]


def _buffer_generator(state):
    _buffer_state(state)["generator"] = torch.zeros(3, dtype=torch.uint8)


@pytest.mark.parametrize("change", [_python_rng, _optimizer_groups, _buffer_generator],
                         ids=["python-rng", "optimizer-groups", "buffer-generator"])
def test_a_load_that_fails_late_leaves_the_strategy_as_it_was(tmp_path, change):
    # Given a checkpoint whose configuration fits, with a part that fails when it is loaded
    # after the model's weights (the last one: the Python generator's state)
    path = saved(tmp_path, optimizer="adam")
    rewrite(path, change)
    # And a strategy that has learnt something of its own
    strategy = make(optimizer="adam")
    strategy.train(stream()[3:5])
    before = _everything(strategy)
    # When it loads the file, Then it is refused in one line naming the file
    with pytest.raises(Exception) as info:
        load_state(strategy, path)
    # And the model, optimizer, buffer, plugin, clock and generators are as they were
    assert _same(before, _everything(strategy))
    assert [p for g in strategy.optimizer.param_groups for p in g["params"]] == \
        list(strategy.model.parameters())
    assert isinstance(info.value, CheckpointError) and str(path) in str(info.value)
    assert "\n" not in str(info.value)
    # And it goes on learning as if the load had not been tried
    twin = make(optimizer="adam")
    twin.train(stream()[3:5])
    strategy.train(stream()[5:])
    twin.train(stream()[5:])
    assert _same(_everything(twin), _everything(strategy))


# ------------------------------------------------------------------ MKD and CSReL
OTHER_OPTIONS = [
    ("ER+MKD", {"momentum": 0.9}, "plugin_options.MKDPlugin.momentum: 0.99 in the file, 0.9 here"),
    ("ER+MKD", {"temperature": 2.0},
     "plugin_options.MKDPlugin.temperature: 4.0 in the file, 2.0 here"),
    ("ER+MKD", {"weight": 1.0}, "plugin_options.MKDPlugin.weight: 8.0 in the file, 1.0 here"),
    ("CSReL", {"refit_every": 3}, "buffer.refit_every: 2 in the file, 3 here"),
    ("CSReL", {"refit_steps": 5}, "buffer.refit_steps: 2 in the file, 5 here"),
    ("CSReL", {"refit_batch_size": 8}, "buffer.refit_batch_size: 32 in the file, 8 here"),
    ("CSReL", {"refit_lr": 0.5}, "buffer.refit_lr: 0.05 in the file, 0.5 here"),
]


@pytest.mark.parametrize("method, kw, difference", OTHER_OPTIONS,
                         ids=[f"{m}-{next(iter(kw))}" for m, kw, _ in OTHER_OPTIONS])
def test_an_mkd_or_csrel_checkpoint_of_other_options_is_refused_naming_the_option(
        tmp_path, method, kw, difference):
    # Given an ER+MKD or a CSReL checkpoint
    path = saved(tmp_path, method)
    # When a strategy with another value of one option loads it
    strategy = make(method, **kw)
    before = _everything(strategy)
    with pytest.raises(CheckpointError) as info:
        load_state(strategy, path)
    # Then it is refused in one line naming the option, the file's value and the given one
    message = str(info.value)
    assert str(path) in message and difference in message and "\n" not in message
    assert _same(before, _everything(strategy))
    # And the strategy with the file's options loads it
    assert load_state(make(method), path) == 3


def _teacher(state):
    return state["plugins"][1]["plugin"]["teacher"]


def _coreset(state):
    return _buffer_state(state)["coreset_model"]


CRAFTED = {  # (method, change, what the message says)
    "teacher-shape": ("ER+MKD", lambda s: _teacher(s).update({"body.weight": torch.zeros(7, 4)}),
                      "the MKDPlugin's saved teacher's body.weight has shape [7, 4], the "
                      "model's [5, 4]"),
    "teacher-names": ("ER+MKD", lambda s: _teacher(s).pop("body.bias"),
                      "the MKDPlugin's saved teacher lacks the model's body.bias"),
    "coreset-shape": ("CSReL", lambda s: _coreset(s).update({"classifier.bias": torch.zeros(9)}),
                      "the CSReLBuffer's saved coreset_model's classifier.bias has shape [9], "
                      "the model's [3]"),
    "float-labels": ("ER+MKD", lambda s: _buffer_state(s).update(y=_buffer_state(s)["y"].float()),
                     "the ReservoirBuffer's saved column y has dtype float32, not integer"),
    "float-task-labels": ("CSReL", lambda s: _buffer_state(s).update(
        t=_buffer_state(s)["t"].double()), "saved column t has dtype float64, not integer"),
    "complex-model": ("ER+MKD", lambda s: s["model"].update(
        {"body.weight": s["model"]["body.weight"].to(torch.complex64)}),
        "the saved model's body.weight has dtype complex64, the model's float32 (real "
        "floating point)"),
    "complex-teacher": ("ER+MKD", lambda s: _teacher(s).update(
        {"body.bias": _teacher(s)["body.bias"].to(torch.complex64)}),
        "the MKDPlugin's saved teacher's body.bias has dtype complex64"),
    "complex-coreset": ("CSReL", lambda s: _coreset(s).update(
        {"body.weight": _coreset(s)["body.weight"].to(torch.complex128)}),
        "the CSReLBuffer's saved coreset_model's body.weight has dtype complex128"),
    "complex-scores": ("CSReL", lambda s: _buffer_state(s).update(
        scores=_buffer_state(s)["scores"].to(torch.complex64)),
        "saved column scores has dtype complex64, not real floating point"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_mkd_or_csrel_state_is_refused_in_one_line_before_anything_is_loaded(
        tmp_path, case):
    # Given a checkpoint whose configuration fits, with a crafted part (checksum recomputed)
    method, change, says = CRAFTED[case]
    path = saved(tmp_path, method)
    rewrite(path, change)
    # And a strategy that has learnt something of its own
    strategy = make(method)
    strategy.train(stream()[3:5])
    before = _everything(strategy)
    # When it loads the file, Then it is refused in one line naming the part and the model's
    with pytest.raises(CheckpointError) as info:
        load_state(strategy, path)
    message = str(info.value)
    assert message.startswith(str(path)) and says in message and "\n" not in message
    # And nothing of the strategy changed: it goes on learning as if the load had not been
    assert _same(before, _everything(strategy))
    twin = make(method)
    twin.train(stream()[3:5])
    strategy.train(stream()[5:])
    twin.train(stream()[5:])
    assert _same(_everything(twin), _everything(strategy))
