"""Exact resume: a run killed with SIGKILL and resumed ends as an uninterrupted one."""

import io
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from avalanche.benchmarks import nc_benchmark
from avalanche.benchmarks.utils import _make_taskaware_tensor_classification_dataset
from avalanche.checkpointing import maybe_load_checkpoint, save_checkpoint
from avalanche.models import IncrementalClassifier, MTSimpleMLP
from avalanche.training import Naive
from helpers import StopAfter, sigkill
from torch import nn

from avalanche_gss.checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    load_state,
    read_state,
    save_state,
    strategy_state_dict,
    train_resumable,
)
from avalanche_gss.checkpoint.model import model_layout
from avalanche_gss.methods.cb_gss import CBGSS
from avalanche_gss.methods.cbrs import CBRS
from avalanche_gss.methods.clust import FSSClust, GSSClust
from avalanche_gss.methods.csrel import CSReL
from avalanche_gss.methods.gcr import GCR
from avalanche_gss.methods.gdumb import GDumb
from avalanche_gss.methods.gss_greedy import GSSGreedy
from avalanche_gss.methods.gss_iqp import GSSIQP, GSSIQPConstrained
from avalanche_gss.methods.rand import Rand
from avalanche_gss.methods.reservoir import Reservoir
from avalanche_gss.models import MLP
from avalanche_gss.streams import disjoint_tasks, load_dataset, online_benchmark
from avalanche_gss.training import LogitAdjustedLoss, quiet_evaluator

BUILDERS = {
    "Reservoir": lambda **kw: Reservoir(mem_size=30, **kw),
    "Rand": lambda **kw: Rand(mem_size=30, **kw),
    "GSS-Greedy": lambda **kw: GSSGreedy(mem_size=30, n=5, **kw),
    "GSS-Greedy-authors": lambda **kw: GSSGreedy(mem_size=30, n=5, variant="authors", **kw),
    "GSS-IQP": lambda **kw: GSSIQP(mem_size=30, recent_size=20, **kw),
    "GSS-Clust": lambda **kw: GSSClust(mem_size=30, recent_size=20, growth=1.01, **kw),
    "FSS-Clust": lambda **kw: FSSClust(mem_size=30, recent_size=20, **kw),
    "GSS-IQP-constrained": lambda **kw: GSSIQPConstrained(mem_size=30, recent_size=20, **kw),
    "CBRS": lambda **kw: CBRS(mem_size=30, **kw),
    "GDumb": lambda **kw: GDumb(mem_size=30, **kw),
    "CB-GSS": lambda **kw: CBGSS(mem_size=30, n=5, **kw),
    "CB-GSS-step": lambda **kw: CBGSS(mem_size=30, score_from="step", **kw),
    "GCR": lambda **kw: GCR(mem_size=30, recent_size=20, **kw),
    "GCR-uniform": lambda **kw: GCR(mem_size=30, recent_size=20, replay_loss="uniform", **kw),
    # CSReL's coreset model (trained on the buffer every few stored samples) resumes too
    "CSReL": lambda **kw: CSReL(mem_size=30, refit_every=7, refit_steps=3, **kw),
    # Logit Adjusted Softmax's loss keeps a window of labels: it resumes with the run.
    "CBRS+OC+LA": lambda **kw: CBRS(mem_size=30, retrieval="other-classes",
                                    criterion=LogitAdjustedLoss(window=50), **kw),
    "CB-GSS-step+LA": lambda **kw: CBGSS(mem_size=30, score_from="step",
                                         criterion=LogitAdjustedLoss(window=50), **kw),
}


def tiny_stream():
    """The conftest's ``tiny_split`` (5 tasks x 60 digits) as 30 online batches."""
    split = disjoint_tasks(load_dataset("mnist-5k"), samples_per_task=60, seed=0)
    return split, online_benchmark(split, batch_size=10).train_stream


def make(method, *, seed=0, momentum=0.0, plugins=()):
    torch.manual_seed(seed)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
    return BUILDERS[method](model=model, optimizer=optimizer, n_iter=2, seed=seed,
                            plugins=list(plugins))


def KillAt(k):
    """SIGKILL this process once ``k`` experiences were learnt (buffer updated)."""
    return StopAfter(k, sigkill)


def accuracy(model, split):
    with torch.no_grad():
        return [float((model(x).argmax(1) == y).float().mean()) for x, y in split.test]


