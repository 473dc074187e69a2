"""What a data source may unpack to and hold: size caps, array headers, label range.

A source is read into memory whole, so a gzip bomb, an npz whose header declares a huge array,
0-d arrays or a label of 2**40 (which would become 2**40 + 1 classes) end in one DataError naming
the source, before the memory or the disk is spent.
"""

from __future__ import annotations

import bz2
import gzip
import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from kubetrain.cli import main
from kubetrain.data.archives import MAX_MEMBERS, MAX_UNPACKED_BYTES
from kubetrain.data.dataset_format import MAX_CLASSES
from kubetrain.data.download import download
from kubetrain.data.formats import LocalFile, load_files
from kubetrain.errors import DataError, ExitCode


def _npz(**arrays: npt.ArrayLike) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_the_default_cap_is_the_documented_one() -> None:
    assert MAX_UNPACKED_BYTES == 1 << 30


def test_a_gzip_that_inflates_past_the_cap_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    bomb = _write(tmp_path / "data.npz.gz", gzip.compress(b"\x01" * (3 << 20), mtime=0))  # 3 MiB: ~3 KB
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(DataError, match=r"the gzip inflates to more than 1048576 bytes; .*--max-unpacked-bytes"):
        load_files([LocalFile(bomb, bomb.name, "http://h/data.npz.gz")], work, max_bytes=1 << 20)
    assert [p for p in work.rglob("*") if p.is_file()] == []


def test_a_gzip_within_the_cap_is_read(tmp_path: Path) -> None:
    data = _npz(x=np.zeros((20, 3), np.float32), y=np.arange(20) % 2)
    source = _write(tmp_path / "d.npz.gz", gzip.compress(data, mtime=0))
    info = download(str(source), tmp_path / "out", quiet=True, max_unpacked_bytes=len(data))
    assert info.num_records("train") + info.num_records("test") == 20


def test_download_cli_takes_the_cap_and_fails_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _write(tmp_path / "d.npz.gz", gzip.compress(b"\x01" * (1 << 20), mtime=0))
    code = main(["download", str(source), "--out", str(tmp_path / "out"), "--max-unpacked-bytes", "4096"])
    err = capsys.readouterr().err
    assert code == ExitCode.INVALID_INPUT
    assert err.strip() == (
        f"kubetrain download: {source}: the gzip inflates to more than 4096 bytes; if the data set really is "
        f"that large, raise the cap with --max-unpacked-bytes (default {MAX_UNPACKED_BYTES})"
    )


def test_a_tar_member_past_the_cap_is_refused_at_its_header(tmp_path: Path) -> None:
    # A header declaring 64 GiB, then the stream ends. Reading the whole archive first (as the
    # 23 KB tar.bz2 bomb was, for 4 minutes) would inflate the member up to where it stops and
    # report a truncated archive; checked header by header, the cap refuses it before any data.
    header = tarfile.TarInfo("x.npy")
    header.size = 64 << 30
    bomb = _write(tmp_path / "d.tar.bz2", bz2.compress(header.tobuf() + b"\0" * 4096))
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(DataError, match=r"the archive unpacks to more than 1048576 bytes"):
        load_files([LocalFile(bomb, bomb.name, "http://h/d.tar.bz2")], work, max_bytes=1 << 20)
    assert [p for p in work.rglob("*") if p.is_file()] == []


def _many_empty_members(kind: str, n: int) -> bytes:
    buf = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buf, "w") as zf:
            for i in range(n):
                zf.writestr(f"e{i}", b"")
    else:
        with tarfile.open(fileobj=buf, mode="w:gz") as tf:
            for i in range(n):
                tf.addfile(tarfile.TarInfo(f"e{i}"))
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_an_archive_of_too_many_entries_is_refused_before_extracting(tmp_path: Path, kind: str) -> None:
    bomb = _write(tmp_path / f"d.{kind}", _many_empty_members(kind, MAX_MEMBERS + 1))
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(DataError) as failed:
        load_files([LocalFile(bomb, bomb.name, f"http://h/d.{kind}")], work)
    assert str(failed.value) == (
        f"http://h/d.{kind}: the archive has more than {MAX_MEMBERS} entries; kubetrain reads one .npz or the "
        "MNIST idx files from an archive: pack only those"
    )
    assert [p for p in work.rglob("*") if p.is_file()] == []


def test_an_archive_without_mnist_files_names_ten_of_them_and_counts_the_rest(tmp_path: Path) -> None:
    archive = _write(tmp_path / "d.tar", _many_empty_members("tar", 25))
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(DataError) as failed:
        load_files([LocalFile(archive, archive.name, "http://h/d.tar")], work)
    message = str(failed.value)
    assert message.count("http://h/d.tar!") == 10
    assert " and 15 more: no MNIST training images and labels found" in message


def test_an_npz_of_0d_arrays_is_one_data_error(tmp_path: Path) -> None:
    source = _write(tmp_path / "d.npz", _npz(x=np.float32(1.0), y=np.int64(2)))
    with pytest.raises(DataError, match=r"npz array 'x' is a single value \(0-d\); expected one entry per record"):
        download(str(source), tmp_path / "out", quiet=True)


def test_an_npz_whose_header_declares_a_huge_array_is_refused_before_allocating(tmp_path: Path) -> None:
    header = io.BytesIO()
    # 2**38 float32 = 1 TiB declared, no data behind it.
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 38,)})  # type: ignore[no-untyped-call]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("x.npy", header.getvalue())
        y = io.BytesIO()
        np.save(y, np.arange(4))
        zf.writestr("y.npy", y.getvalue())
    source = _write(tmp_path / "d.npz", buf.getvalue())
    with pytest.raises(
        DataError, match=r"the npz's arrays \(up to 'x', shape \[274877906944\], float32\) declare more"
    ):
        download(str(source), tmp_path / "out", quiet=True)


@pytest.mark.parametrize("label", [1 << 40, MAX_CLASSES, -1])
def test_labels_outside_the_class_range_are_refused(tmp_path: Path, label: int) -> None:
    y = np.arange(20, dtype=np.int64) % 2
    y[3] = label
    source = _write(tmp_path / "d.npz", _npz(x_train=np.zeros((20, 2), np.float32), y_train=y,
                                             x_test=np.zeros((4, 2), np.float32), y_test=np.arange(4) % 2))  # fmt: skip
    with pytest.raises(DataError, match=rf"train labels span \[{min(label, 0)}, {max(label, 1)}\]; expected class"):
        download(str(source), tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists()


def test_the_largest_class_index_is_accepted(tmp_path: Path) -> None:
    y = np.arange(20, dtype=np.int64) % 2
    y[3] = MAX_CLASSES - 1
    source = _write(tmp_path / "d.npz", _npz(x=np.zeros((20, 2), np.float32), y=y))
    info = download(str(source), tmp_path / "out", quiet=True)
    assert info.num_classes == MAX_CLASSES
