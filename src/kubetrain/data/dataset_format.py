"""The on-disk dataset format shared by every training program.

A dataset is a directory holding `dataset.json` and `.npz` shards with arrays `x` (float32,
channel-first features) and `y` (int64 labels)::

    dataset.json
    train-00000-of-00004.npz ... train-00003-of-00004.npz
    test-00000-of-00001.npz

`dataset.json` names the dataset, its feature shape, dtype, number of classes, the normalisation
already applied to `x`, the source, and per split the shard files with their record counts and
sha256. A record is addressed by (split, shard, index). Writing one is `dataset_writer`'s job.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kubetrain.errors import DataError

if TYPE_CHECKING:  # numpy loads only where shards are read: a launcher step reading dataset.json needs none
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "DATASET_JSON",
    "FORMAT_VERSION",
    "MAX_CLASSES",
    "DatasetInfo",
    "ShardInfo",
    "file_sha256",
    "load_shard",
    "load_split",
    "read_dataset_info",
    "shard_file_name",
]

# Labels are class indices of one classification head, whose output layer has num_classes units:
# 65,536 is already far more than any data set here; a label of 2**40 is a corrupt file, not a class.
MAX_CLASSES = 1 << 16

DATASET_JSON = "dataset.json"
FORMAT_VERSION = 1
_HASH_CHUNK = 1 << 20


def shard_file_name(split: str, index: int, count: int) -> str:
    """The file name of shard `index` of `count` in `split`, e.g. ``train-00000-of-00004.npz``."""
    return f"{split}-{index:05d}-of-{count:05d}.npz"


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file's content, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise DataError(what)


@dataclass(frozen=True)
class ShardInfo:
    """One shard file of a split: its name relative to the dataset dir, record count and sha256."""

    file: str
    records: int
    sha256: str

    def __post_init__(self) -> None:
        name = Path(self.file)
        _require(
            bool(self.file) and not name.is_absolute() and len(name.parts) == 1,
            f"shard file: got {self.file!r}; expected a plain file name inside the dataset dir",
        )
        _require(
            isinstance(self.records, int) and self.records > 0,
            f"shard {self.file}: records: got {self.records!r}; expected a positive integer",
        )
        _require(
            isinstance(self.sha256, str)
            and len(self.sha256) == 64
            and all(c in "0123456789abcdef" for c in self.sha256),
            f"shard {self.file}: sha256: got {self.sha256!r}; expected 64 lower-case hex digits",
        )


@dataclass(frozen=True)
class DatasetInfo:
    """The content of `dataset.json`: what the shards hold and how they were made."""

    name: str
    feature_shape: tuple[int, ...]
    dtype: str
    num_classes: int
    splits: Mapping[str, tuple[ShardInfo, ...]]
    normalization: Mapping[str, float]
    source: str

    def __post_init__(self) -> None:
        _require(bool(self.name), "dataset name: got an empty string; expected a name")
        _require(
            len(self.feature_shape) >= 1 and all(isinstance(d, int) and d > 0 for d in self.feature_shape),
            f"feature_shape: got {self.feature_shape!r}; expected positive integer dimensions",
        )
        _require(self.dtype == "float32", f"dtype: got {self.dtype!r}; expected 'float32'")
        _require(
            isinstance(self.num_classes, int) and 2 <= self.num_classes <= MAX_CLASSES,
            f"num_classes: got {self.num_classes!r}; expected an integer from 2 to {MAX_CLASSES}",
        )
        _require(
            "train" in self.splits and all(self.splits.values()),
            f"splits: got {sorted(self.splits)!r} with shard counts "
            f"{[len(s) for s in self.splits.values()]}; expected a 'train' split and at least "
            "one shard per split",
        )
        files = [s.file for shards in self.splits.values() for s in shards]
        _require(len(files) == len(set(files)), f"splits: shard files repeat: {files!r}")
        for key in ("mean", "std"):
            _require(
                key in self.normalization,
                f"normalization: got {dict(self.normalization)!r}; expected keys 'mean' and 'std'",
            )
        # Read-only copies, so a frozen instance cannot be changed through its mappings.
        object.__setattr__(self, "feature_shape", tuple(self.feature_shape))
        object.__setattr__(self, "splits", MappingProxyType({k: tuple(v) for k, v in self.splits.items()}))
        object.__setattr__(
            self,
            "normalization",
            MappingProxyType({k: float(v) for k, v in self.normalization.items()}),
        )

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        # Mapping proxies cannot be pickled; going through JSON keeps the info process-portable.
        return (DatasetInfo.from_json, (self.to_json(),))

    def num_records(self, split: str) -> int:
        """The number of records in `split` (all shards together)."""
        return sum(s.records for s in self.shards(split))

    def shards(self, split: str) -> tuple[ShardInfo, ...]:
        """The shards of `split` in order; raises DataError naming the known splits if absent."""
        try:
            return self.splits[split]
        except KeyError:
            raise DataError(f"dataset {self.name!r} has no split {split!r}; it has {sorted(self.splits)}") from None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the content of `dataset.json`)."""
        return {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "feature_shape": list(self.feature_shape),
            "dtype": self.dtype,
            "num_classes": self.num_classes,
            "normalization": dict(self.normalization),
            "source": self.source,
            "splits": {
                split: {
                    "records": sum(s.records for s in shards),
                    "shards": [{"file": s.file, "records": s.records, "sha256": s.sha256} for s in shards],
                }
                for split, shards in self.splits.items()
            },
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DatasetInfo:
        """Parse and validate a `dataset.json` dict; raises DataError on any problem."""
        try:
            version = d.get("format_version", FORMAT_VERSION)
            _require(
                version == FORMAT_VERSION,
                f"format_version: got {version!r}; expected {FORMAT_VERSION}",
            )
            splits: dict[str, tuple[ShardInfo, ...]] = {}
            for split, body in d["splits"].items():
                shards = tuple(
                    ShardInfo(file=s["file"], records=s["records"], sha256=s["sha256"]) for s in body["shards"]
                )
                total = sum(s.records for s in shards)
                _require(
                    body.get("records", total) == total,
                    f"split {split}: records {body.get('records')!r} != sum of shards {total}",
                )
                splits[split] = shards
            return cls(
                name=d["name"],
                feature_shape=tuple(d["feature_shape"]),
                dtype=d["dtype"],
                num_classes=d["num_classes"],
                splits=splits,
                normalization=d["normalization"],
                source=d.get("source", ""),
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise DataError(f"{DATASET_JSON}: malformed ({type(e).__name__}: {e})") from e


def read_dataset_info(dataset_dir: str | os.PathLike[str]) -> DatasetInfo:
    """Read and validate `dataset_dir/dataset.json`."""
    path = Path(dataset_dir) / DATASET_JSON
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError as e:
        raise DataError(f"{path}: not found; expected a dataset directory (run `kubetrain download` first)") from e
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read: {e}") from e
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    try:
        return DatasetInfo.from_json(raw)
    except DataError as e:
        raise DataError(f"{path}: {e}") from e


def load_shard(
    dataset_dir: str | os.PathLike[str], split: str, shard_index: int, *, verify: bool = True
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Load one shard: x float32 (n, *feature_shape), y int64 (n,).

    `verify` (the default) checks the shard's sha256 against `dataset.json` first: hashing costs
    about what reading the shard does, once per shard, and a damaged or swapped shard then fails
    here, naming itself, instead of deep inside training.
    """
    info = read_dataset_info(dataset_dir)
    return _load_shard(Path(dataset_dir), info, split, shard_index, verify=verify)


def _load_shard(
    root: Path, info: DatasetInfo, split: str, shard_index: int, *, verify: bool
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    import numpy as np

    shards = info.shards(split)
    if not 0 <= shard_index < len(shards):
        raise DataError(f"{root}: split {split!r} has {len(shards)} shards; got shard index {shard_index}")
    shard = shards[shard_index]
    path = root / shard.file
    damaged = f"{path}: shard {shard.file} of split {split!r} is damaged"
    if verify:
        try:
            actual = file_sha256(path)
        except OSError as e:
            raise DataError(f"{damaged} ({e.strerror}); download the data set again") from e
        if actual != shard.sha256:
            raise DataError(
                f"{damaged} (sha256 mismatch: {DATASET_JSON} lists {shard.sha256}, the file has {actual}); "
                "download the data set again"
            )
    try:
        with np.load(path, allow_pickle=False) as npz:
            x = np.asarray(npz["x"])
            y = np.asarray(npz["y"])
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{damaged} ({type(e).__name__}: {e}); download the data set again") from e
    expected = (shard.records, *info.feature_shape)
    if x.shape != expected or x.dtype != np.float32:
        raise DataError(f"{path}: x is {x.dtype}{x.shape}; expected float32{expected}")
    if y.shape != (shard.records,) or y.dtype != np.int64:
        raise DataError(f"{path}: y is {y.dtype}{y.shape}; expected int64{(shard.records,)}")
    return x, y


def load_split(
    dataset_dir: str | os.PathLike[str], split: str, *, verify: bool = True
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """All shards of `split` concatenated in shard order, each checked as :func:`load_shard` does."""
    import numpy as np

    root = Path(dataset_dir)
    info = read_dataset_info(root)
    parts = [_load_shard(root, info, split, i, verify=verify) for i in range(len(info.shards(split)))]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