def as_uninterrupted(strategy, split, stream, *args, **kwargs):
    """The run ``make(*args, **kwargs)`` trained on ``stream`` in one go, checked to be the
    same run as ``strategy``'s."""
    reference = make(*args, **kwargs)
    reference.train(stream)
    assert_same_run(strategy, reference, split)
    return reference


def assert_same_run(a, b, split):
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values(),
                            strict=True):
        assert torch.equal(p, q), name
    assert accuracy(a.model, split) == accuracy(b.model, split)
    sa, sb = a.storage_policy.state_dict(), b.storage_policy.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        if isinstance(sa[key], torch.Tensor):
            assert torch.equal(sa[key], sb[key]), key
        elif key == "clustering":
            assert sa[key]["threshold"] == sb[key]["threshold"]
            assert torch.equal(sa[key]["generator"], sb[key]["generator"])
        elif key == "coreset_model":  # CSReL's: a network's weights
            assert sa[key].keys() == sb[key].keys()
            assert all(torch.equal(v, sb[key][k]) for k, v in sa[key].items()), key
        elif key == "last_result":
            assert (sa[key] is None) == (sb[key] is None)
            if sa[key] is not None:
                assert torch.equal(sa[key]["indices"], sb[key]["indices"])
        else:
            assert sa[key] == sb[key], key
    if hasattr(a, "rehearsal"):
        assert torch.equal(a.rehearsal.generator.get_state(), b.rehearsal.generator.get_state())
    ca, cb = a._criterion.state_dict(), b._criterion.state_dict()
    assert ca.keys() == cb.keys()
    for key in ca:
        assert torch.equal(ca[key], cb[key]), key


def _killed_run(method, path, every, kill_at, momentum):
    torch.set_num_threads(1)
    _, stream = tiny_stream()
    train_resumable(make(method, momentum=momentum, plugins=[KillAt(kill_at)]), stream, path,
                    every=every)
    os._exit(3)  # not reached: the plugin kills the process first


def _fork(target, *args):
    proc = multiprocessing.get_context("fork").Process(target=target, args=args)
    proc.start()
    proc.join(60)
    return proc.exitcode


@pytest.mark.parametrize(
    ("method", "momentum"),
    [(m, 0.0) for m in BUILDERS] + [("GSS-Greedy", 0.9)],
)
def test_sigkilled_run_resumes_bit_for_bit(tmp_path, method, momentum):
    split, stream = tiny_stream()
    path = tmp_path / "run.ckpt"
    # Given a run killed (SIGKILL, in a child process) after 10 of 30 batches, with a
    # checkpoint every 4: batches 9 and 10 are lost
    assert _fork(_killed_run, method, path, 4, 10, momentum) == -signal.SIGKILL
    assert read_state(path)["experiences"] == 8
    # When a fresh process-state strategy resumes it
    resumed = make(method, momentum=momentum)
    assert train_resumable(resumed, stream, path, every=4) == len(stream) == 30
    # Then model, buffer (samples, scores, recent buffer, clustering, generators) and
    # accuracy equal those of one uninterrupted train() call on the whole stream
    reference = as_uninterrupted(resumed, split, stream, method, momentum=momentum)
    # And resuming a finished run trains nothing
    again = make(method, momentum=momentum)
    assert train_resumable(again, stream, path, every=4) == 30
    assert_same_run(again, reference, split)


DRIVER = """
import os
import sys
sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]  # test_checkpoint, helpers
import torch
torch.set_num_threads(1)
from test_checkpoint import KillAt, make, tiny_stream
from avalanche_gss.checkpoint import train_resumable
_, stream = tiny_stream()
train_resumable(make("GSS-IQP", plugins=[KillAt(17)]), stream, sys.argv[2], every=5)
raise SystemExit(3)
"""


