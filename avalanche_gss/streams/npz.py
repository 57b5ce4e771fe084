"""``.npz`` files as datasets (``--data PATH.npz``), checked before anything is trusted."""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from torch import Tensor

from avalanche_gss._files import FileRefused, open_regular

from .arrays import ArrayDataset, _uint8_images

__all__ = ["load_npz"]

_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
_MAX_LABEL = 2**31 - 1
_DEFLATE_RATIO = 1032
"""The most bytes one byte of deflated data can expand to (deflate's limit is 1032:1)."""


def load_npz(path: str | os.PathLike[str]) -> ArrayDataset:
    """Load ``x_train, y_train, x_test, y_test`` from an ``.npz`` file, validating them.

    Accepted inputs: integer images ``[N, H, W]`` or ``[N, C, H, W]`` with values 0-255
    (scaled by 1/255), float images of those ranks already in ``[0, 1]``, or float
    features ``[N, D]`` (kept as they are, must be finite). Labels: 1-D integers >= 0; the
    train and test sets must hold the same classes, and ``num_classes`` = max label + 1
    may not exceed the number of training samples. Values are checked after the cast to
    float32 (a float64 of 1e300 would become infinite).

    :param path: the ``.npz`` file.
    :return: the dataset, named after the file's stem.
    :raises ValueError: on a file that is not a readable ``.npz`` of plain arrays, a
        missing key, wrong rank, non-integer, negative or too large labels, mismatched
        lengths or shapes, train/test class sets that differ, values out of range; each
        message names the file and the field.
    """
    path = os.path.abspath(os.fspath(path))
    try:
        file = open_regular(path, what=".npz file", follow_links=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such .npz file: {path}") from None
    except FileRefused as err:
        raise ValueError(f"{path}: {err.reason}; an .npz dataset is a file numpy.savez "
                         "writes") from None
    except OSError as err:
        raise ValueError(f"{path}: not a readable .npz file ({type(err).__name__}: "
                         f"{err.strerror or err})") from None
    with file:
        arrays = _read_arrays(file, path)
    x_train = _npz_inputs(arrays["x_train"], "x_train", path)
    x_test = _npz_inputs(arrays["x_test"], "x_test", path)
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ValueError(
            f"{path}: x_train samples have shape {tuple(x_train.shape[1:])} but x_test "
            f"samples {tuple(x_test.shape[1:])}"
        )
    y_train = _npz_labels(arrays["y_train"], "y_train", len(x_train), path)
    y_test = _npz_labels(arrays["y_test"], "y_test", len(x_test), path)
    train_classes = set(y_train.unique().tolist())
    test_classes = set(y_test.unique().tolist())
    top = max(train_classes)
    if top + 1 > len(y_train):
        raise ValueError(
            f"{path}: y_train's largest label is {top}, so the model would need {top + 1} "
            f"outputs, more than the {len(y_train)} training samples can hold classes; "
            "number the classes 0..K-1")
    if train_classes != test_classes:
        raise ValueError(
            f"{path}: train and test hold different classes (only in train: "
            f"{sorted(train_classes - test_classes)}, only in test: "
            f"{sorted(test_classes - train_classes)}); every class needs train and test samples"
        )
    return ArrayDataset(
        name=Path(path).stem,
        source=f"npz file {path}: {len(y_train):,} train / {len(y_test):,} test samples",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=int(max(train_classes)) + 1,
    )


def _read_arrays(file: BinaryIO, path: str) -> dict[str, np.ndarray]:
    """The four arrays of the open ``.npz`` file, each checked to fit the file first."""
    if not zipfile.is_zipfile(file):
        size = os.fstat(file.fileno()).st_size
        what = "empty" if size == 0 else "not a zip archive"
        raise ValueError(f"{path}: not an .npz file ({what}, {size} bytes); save one with "
                         "numpy.savez")
    try:
        file.seek(0)
        with np.load(file, allow_pickle=False) as npz:
            missing = [k for k in _NPZ_KEYS if k not in npz.files]
            if missing:
                raise ValueError(
                    f"{path}: missing key(s) {', '.join(missing)}; an .npz dataset needs "
                    f"{', '.join(_NPZ_KEYS)} (found: {', '.join(npz.files) or 'none'})"
                )
            arrays = {}
            for k in _NPZ_KEYS:
                try:
                    _check_member(npz.zip, k, path)
                    arrays[k] = npz[k]
                except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as err:
                    if isinstance(err, _Oversized):
                        raise
                    raise ValueError(f"{path}: field {k} cannot be read "
                                     f"({type(err).__name__}: {err}); the file is damaged or "
                                     "holds objects (only plain arrays are accepted)") from err
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path}: not a readable .npz file ({type(err).__name__}: {err})"
                         ) from err
    return arrays


