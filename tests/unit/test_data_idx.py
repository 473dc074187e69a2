"""MNIST idx decoding: magic numbers, dimensions, payload size, gzip."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from kubetrain.data.idx import decode_idx, looks_like_idx, read_idx
from kubetrain.errors import DataError
from tests.data_helpers import idx_bytes, mnist_arrays


def test_roundtrip_images_labels_and_wide_types(tmp_path: Path) -> None:
    images, labels = mnist_arrays(7, seed=3, rows=5, cols=4)
    np.testing.assert_array_equal(decode_idx(idx_bytes(images), "img"), images)
    np.testing.assert_array_equal(decode_idx(idx_bytes(labels), "lab"), labels)
    wide = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    decoded = decode_idx(idx_bytes(wide.astype(">i4")), "wide")
    np.testing.assert_array_equal(decoded, wide)
    assert decoded.dtype == np.dtype("=i4")
    raw = tmp_path / "raw"
    raw.write_bytes(idx_bytes(images))
    gz = tmp_path / "img.gz"
    gz.write_bytes(gzip.compress(idx_bytes(images)))
    np.testing.assert_array_equal(read_idx(raw, "raw"), images)
    np.testing.assert_array_equal(read_idx(gz, "gz"), images)


def test_magic_checks() -> None:
    images, _ = mnist_arrays(2, seed=0, rows=3, cols=3)
    good = idx_bytes(images)
    assert looks_like_idx(good)
    assert good[:4].hex() == "00000803"
    for bad in (b"<html>not idx</html>", b"\x00\x00\x07\x03" + good[4:], b"\x01" + good[1:], b""):
        assert not looks_like_idx(bad)
        with pytest.raises(DataError, match="not an MNIST idx file"):
            decode_idx(bad, "f.idx")


def test_dimension_checks() -> None:
    images, _ = mnist_arrays(4, seed=0, rows=3, cols=3)
    good = idx_bytes(images)
    with pytest.raises(DataError, match=r"f: idx data truncated: magic 00000803, dimensions \[4, 3, 3\] need 36"):
        decode_idx(good[:-1], "f")
    with pytest.raises(DataError, match="trailing bytes"):
        decode_idx(good + b"\0", "f")
    with pytest.raises(DataError, match="header truncated"):
        decode_idx(good[:9], "f")


def test_bad_gzip(tmp_path: Path) -> None:
    images, _ = mnist_arrays(50, seed=0)
    packed = gzip.compress(idx_bytes(images))
    truncated = tmp_path / "t.gz"
    truncated.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(DataError, match="truncated gzip"):
        read_idx(truncated, "t.gz")
    corrupt = tmp_path / "c.gz"
    corrupt.write_bytes(packed[:10] + bytes(b ^ 0x55 for b in packed[10:]))
    with pytest.raises(DataError, match="corrupt gzip"):
        read_idx(corrupt, "c.gz")