@pytest.mark.slow
def test_sigkill_in_a_fresh_interpreter_then_resume(tmp_path):
    split, stream = tiny_stream()
    path = tmp_path / "run.ckpt"
    # Given a fresh Python process, killed with SIGKILL after 17 batches (checkpoint at 15)
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(Path(__file__).parent), str(path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    # When this process resumes from its file
    resumed = make("GSS-IQP")
    assert load_state(make("GSS-IQP"), path) == 15
    train_resumable(resumed, stream, path, every=5)
    # Then it ends as the uninterrupted run
    as_uninterrupted(resumed, split, stream, "GSS-IQP")


def _killed_while_saving(path):
    torch.set_num_threads(1)
    _, stream = tiny_stream()
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(src)
        if len(calls) == 2:  # the second checkpoint is written but not yet renamed
            sigkill()
        real(src, dst)

    os.replace = replace
    train_resumable(make("GSS-Clust"), stream, path, every=6)
    os._exit(3)


def test_a_kill_while_saving_keeps_the_previous_checkpoint(tmp_path):
    split, stream = tiny_stream()
    path = tmp_path / "run.ckpt"
    assert _fork(_killed_while_saving, path) == -signal.SIGKILL
    # The file is the first checkpoint, whole; the unfinished one is a leftover temp file
    assert read_state(path)["experiences"] == 6
    assert len(list(tmp_path.glob(".run.ckpt.*.tmp"))) == 1
    resumed = make("GSS-Clust")
    train_resumable(resumed, stream, path, every=6)
    as_uninterrupted(resumed, split, stream, "GSS-Clust")


def _interrupt():
    raise KeyboardInterrupt


def test_a_stream_without_slicing_is_resumed_by_walking_it(tmp_path):
    split, stream = tiny_stream()
    path = tmp_path / "run.ckpt"
    experiences = list(stream)
    with pytest.raises(KeyboardInterrupt):
        train_resumable(make("GSS-Greedy", plugins=[StopAfter(12, _interrupt)]),
                        iter(experiences), path, every=5)
    resumed = make("GSS-Greedy")
    assert train_resumable(resumed, (e for e in experiences), path, every=5) == 30
    as_uninterrupted(resumed, split, stream, "GSS-Greedy")


def test_chunked_training_equals_one_call(tmp_path):
    split, stream = tiny_stream()
    chunked = make("GSS-IQP")
    for start in range(0, 30, 7):
        chunked.train(stream[start : start + 7])
    as_uninterrupted(chunked, split, stream, "GSS-IQP")


def test_state_is_weights_only_and_checked_on_load(tmp_path):
    _, stream = tiny_stream()
    strategy = make("GSS-Clust")
    strategy.train(stream[:4])
    path = tmp_path / "s.ckpt"
    save_state(strategy, path, experiences=4)
    header, checksum, payload = path.read_bytes().split(b"\n", 2)
    assert header == b"avalanche-gss checkpoint" and len(checksum) == 64
    state = torch.load(io.BytesIO(payload), weights_only=True)  # no arbitrary object in it
    assert state["experiences"] == 4 and state["format"] == FORMAT_VERSION
    assert [p["name"] for p in state["plugins"]] == ["OnlineRehearsalPlugin"]
    # A strategy with other stateful plugins, or another format, is refused
    with pytest.raises(ValueError, match="another configuration"):
        load_state(make("GSS-IQP-constrained"), path)
    bad = strategy_state_dict(strategy) | {"format": 99, "experiences": 4}
    torch.save(bad, tmp_path / "bad.ckpt")
    with pytest.raises(ValueError, match="format"):
        load_state(make("GSS-Clust"), tmp_path / "bad.ckpt")
    with pytest.raises(ValueError, match="every"):
        train_resumable(make("GSS-Clust"), stream, path, every=0)
    with pytest.raises(ValueError, match="only 3"):
        train_resumable(make("GSS-Clust"), stream[:3], path)


def test_avalanche_checkpoint_helpers_resume_our_strategies(tmp_path):
    split, stream = tiny_stream()
    path = tmp_path / "avalanche.pkl"
    # Given Avalanche's own helpers (dill pickle of the whole strategy) between train calls
    first = make("GSS-IQP", momentum=0.5)
    first.train(stream[:13])
    save_checkpoint(first, str(path))
    # When a fresh strategy loads the file and learns the rest of the stream
    resumed, done = maybe_load_checkpoint(make("GSS-IQP", momentum=0.5), str(path))
    assert done == 13
    resumed.train(stream[done:])
    # Then it ends as the uninterrupted run
    as_uninterrupted(resumed, split, stream, "GSS-IQP", momentum=0.5)
    # And that file cannot be read without unpickling arbitrary objects
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)


