"""MNIST idx files (raw or gzip'd): magic number, dimensions and payload size all checked.

The format (http://yann.lecun.com/exdb/mnist/): two zero bytes, a type code (0x08 = ubyte, ...),
the number of dimensions, then each dimension as a big-endian uint32, then the data in C order.
MNIST images are ``00000803`` (n, rows, cols), labels ``00000801`` (n,).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kubetrain.data.errors import CorruptFileError, DataError

__all__ = ["GZIP_MAGIC", "IDX_TYPES", "decode_idx", "looks_like_idx", "read_idx", "read_maybe_gzip"]

GZIP_MAGIC = b"\x1f\x8b"
IDX_TYPES: dict[int, str] = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def looks_like_idx(head: bytes) -> bool:
    """Whether the first four bytes are an idx magic number."""
    return len(head) >= 4 and head[:2] == b"\0\0" and head[2] in IDX_TYPES and 1 <= head[3] <= 4


def read_maybe_gzip(path: Path, name: str) -> bytes:
    """The content of `path`, gunzipped if it starts with the gzip magic number."""
    data = path.read_bytes()
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except EOFError as e:
        raise CorruptFileError(f"{name}: truncated gzip ({len(data)} bytes; {e})") from e
    except (OSError, zlib.error) as e:
        raise CorruptFileError(f"{name}: corrupt gzip: {e}") from e


def decode_idx(data: bytes, name: str, *, role: tuple[str, int] | None = None) -> npt.NDArray[np.generic]:
    """Parse idx bytes into an array (native byte order).

    `role`, e.g. ``("images", 3)``, is what the file must hold and its number of dimensions: a
    magic number with another count is reported as the wrong magic number it is, before its
    dimensions are read (with the wrong count they are payload bytes, and nonsense).
    """
    if not looks_like_idx(data):
        raise DataError(
            f"{name}: not an MNIST idx file: wrong magic number {data[:4].hex() or '(empty file)'}; expected "
            "00000803 for images or 00000801 for labels"
        )
    dtype = np.dtype(IDX_TYPES[data[2]])
    ndim = data[3]
    if role is not None and ndim != role[1]:
        what, want = role
        raise DataError(
            f"{name}: wrong magic number {data[:4].hex()} for {what}: it gives {ndim} dimension(s); expected "
            f"{what} with {want}, magic 0000{data[2]:02x}{want:02x} (MNIST {what}: 0000080{want})"
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{name}: idx header truncated ({len(data)} bytes, need {header})")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    count = int(np.prod(dims, dtype=np.int64))
    expected, actual = count * dtype.itemsize, len(data) - header
    if actual != expected:
        magic = data[:4].hex()
        if expected == 0 or expected > 16 * len(data) or actual > 16 * expected:
            # Far off either way, beyond any truncation: the magic number's type or dimension count
            # is wrong, so payload bytes were read as dimensions (or dimensions as payload).
            raise DataError(
                f"{name}: wrong idx magic number {magic} ({ndim} dimensions of {dtype.name}): it makes the data "
                f"{list(dims)}, which does not fit the file's {len(data)} bytes; expected 00000803 for images or "
                "00000801 for labels"
            )
        problem = "truncated" if actual < expected else "has trailing bytes"
        raise DataError(
            f"{name}: idx data {problem}: magic {magic}, dimensions {list(dims)} need {expected} bytes, "
            f"the file has {actual}"
        )
    array = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=False)


def read_idx(path: Path, name: str, *, role: tuple[str, int] | None = None) -> npt.NDArray[np.generic]:
    """Read an idx file, gzip'd or raw; `role` as in :func:`decode_idx`."""
    return decode_idx(read_maybe_gzip(path, name), name, role=role)
