"""Inputs validated once, up front, with errors naming the file and the field; cached runs
identified by the data's content; diverged runs flagged in every output."""

import numpy as np
import pytest
import torch

from avalanche_gss.reproduce.cli import parse_args
from avalanche_gss.reproduce.experiments import tables
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS
from avalanche_gss.reproduce.runs import planning as runs
from avalanche_gss.reproduce.runs.planning import check_model
from avalanche_gss.reproduce.runs.training import RunSettings
from avalanche_gss.streams import ArrayDataset, load_npz


def save(path, x_train, y_train, x_test=None, y_test=None):
    x_test = x_train if x_test is None else x_test
    y_test = y_train if y_test is None else y_test
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def blobs(path, n_classes=10, per_class=30, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, size=(n_classes, dim))
    y = np.repeat(np.arange(n_classes), per_class)
    x = (centres[y] + rng.normal(0, 1, size=(len(y), dim))).astype(np.float32)
    return save(path, x, y.astype(np.int64))


def test_float64_beyond_float32_is_refused_naming_file_and_field(tmp_path):
    x = np.ones((20, 4), dtype=np.float64)
    x[3, 1] = 1e300
    path = save(tmp_path / "huge.npz", x, np.arange(20) % 2)
    with pytest.raises(ValueError, match=r"huge\.npz: x_train .*float32"):
        load_npz(path)


def test_labels_that_would_wrap_or_blow_up_the_head_are_refused(tmp_path):
    x = np.zeros((4, 3), dtype=np.float32)
    big = np.array([0, 1, 2**63, 1], dtype=np.uint64)
    with pytest.raises(ValueError, match=r"wrap\.npz: y_train holds label 9223372036854775808"):
        load_npz(save(tmp_path / "wrap.npz", x, big, x, np.array([0, 1, 0, 1])))
    labels = np.array([0, 1, 10**9, 1])
    with pytest.raises(ValueError, match=r"giant\.npz: y_train's largest label is 1000000000"):
        load_npz(save(tmp_path / "giant.npz", x, labels))


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not really a zip", b"plain text"])
def test_a_file_that_is_not_an_npz_is_named(tmp_path, content):
    path = tmp_path / "broken.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"broken\.npz: not"):
        load_npz(path)


def test_a_truncated_npz_is_named(tmp_path):
    path = blobs(tmp_path / "cut.npz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.npz"):
        load_npz(path)


def toy(n_classes, shape=(8,), per_class=20):
    y = torch.arange(n_classes).repeat_interleave(per_class)
    x = torch.rand(len(y), *shape)
    return ArrayDataset("toy", "toy", x, y, x.clone(), y.clone(), n_classes)


@pytest.mark.parametrize("experiment, n_classes", [("table1", 3), ("table2", 1),
                                                   ("table4", 9)])
def test_too_few_classes_for_the_protocol_are_refused_up_front(experiment, n_classes):
    with pytest.raises(ValueError, match=f"needs at least .* the data hold {n_classes}"):
        PROTOCOLS[experiment].check(toy(n_classes))


def test_images_too_small_for_resnet_with_a_one_sample_buffer_are_refused_up_front():
    data = toy(10, shape=(3, 8, 8))
    run = RunSettings(method="Reservoir", buffer_size=1, model="resnet18")
    with pytest.raises(ValueError, match=r"resnet18 model cannot train on a batch of 1"):
        check_model(data, [run])
    check_model(data, [RunSettings(method="Reservoir", buffer_size=20, model="resnet18")])


def test_a_method_that_cannot_train_the_model_is_refused_up_front():
    # CB-GSS scoring by the training step cannot read per-sample gradients through the
    # ResNet-18's train-mode BatchNorm; on the MLP it can
    data = toy(10, shape=(3, 16, 16))
    step = {"method": "CB-GSS", "options": {"score_from": "step"}, "buffer_size": 20}
    with pytest.raises(ValueError, match=r"^the resnet18 model cannot be trained by CB-GSS "
                       r"with \{'score_from': 'step'\}: CB-GSS scores by the training step, "
                       r"but BatchNorm2d is in train mode"):
        check_model(data, [RunSettings(method="Reservoir", model="resnet18"),
                           RunSettings(**step, model="resnet18")])
    check_model(data, [RunSettings(**step, model="mlp"),
                       RunSettings(method="CB-GSS", buffer_size=20, model="resnet18")])


def test_a_buffer_larger_than_the_training_data_is_refused_before_any_run(tmp_path,
                                                                         monkeypatch):
    data = blobs(tmp_path / "blobs.npz", per_class=30)  # 300 training samples
    args = parse_args(["table1", "--quick", "--data", str(data), "--methods", "Rand",
                       "--buffer-sizes", "20", "301", "--out", str(tmp_path / "o")])

    def no_run(*args, **kwargs):
        raise AssertionError("a run started")

    monkeypatch.setattr(runs, "run_sweep", no_run)
    with pytest.raises(SystemExit) as refused:
        tables.TABLES["table1"].run(args)
    message = str(refused.value.code)
    assert message == ("python -m reproduce: error: argument --buffer-sizes: 301 is more than "
                       f"the 300 training samples of {data}; give at most 300")
    assert not (tmp_path / "o").exists()
