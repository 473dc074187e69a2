"""Recognise fetched files by content and read them into raw arrays.

One file may be an ``.npz`` (keys ``x_train, y_train[, x_test, y_test]`` as in Keras' mnist.npz,
or ``x, y``), a tar/zip/gz archive (extracted safely, then searched for the same), or a gzip'd
npz. Several files are the MNIST idx set: train images and labels, and optionally the t10k (test)
images and labels, told apart by name (``train``/``t10k``/``test``, ``images``/``labels``) and
checked by their magic numbers.
"""

from __future__ import annotations

import gzip
import math
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from kubetrain.data.archives import MAX_UNPACKED_BYTES, archive_kind, is_zip, safe_extract, too_big
from kubetrain.data.errors import TMP_FIX, CorruptFileError, write_error
from kubetrain.data.idx import GZIP_MAGIC, looks_like_idx, read_idx
from kubetrain.data.prepare import RawDataset
from kubetrain.errors import DataError

__all__ = ["LocalFile", "load_files", "mnist_role"]

_LISTED = 10  # files an error names before "and N more"
_NPZ_KEYS = (("x_train", "y_train", "x_test", "y_test"), ("x_train", "y_train"), ("x", "y"))


@dataclass(frozen=True)
class LocalFile:
    """A file on this machine, the name it had at the source, and where it came from."""

    path: Path
    name: str
    origin: str  # the URL, path or "ARCHIVE!member" used in error messages


def mnist_role(name: str) -> tuple[str, str] | None:
    """(split, kind) of an MNIST file name, e.g. ('test', 'images') for t10k-images-idx3-ubyte."""
    lower = name.lower()
    split = "test" if ("t10k" in lower or "test" in lower) else "train" if "train" in lower else None
    kind = (
        "images"
        if ("image" in lower or "idx3" in lower)
        else "labels"
        if ("label" in lower or "idx1" in lower)
        else None
    )
    return (split, kind) if split and kind else None


def _head(path: Path, n: int = 512) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _is_npz(path: Path) -> bool:
    # By the signature at the start: a tar holding an .npz also "is a zipfile" to zipfile.
    if not is_zip(path):
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except zipfile.BadZipFile:
        return False  # a truncated zip: read as an archive, which reports it as corrupt or truncated
    return bool(names) and all(n.endswith(".npy") for n in names)


def _npy_header(member: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """The shape and dtype an .npy member declares, read from its header alone."""
    npy: Any = np.lib.format  # untyped in numpy's stubs
    version = npy.read_magic(member)
    if version == (1, 0):
        shape, _fortran, dtype = npy.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, _fortran, dtype = npy.read_array_header_2_0(member)
    else:
        raise ValueError(f"npy format version {version[0]}.{version[1]} is not supported; save it with numpy.savez")
    return tuple(shape), dtype


def _check_npz_arrays(f: LocalFile, npz: Any, keys: Sequence[str], max_bytes: int) -> None:
    """Refuse what np.load would turn into a traceback or a huge allocation, before any array is read."""
    total = 0
    for key in keys:
        with npz.zip.open(f"{key}.npy") as member:
            shape, dtype = _npy_header(member)
        if not shape:
            raise DataError(f"{f.origin}: npz array {key!r} is a single value (0-d); expected one entry per record")
        total += math.prod(shape) * dtype.itemsize
        if total > max_bytes:
            what = f"the npz's arrays (up to {key!r}, shape {list(shape)}, {dtype}) declare"
            raise too_big(f.origin, what, max_bytes)


def _load_npz(f: LocalFile, max_bytes: int = MAX_UNPACKED_BYTES) -> RawDataset:
    try:
        with np.load(f.path, allow_pickle=False) as npz:
            keys = set(npz.files)
            for wanted in _NPZ_KEYS:
                if keys >= set(wanted):
                    _check_npz_arrays(f, npz, wanted, max_bytes)
                    arrays = [np.asarray(npz[k]) for k in wanted]
                    break
            else:
                raise DataError(
                    f"{f.origin}: npz has arrays {sorted(keys)}; expected x_train, y_train (and x_test, y_test) or x, y"
                )
    except (OSError, zipfile.BadZipFile, zlib.error, EOFError) as e:
        # A bad CRC or a broken deflate stream: the bytes are damaged, not the layout wrong.
        raise CorruptFileError(f"{f.origin}: cannot read npz: {e}") from e
    except (ValueError, KeyError) as e:
        raise DataError(f"{f.origin}: cannot read npz: {e}") from e
    x, y = arrays[0], arrays[1]
    xt, yt = (arrays[2], arrays[3]) if len(arrays) == 4 else (None, None)
    for label, xs, ys in (("train", x, y), ("test", xt, yt)):
        if xs is not None and ys is not None and len(xs) != len(ys):
            raise DataError(f"{f.origin}: {label} has {len(xs)} inputs but {len(ys)} labels")
    stem = f.name.split(".")[0] or "dataset"
    return RawDataset(name=stem, x_train=x, y_train=y, x_test=xt, y_test=yt)


def _pair(
    files: dict[tuple[str, str], LocalFile], split: str
) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]] | None:
    images, labels = files.get((split, "images")), files.get((split, "labels"))
    if images is None and labels is None:
        return None
    if images is None or labels is None:
        have = (images or labels).name  # type: ignore[union-attr]
        raise DataError(
            f"{have}: found {split} {'images' if images else 'labels'} but not the "
            f"matching {'labels' if images else 'images'}"
        )
    x = read_idx(images.path, images.origin, role=("images", 3))
    y = read_idx(labels.path, labels.origin, role=("labels", 1))
    if x.ndim != 3:
        raise DataError(
            f"{images.origin}: idx has dimensions {list(x.shape)}; expected images (n, rows, cols), magic 00000803"
        )
    if y.ndim != 1:
        raise DataError(f"{labels.origin}: idx has dimensions {list(y.shape)}; expected labels (n,), magic 00000801")
    if len(x) != len(y):
        raise DataError(
            f"{images.origin} has {len(x)} images but {labels.origin} has {len(y)} labels; expected the same number"
        )
    return x, y


