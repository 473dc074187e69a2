"""The on-disk dataset format: write, read back, validate, and built-in digits end to end."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from kubetrain.data.dataset_format import (
    DATASET_JSON,
    DatasetInfo,
    ShardInfo,
    file_sha256,
    load_shard,
    load_split,
    read_dataset_info,
)
from kubetrain.data.dataset_writer import write_dataset
from kubetrain.data.download import download
from kubetrain.errors import DataError


def _arrays(n: int, seed: int = 0) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 1, 4, 4)).astype(np.float32), rng.integers(0, 3, size=n)


def _write(out: Path, *, n_train: int = 10, shards: int = 3) -> DatasetInfo:
    xtr, ytr = _arrays(n_train)
    xte, yte = _arrays(4, seed=1)
    return write_dataset(
        out,
        name="toy",
        x_train=xtr,
        y_train=ytr,
        x_test=xte,
        y_test=yte,
        num_classes=3,
        shards=shards,
        normalization={"mean": 0.0, "std": 1.0},
        source="test",
    )


def test_write_read_roundtrip(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    info = _write(out)
    assert read_dataset_info(out) == info
    assert DatasetInfo.from_json(info.to_json()) == info
    assert pickle.loads(pickle.dumps(info)) == info  # passes to worker processes
    assert [s.file for s in info.shards("train")] == [
        "train-00000-of-00003.npz",
        "train-00001-of-00003.npz",
        "train-00002-of-00003.npz",
    ]
    assert [s.records for s in info.shards("train")] == [3, 4, 3]
    assert info.num_records("train") == 10
    assert info.num_records("test") == 4
    xtr, ytr = _arrays(10)
    x, y = load_split(out, "train", verify=True)
    np.testing.assert_array_equal(x, xtr)
    np.testing.assert_array_equal(y, ytr)
    assert x.dtype == np.float32
    assert y.dtype == np.int64
    x1, _y1 = load_shard(out, "train", 1)
    np.testing.assert_array_equal(x1, xtr[3:7])
    for shard in info.shards("train") + info.shards("test"):
        assert file_sha256(out / shard.file) == shard.sha256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temp dirs left


def test_verify_detects_corrupt_shard(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    info = _write(out)
    shard = out / info.shards("train")[0].file
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DataError, match="sha256 mismatch"):
        load_shard(out, "train", 0, verify=True)


def test_rewrite_replaces_dataset_but_not_foreign_dir(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    _write(out, shards=3)
    info = _write(out, shards=2)
    assert read_dataset_info(out) == info
    assert sorted(p.name for p in out.iterdir()) == [
        DATASET_JSON,
        "test-00000-of-00001.npz",
        "train-00000-of-00002.npz",
        "train-00001-of-00002.npz",
    ]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(DataError, match="refusing to overwrite"):
        _write(foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "foreign"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shards": 0}, "shards: got 0"),
        ({"shards": 11}, "only 10 records"),
        ({"y_train": np.full(10, 3)}, "labels span"),
        ({"x_train": np.zeros((0, 1, 4, 4)), "y_train": np.zeros(0, dtype=int)}, "n >= 1"),
        ({"y_train": np.zeros(9, dtype=int)}, "expected \\(10,\\)"),
    ],
)
def test_write_rejects_bad_input(tmp_path: Path, kwargs: dict[str, object], match: str) -> None:
    xtr, ytr = _arrays(10)
    xte, yte = _arrays(4, seed=1)
    args: dict[str, object] = {"x_train": xtr, "y_train": ytr, "shards": 1} | kwargs
    with pytest.raises(DataError, match=match):
        write_dataset(
            tmp_path / "ds",
            name="toy",
            x_test=xte,
            y_test=yte,
            num_classes=3,
            normalization={"mean": 0.0, "std": 1.0},
            source="test",
            **args,  # type: ignore[arg-type]
        )
    assert list(tmp_path.iterdir()) == []


def test_malformed_dataset_json(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    info = _write(out)
    doc = info.to_json()
    doc["splits"]["train"]["shards"][0]["file"] = "../escape.npz"
    (out / DATASET_JSON).write_text(json.dumps(doc))
    with pytest.raises(DataError, match="plain file name"):
        read_dataset_info(out)
    with pytest.raises(DataError, match="not found"):
        read_dataset_info(tmp_path / "missing")
    with pytest.raises(DataError, match="no split 'valid'"):
        info.shards("valid")
    with pytest.raises(DataError, match="sha256"):
        ShardInfo(file="a.npz", records=1, sha256="xyz")


def test_builtin_digits_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "digits"
    info = download("builtin:digits", out, shards=4)
    assert info == read_dataset_info(out)
    assert info.feature_shape == (1, 8, 8)
    assert info.num_classes == 10
    assert info.num_records("train") == 1438
    assert info.num_records("test") == 359
    assert len(info.shards("train")) == 4
    x, y = load_split(out, "train", verify=True)
    xt, yt = load_split(out, "test", verify=True)
    assert x.shape == (1438, 1, 8, 8)
    assert xt.shape == (359, 1, 8, 8)
    assert set(np.unique(np.concatenate([y, yt]))) == set(range(10))
    # Standardised with the train split's statistics, which dataset.json records.
    assert abs(float(x.mean())) < 1e-4
    assert abs(float(x.std()) - 1) < 1e-3
    norm = info.normalization
    assert norm["scale"] == 1 / 16
    assert 0 < norm["mean"] < 1
    assert 0 < norm["std"] < 1
    # The seeded split is deterministic: a second download gives identical shards.
    again = download("builtin:digits", tmp_path / "again", shards=4)
    assert again.splits == info.splits
    with pytest.raises(DataError, match="unknown built-in"):
        download("builtin:nope", tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