# ------------------------------------------------------------------ models that grow
def _growing_mlp():
    """The tests' MLP shape, with Avalanche's IncrementalClassifier as its output layer."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), IncrementalClassifier(32))


def _task_stream():
    """Five experiences of two classes each, task labels 0..4 (a new head for each)."""
    def data(seed):
        gen = torch.Generator().manual_seed(seed)
        y = torch.arange(10).repeat_interleave(8)
        x = torch.randn(len(y), 6, generator=gen) + y[:, None].float()
        return _make_taskaware_tensor_classification_dataset(x, y, task_labels=0)

    return nc_benchmark(data(0), data(1), 5, task_labels=True, shuffle=False,
                        fixed_class_order=list(range(10))).train_stream


def _gss_incremental(plugins=()):
    torch.manual_seed(0)
    model = _growing_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return GSSGreedy(model=model, optimizer=optimizer, mem_size=30, n=5, n_iter=2, seed=0,
                     plugins=list(plugins))


def _naive_multi_head(plugins=()):
    torch.manual_seed(0)
    model = MTSimpleMLP(input_size=6, hidden_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return Naive(model=model, optimizer=optimizer, train_mb_size=4, train_epochs=1,
                 evaluator=quiet_evaluator(), plugins=list(plugins))


GROWING = {  # name: (strategy builder, stream, head weight that grows, its initial outputs)
    "IncrementalClassifier+GSS-Greedy": (_gss_incremental, lambda: tiny_stream()[1][:14],
                                         "3.classifier.weight", 2),
    "MTSimpleMLP+Naive": (_naive_multi_head, _task_stream,
                          "classifier.classifiers.1.classifier.weight", None),
}


def _killed_growing_run(kind, path):
    torch.set_num_threads(1)
    make, stream, _, _ = GROWING[kind]
    train_resumable(make([KillAt(3 if kind == "MTSimpleMLP+Naive" else 10)]), stream(), path,
                    every=2 if kind == "MTSimpleMLP+Naive" else 4)
    os._exit(3)


def _same_model(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert sa[key].shape == sb[key].shape and torch.equal(sa[key], sb[key]), key
    # the task modules' output width and seen tasks (outside the state_dict)
    assert model_layout(a) == model_layout(b)


def _same_optimizer(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]  # same parameters, in the same order
    assert sa["state"].keys() == sb["state"].keys()
    for index, state in sa["state"].items():
        assert state.keys() == sb["state"][index].keys()
        assert all(torch.equal(state[k], sb["state"][index][k]) for k in state), index


@pytest.mark.parametrize("kind", list(GROWING))
def test_a_model_whose_head_grew_resumes_bit_for_bit(tmp_path, kind):
    make, stream, head, initial = GROWING[kind]
    every = 2 if kind == "MTSimpleMLP+Naive" else 4
    path = tmp_path / "run.ckpt"
    # Given a run killed (SIGKILL) after its head grew: new classes (and, for the
    # multi-head model, new tasks) came before the last checkpoint
    assert _fork(_killed_growing_run, kind, path) == -signal.SIGKILL
    saved = read_state(path)
    assert saved["experiences"] == (2 if kind == "MTSimpleMLP+Naive" else 8)
    assert head in saved["model"]  # the second task's head exists
    if initial is not None:
        assert saved["model"][head].shape[0] > initial  # the head has more outputs
    # When a freshly built strategy resumes it
    resumed = make()
    assert train_resumable(resumed, stream(), path, every=every) == len(stream())
    # Then it ends as the uninterrupted run: model (grown heads, masks), optimizer
    reference = make()
    reference.train(stream())
    _same_model(resumed.model, reference.model)
    _same_optimizer(resumed.optimizer, reference.optimizer)
    assert [p for g in resumed.optimizer.param_groups for p in g["params"]] == \
        list(resumed.model.parameters())  # the grown ones
    # And reloading the finished run's checkpoint with the same settings is accepted
    again = make()
    assert train_resumable(again, stream(), path, every=every) == len(stream())
    _same_model(again.model, reference.model)


@pytest.mark.parametrize("kind", list(GROWING))
def test_a_grown_checkpoint_of_another_configuration_leaves_the_model_as_it_was(tmp_path, kind):
    make, stream, head, initial = GROWING[kind]
    path = tmp_path / "run.ckpt"
    grown = make()
    grown.train(stream()[:8])  # a second task: new classes (and a new head)
    save_state(grown, path, experiences=8)
    other = make()
    other.optimizer.param_groups[0]["lr"] = 0.5
    before = {k: v.clone() for k, v in other.model.state_dict().items()}
    with pytest.raises(CheckpointError, match="lr: 0.05 in the file, 0.5 here"):
        load_state(other, path)
    after = other.model.state_dict()
    assert head in read_state(path)["model"] and list(before) == list(after)
    assert head not in before or before[head].shape[0] == initial
    assert all(torch.equal(before[k], after[k]) for k in before)  # not grown, not loaded
    assert [p for g in other.optimizer.param_groups for p in g["params"]] == \
        list(other.model.parameters())