def _load_mnist(files: Sequence[LocalFile], *, strict: bool) -> RawDataset:
    roles: dict[tuple[str, str], LocalFile] = {}
    for f in files:
        role = mnist_role(f.name)
        if role is None:
            if strict:
                raise DataError(
                    f"{f.origin}: cannot tell which MNIST file this is from its name; expected "
                    "names like train-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz"
                )
            continue
        if role in roles:
            raise DataError(f"{f.origin} and {roles[role].origin} are both {' '.join(role)}")
        roles[role] = f
    train = _pair(roles, "train")
    if train is None:
        shown = ", ".join(f.origin for f in files[:_LISTED])
        more = f" and {len(files) - _LISTED} more" if len(files) > _LISTED else ""
        raise DataError(
            f"{shown}{more}: no MNIST training images and labels found; "
            "expected train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]"
        )
    test = _pair(roles, "test")
    return RawDataset(
        name="mnist",
        x_train=train[0],
        y_train=train[1],
        x_test=test[0] if test else None,
        y_test=test[1] if test else None,
    )


def _copy_capped(src: gzip.GzipFile, dst: IO[bytes], limit: int) -> bool:
    """Copy `src` to `dst` while it stays within `limit` bytes; False (and the copy cut) past it."""
    written = 0
    # One byte past the limit tells "exactly the limit" from "more"; nothing beyond it is written.
    while chunk := src.read(min(1 << 20, limit + 1 - written)):
        written += len(chunk)
        if written > limit:
            return False
        dst.write(chunk)
    return True


def _gunzip_to(f: LocalFile, work: Path, max_bytes: int) -> LocalFile:
    out = Path(tempfile.mkdtemp(dir=work)) / f.name.removesuffix(".gz")
    try:
        with gzip.open(f.path, "rb") as src, open(out, "wb") as dst:
            within = _copy_capped(src, dst, max_bytes)
        if not within:
            out.unlink()
            raise too_big(f.origin, "the gzip inflates to", max_bytes)
    except EOFError as e:
        raise CorruptFileError(f"{f.origin}: truncated gzip: {e}") from e
    except zlib.error as e:
        raise CorruptFileError(f"{f.origin}: corrupt gzip: {e}") from e
    except OSError as e:
        if isinstance(e, gzip.BadGzipFile) or e.errno is None:
            raise CorruptFileError(f"{f.origin}: corrupt gzip: {e}") from e
        # The machine's problem (a full disk under TMPDIR), not the data's.
        raise write_error(out, e, fix=TMP_FIX) from e
    return LocalFile(out, out.name, f.origin)


def _extracted_files(f: LocalFile, work: Path, max_bytes: int) -> list[LocalFile]:
    dest = Path(tempfile.mkdtemp(dir=work))
    safe_extract(f.path, dest, source=f.origin, max_bytes=max_bytes)
    found = sorted(p for p in dest.rglob("*") if p.is_file() and not p.is_symlink())
    return [LocalFile(p, p.name, f"{f.origin}!{p.relative_to(dest)}") for p in found]


def load_files(files: Sequence[LocalFile], work: Path, *, max_bytes: int = MAX_UNPACKED_BYTES) -> RawDataset:
    """Read fetched files as a data set; `work` is a scratch dir for extraction.

    An archive, a .gz or an npz may unpack to `max_bytes` (:data:`MAX_UNPACKED_BYTES` by default).
    """
    if len(files) > 1:
        return _load_mnist(files, strict=True)
    (f,) = files
    if _is_npz(f.path):
        return _load_npz(f, max_bytes)
    kind = archive_kind(f.path)
    if kind is not None:
        members = _extracted_files(f, work, max_bytes)
        npz = [m for m in members if _is_npz(m.path)]
        if len(npz) == 1:
            return _load_npz(npz[0], max_bytes)
        if not members:
            raise DataError(f"{f.origin}: the archive is empty")
        return _load_mnist(members, strict=False)
    head = _head(f.path)
    if head.startswith(GZIP_MAGIC):
        return load_files([_gunzip_to(f, work, max_bytes)], work, max_bytes=max_bytes)
    if not head:
        raise DataError(f"{f.origin}: the file is empty")
    if looks_like_idx(head):
        raise DataError(
            f"{f.origin}: a single idx file holds only images or only labels; give the MNIST "
            "files as a base URL (ending in /) or a list of URLs"
        )
    raise DataError(
        f"{f.origin}: unrecognised format (starts with {head[:8].hex()}); expected .npz, a "
        "tar/zip/gz archive, or the MNIST idx files"
    )