class _Oversized(ValueError):
    """An array whose header declares more data than its member of the archive holds."""


def _check_member(archive: zipfile.ZipFile, key: str, path: str) -> None:
    """Refuse the array ``key`` if its header declares more bytes than its member holds.

    ``np.load`` allocates the array its header declares before reading a byte of its data:
    a small file could ask for any amount of memory. The member's size is bounded by the
    archive's own record of it and, compressed, by what its compressed bytes can expand to.

    :raises ValueError: the header declares more than the member holds (one line naming
        the file and the field), the member is compressed in a way ``numpy.savez`` never
        writes, or its header is unreadable.
    """
    name = key if key in archive.namelist() else f"{key}.npy"
    info = archive.getinfo(name)
    if info.compress_type == zipfile.ZIP_STORED:
        holds = min(info.file_size, info.compress_size)
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        holds = min(info.file_size, info.compress_size * _DEFLATE_RATIO)
    else:
        raise ValueError(f"compression method {info.compress_type}; numpy.savez and "
                         "savez_compressed write stored or deflated members only")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise ValueError(f"format version {version[0]}.{version[1]}; plain arrays are "
                             "saved in version 1.0 or 2.0")
        data = holds - member.tell()
    need = math.prod(shape) * dtype.itemsize
    if need > data:
        raise _Oversized(f"{path}: field {key}'s header declares shape {tuple(shape)} of "
                         f"{dtype} ({need:,} bytes), but the file holds {max(data, 0):,} bytes "
                         "of it: the file is damaged or made to exhaust memory")


def _npz_inputs(x: np.ndarray, key: str, path: str) -> Tensor:
    """Validate and convert one ``x_*`` array (see :func:`load_npz`)."""
    if np.issubdtype(x.dtype, np.integer):
        if x.ndim not in (3, 4):
            raise ValueError(
                f"{path}: {key} is an integer array of rank {x.ndim} {x.shape}; integer "
                "images must be [N, H, W] or [N, C, H, W] (pass float [N, D] for features)"
            )
        if x.size and (x.min() < 0 or x.max() > 255):
            raise ValueError(f"{path}: {key} integer pixels must lie in 0..255")
        x = x if x.ndim == 4 else x[:, None]
        return _uint8_images(x.astype(np.uint8))
    if np.issubdtype(x.dtype, np.floating):
        if x.ndim not in (2, 3, 4):
            raise ValueError(
                f"{path}: {key} has rank {x.ndim} {x.shape}; expected features [N, D] "
                "or images [N, H, W] / [N, C, H, W]"
            )
        if not np.isfinite(x).all():
            raise ValueError(f"{path}: {key} holds NaN or infinite values")
        with np.errstate(over="ignore"):
            x32 = np.ascontiguousarray(x, dtype=np.float32)  # what the model will see
        if not np.isfinite(x32).all():
            raise ValueError(f"{path}: {key} holds values beyond float32's range "
                             f"(|x| up to {np.abs(x).max():g}; float32 ends at 3.4e38): they "
                             "would become infinite; scale the features")
        if x.ndim > 2 and x.size and (x32.min() < 0.0 or x32.max() > 1.0):
            raise ValueError(
                f"{path}: {key} float images must lie in [0, 1] (found {x.min():g}.."
                f"{x.max():g}); store uint8 pixels or scale them"
            )
        x32 = x32 if x32.ndim != 3 else x32[:, None]
        return torch.as_tensor(x32)
    raise ValueError(f"{path}: {key} has dtype {x.dtype}; expected uint8 images or float data")


def _npz_labels(y: np.ndarray, key: str, n: int, path: str) -> Tensor:
    """Validate and convert one ``y_*`` array (see :func:`load_npz`)."""
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"{path}: {key} has dtype {y.dtype}; labels must be integers "
            "(e.g. y.astype(np.int64) if they are whole numbers)"
        )
    if y.ndim != 1:
        raise ValueError(f"{path}: {key} must be 1-D, got shape {y.shape}")
    if y.shape[0] != n:
        key_x = key.replace("y_", "x_")
        raise ValueError(f"{path}: {key} has {y.shape[0]} labels but {key_x} has {n} samples")
    if n == 0:
        raise ValueError(f"{path}: {key} is empty")
    if y.min() < 0:
        raise ValueError(f"{path}: {key} holds negative labels (min {y.min()}); use 0..K-1")
    if int(y.max()) > _MAX_LABEL:  # compared before the cast: uint64 above 2**63 wraps
        raise ValueError(f"{path}: {key} holds label {int(y.max())}; labels must be class "
                         f"numbers 0..K-1 (at most {_MAX_LABEL})")
    return torch.as_tensor(y.astype(np.int64))
