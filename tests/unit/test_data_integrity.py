"""A data set is checked before it is trusted or replaced (issue 16): shard checksums by default, an
output directory replaced only when every entry is a file its dataset.json lists, tars through the
archive safety checks, MNIST idx magic numbers by role, and local write errors (a full disk) with
the exit code that says whose problem it is."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from kubetrain.data.dataset_format import DATASET_JSON, load_shard, load_split
from kubetrain.data.download import download
from kubetrain.data.errors import DataError, DiskFullError
from kubetrain.data.formats import LocalFile, load_files
from kubetrain.data.sink import HashingSink
from kubetrain.errors import ExitCode
from tests.data_helpers import idx_bytes, mnist_arrays, tar_bytes

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


def _digits(tmp_path: Path, shards: int = 1) -> Path:
    out = tmp_path / "digits"
    download("builtin:digits", out, quiet=True, shards=shards)
    return out


def test_a_whole_but_wrong_shard_is_caught_by_its_checksum_by_default(tmp_path: Path) -> None:
    """Two valid shards swapped read fine as npz; only dataset.json's sha256 tells them apart."""
    out = _digits(tmp_path, shards=2)
    a, b = out / "train-00000-of-00002.npz", out / "train-00001-of-00002.npz"
    tmp = out.parent / "swap"
    shutil.move(a, tmp)
    shutil.move(b, a)
    shutil.move(tmp, b)
    with pytest.raises(DataError, match=r"shard train-00000-of-00002.npz of split 'train' is damaged \(sha256"):
        load_split(out, "train")
    with pytest.raises(DataError, match=r"train-00001-of-00002.npz of split 'train' is damaged \(sha256 mismatch"):
        load_shard(out, "train", 1)
    x, _y = load_shard(out, "train", 1, verify=False)  # still possible on purpose
    assert len(x) == 719


def test_a_missing_shard_is_a_data_error_naming_it(tmp_path: Path) -> None:
    out = _digits(tmp_path)
    (out / "test-00000-of-00001.npz").unlink()
    for verify in (True, False):
        with pytest.raises(DataError, match=r"shard test-00000-of-00001.npz of split 'test' is damaged") as failed:
            load_split(out, "test", verify=verify)
        assert isinstance(failed.value.__cause__, OSError)


def test_a_directory_carrying_a_shards_name_is_never_replaced(tmp_path: Path) -> None:
    """dataset.json copied beside a user's directory that has a shard's name: not a data set."""
    out = _digits(tmp_path)
    shard = out / "train-00000-of-00001.npz"
    shard.unlink()
    shard.mkdir()
    (shard / "results.csv").write_text("mine")
    with pytest.raises(DataError, match=r"holds files that are not part of its data set \(train-00000-of-00001.npz\)"):
        download("builtin:digits", out, quiet=True)
    assert (shard / "results.csv").read_text() == "mine"


def test_a_symlinked_dataset_json_is_not_a_data_set(tmp_path: Path) -> None:
    out = _digits(tmp_path)
    real = tmp_path / "elsewhere.json"
    shutil.move(out / DATASET_JSON, real)
    (out / DATASET_JSON).symlink_to(real)
    with pytest.raises(DataError, match=r"not part of its data set \(dataset.json\)"):
        download("builtin:digits", out, quiet=True)
    assert (out / DATASET_JSON).is_symlink()


def _npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, x=np.zeros((4, 2), np.float32), y=np.arange(4) % 2)
    return buf.getvalue()


@pytest.mark.parametrize("compression", ["", "gz"])
def test_a_plain_tar_goes_through_the_archive_safety_checks(tmp_path: Path, compression: str) -> None:
    """A plain tar was read as an npz before (zipfile finds the inner npz), skipping the checks."""
    archive = tmp_path / "data.tar"
    archive.write_bytes(tar_bytes({"data.npz": _npz(), "../../escaped.txt": b"x"}, compression=compression))
    (tmp_path / "work").mkdir()
    with pytest.raises(DataError, match="path traversal"):
        load_files([LocalFile(archive, archive.name, "http://x/data.tar")], tmp_path / "work")
    assert not (tmp_path / "escaped.txt").exists()


def test_an_mnist_file_whose_magic_has_the_wrong_dimension_count_says_so(tmp_path: Path) -> None:
    """Small images with a labels magic (1 dimension) used to read as 'has trailing bytes'."""
    images, labels = mnist_arrays(4, seed=0, rows=3, cols=3)
    raw = bytearray(idx_bytes(images))
    raw[3] = 1  # 00000801: the labels magic on an images file
    (tmp_path / "train-images-idx3-ubyte").write_bytes(bytes(raw))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    files = [LocalFile(p, p.name, str(p)) for p in sorted(tmp_path.iterdir())]
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: wrong magic number 00000801 for images"):
        load_files(files, tmp_path)


def _no_space(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_gunzipping_is_a_full_disk_not_a_corrupt_gzip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gz = tmp_path / "data.npz.gz"
    gz.write_bytes(gzip.compress(_npz()))
    monkeypatch.setattr("kubetrain.data.formats._copy_capped", _no_space)
    (tmp_path / "work").mkdir()
    with pytest.raises(DiskFullError, match="no space left on the device") as failed:
        load_files([LocalFile(gz, gz.name, "http://x/data.npz.gz")], tmp_path / "work")
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE
    assert isinstance(failed.value.__cause__, OSError)


def test_a_full_disk_while_extracting_is_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "data.tar"
    archive.write_bytes(tar_bytes({"data.npz": _npz()}, compression=""))
    monkeypatch.setattr("tarfile.TarFile.extractall", _no_space)
    (tmp_path / "work").mkdir()
    with pytest.raises(DiskFullError, match="no space left on the device") as failed:
        load_files([LocalFile(archive, archive.name, "http://x/data.tar")], tmp_path / "work")
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE


def test_an_out_under_a_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(DataError, match=r"a-file is a file, not a directory; choose another --out") as failed:
        download("builtin:digits", tmp_path / "a-file" / "sub" / "out", quiet=True)
    assert failed.value.exit_code == ExitCode.INVALID_INPUT
    assert (tmp_path / "a-file").read_text() == "x"


class _FillingFile(io.FileIO):
    """A file on a disk that fills mid-chunk: write(2) takes part of a chunk, then fails with ENOSPC."""

    room = 4

    def write(self, b: ReadableBuffer) -> int:
        view = memoryview(b)
        if _FillingFile.room == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = min(len(view), _FillingFile.room)
        _FillingFile.room -= n
        return super().write(view[:n])


def test_a_short_write_on_a_filling_disk_is_not_a_silently_truncated_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unbuffered write that takes only part of a chunk used to drop the rest without an error."""
    monkeypatch.setattr(
        "kubetrain.data.sink.open",
        lambda path, mode, buffering: _FillingFile(path, mode.replace("b", "")),
        raising=False,
    )
    part = tmp_path / "data.npz.part"
    with HashingSink(part, 0, hashlib.sha256()) as sink:
        buf = sink.buffer()
        buf[:10] = b"0123456789"
        with pytest.raises(DiskFullError, match="no space left on the device") as failed:
            sink.commit(buf, 10)
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE
    assert not part.exists()  # no partial file left to resume from
