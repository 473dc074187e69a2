"""Writing a data set in kubetrain's format: shards, `dataset.json`, and the directory swapped in whole.

The new directory is written under a temporary name beside the target and renamed into place, so
a crash never leaves a directory that looks complete; the target is replaced only when it is empty
or verifiably an earlier kubetrain data set holding nothing else (:func:`check_output_dir`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kubetrain.data.dataset_format import (
    DATASET_JSON,
    DatasetInfo,
    ShardInfo,
    file_sha256,
    read_dataset_info,
    shard_file_name,
)
from kubetrain.data.errors import write_error
from kubetrain.data.locks import directory_turn
from kubetrain.errors import DataError


def _checked_arrays(
    split: str, x: npt.ArrayLike, y: npt.ArrayLike, num_classes: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    xa = np.asarray(x)
    ya = np.asarray(y)
    if xa.ndim < 2 or xa.shape[0] == 0:
        raise DataError(f"{split} split: x has shape {xa.shape}; expected (n >= 1, *features)")
    if ya.shape != (xa.shape[0],):
        raise DataError(f"{split} split: y has shape {ya.shape}; expected ({xa.shape[0]},)")
    if not np.issubdtype(ya.dtype, np.integer):
        raise DataError(f"{split} split: y has dtype {ya.dtype}; expected integer labels")
    if ya.min() < 0 or ya.max() >= num_classes:
        raise DataError(f"{split} split: labels span [{ya.min()}, {ya.max()}]; expected [0, {num_classes - 1}]")
    xf = xa.astype(np.float32, copy=False)
    if not np.isfinite(xf).all():
        raise DataError(f"{split} split: x contains NaN or infinite values")
    return xf, ya.astype(np.int64, copy=False)


def _save_npz(path: Path, arrays: Mapping[str, npt.NDArray[Any]]) -> None:
    """What np.savez writes (one stored, zip64 `.npy` member per array), but a failed write closes
    the zip at once: np.savez leaves its ZipFile open, and when it is collected later it tries to
    finish the file again and prints a second error ("Exception ignored ... Traceback")."""
    with (
        open(path, "wb") as f,
        zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf,
    ):
        for key, value in arrays.items():
            with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)  # type: ignore[no-untyped-call]


def _write_shards(
    tmp: Path,
    split: str,
    x: npt.NDArray[np.float32],
    y: npt.NDArray[np.int64],
    count: int,
) -> tuple[ShardInfo, ...]:
    # Contiguous, nearly equal shards: record (split, shard, index) maps to one row, in order.
    bounds = np.linspace(0, len(x), count + 1).round().astype(int)
    shards = []
    for i in range(count):
        name = shard_file_name(split, i, count)
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        _save_npz(tmp / name, {"x": x[lo:hi], "y": y[lo:hi]})
        shards.append(ShardInfo(file=name, records=hi - lo, sha256=file_sha256(tmp / name)))
    return tuple(shards)


def check_output_dir(out_dir: str | os.PathLike[str]) -> None:
    """Raise DataError unless `out_dir` is absent, empty, or an earlier kubetrain data set and nothing else.

    A directory is replaced whole, so only one that is verifiably a data set this code wrote (its
    `dataset.json` reads as one, and every other entry is a shard it lists) may be: a user's
    directory that happens to hold a `dataset.json` keeps all its files.
    """
    out = Path(out_dir)
    try:
        if out.exists() and not out.is_dir():
            raise DataError(f"{out}: exists and is not a directory")
        entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    except OSError as e:
        raise DataError(f"{out}: cannot be used as the output directory ({e.strerror}); choose another --out") from e
    if not entries:
        return
    if DATASET_JSON not in entries:
        raise DataError(
            f"{out}: exists, is not empty and holds no {DATASET_JSON}; refusing to overwrite it "
            "(choose another --out or empty it)"
        )
    try:
        info = read_dataset_info(out)
    except DataError as e:
        raise DataError(
            f"{out}: its {DATASET_JSON} is not a kubetrain data set ({e}); refusing to replace the directory "
            "(choose another --out)"
        ) from e
    listed = {DATASET_JSON} | {s.file for split in info.splits.values() for s in split}
    # A listed name must also be what this code writes there: a plain file, not a user's
    # directory (or a link to one) that happens to carry a shard's name.
    stray = [name for name in entries if name not in listed or not _plain_file(out / name)]
    if stray:
        shown = ", ".join(stray[:10]) + (f" and {len(stray) - 10} more" if len(stray) > 10 else "")
        raise DataError(
            f"{out}: holds files that are not part of its data set ({shown}); refusing to replace the directory "
            "and lose them (choose another --out, or move them away)"
        )


def _plain_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished `tmp` dir to `out`, replacing an earlier dataset or an empty dir only.

    Writers of one `out` take turns (locks.py): another's swap between this check and this rename
    failed the rename, or the check itself.
    """
    with directory_turn(out):
        _swap_in(tmp, out)


def _swap_in(tmp: Path, out: Path) -> None:
    check_output_dir(out)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rename(out, old / out.name)
    try:
        os.rename(tmp, out)
    except OSError:
        if old is not None:
            os.rename(old / out.name, out)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def write_dataset(
    out_dir: str | os.PathLike[str],
    *,
    name: str,
    x_train: npt.ArrayLike,
    y_train: npt.ArrayLike,
    x_test: npt.ArrayLike,
    y_test: npt.ArrayLike,
    num_classes: int,
    shards: int = 1,
    normalization: Mapping[str, float],
    source: str,
) -> DatasetInfo:
    """Write train (`shards` shards) and test (one shard) plus `dataset.json`, atomically.

    x arrays must already be normalised as `normalization` says and shaped (n, *feature_shape);
    they are stored as float32, labels as int64 in [0, num_classes). An existing dataset at
    `out_dir` is replaced only once the new one is complete.
    """
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise DataError(f"shards: got {shards!r}; expected an integer >= 1")
    xtr, ytr = _checked_arrays("train", x_train, y_train, num_classes)
    xte, yte = _checked_arrays("test", x_test, y_test, num_classes)
    if xtr.shape[1:] != xte.shape[1:]:
        raise DataError(f"train x has features {xtr.shape[1:]}, test x has {xte.shape[1:]}")
    if shards > len(xtr):
        raise DataError(
            f"shards: got {shards}; the train split has only {len(xtr)} records (expected at most one shard per record)"
        )
    out = Path(out_dir).absolute()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as e:
        raise write_error(out, e) from e
    try:
        info = DatasetInfo(
            name=name,
            feature_shape=tuple(int(d) for d in xtr.shape[1:]),
            dtype="float32",
            num_classes=num_classes,
            splits={
                "train": _write_shards(tmp, "train", xtr, ytr, shards),
                "test": _write_shards(tmp, "test", xte, yte, 1),
            },
            normalization=normalization,
            source=source,
        )
        with open(tmp / DATASET_JSON, "w", encoding="utf-8") as f:
            json.dump(info.to_json(), f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; other pods' users must read the dataset
        _replace_dir(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk keeps nothing half-written
        raise write_error(out, e) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info
