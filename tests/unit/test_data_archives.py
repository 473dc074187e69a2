"""Safe archive extraction: traversal, absolute paths, links, special files."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from kubetrain.data.archives import archive_kind, safe_extract
from kubetrain.errors import DataError
from tests.data_helpers import tar_bytes, zip_bytes


def _archive(tmp_path: Path, data: bytes, name: str = "a.tar.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _extract(tmp_path: Path, archive: Path) -> Path:
    dest = tmp_path / "dest"
    dest.mkdir()
    safe_extract(archive, dest, source="SRC")
    return dest


@pytest.mark.parametrize("compression", ["gz", "xz", ""])
def test_tar_extracts_files_and_internal_links(tmp_path: Path, compression: str) -> None:
    archive = _archive(
        tmp_path,
        tar_bytes(
            {"d/a.bin": b"aaa", "b.bin": b"b"},
            compression=compression,
            symlinks={"d/link": "a.bin", "up": "d/a.bin"},
        ),
    )
    assert archive_kind(archive) == "tar"
    dest = _extract(tmp_path, archive)
    assert (dest / "d" / "a.bin").read_bytes() == b"aaa"
    assert (dest / "d" / "link").read_bytes() == b"aaa"
    assert (dest / "up").read_bytes() == b"aaa"


def test_zip_extracts(tmp_path: Path) -> None:
    archive = _archive(tmp_path, zip_bytes({"x/y.bin": b"yy"}), "a.zip")
    assert archive_kind(archive) == "zip"
    assert (_extract(tmp_path, archive) / "x" / "y.bin").read_bytes() == b"yy"


@pytest.mark.parametrize(
    ("files", "symlinks", "match"),
    [
        ({"../evil.txt": b"x"}, {}, "path traversal"),
        ({"ok/../../evil.txt": b"x"}, {}, "path traversal"),
        ({"/tmp/evil.txt": b"x"}, {}, "absolute path"),
        ({}, {"link": "../../etc/passwd"}, "outside the target"),
        ({}, {"link": "/etc/passwd"}, "outside the target"),
        ({}, {"d/link": "../../x"}, "outside the target"),
    ],
)
def test_tar_rejects_unsafe_entries(
    tmp_path: Path, files: dict[str, bytes], symlinks: dict[str, str], match: str
) -> None:
    archive = _archive(tmp_path, tar_bytes({"fine.txt": b"ok", **files}, symlinks=symlinks))
    with pytest.raises(DataError, match=f"SRC: archive entry .*{match}"):
        _extract(tmp_path, archive)
    # Nothing at all was written: the checks run before extraction.
    assert list((tmp_path / "dest").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar.gz", "dest"]


def test_tar_rejects_devices_and_outside_hardlinks(tmp_path: Path) -> None:
    for kind, extra in ((tarfile.CHRTYPE, {}), (tarfile.LNKTYPE, {"linkname": "../outside"})):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo("special")
            info.type = kind
            for key, value in extra.items():
                setattr(info, key, value)
            tf.addfile(info)
        archive = _archive(tmp_path, buf.getvalue(), f"{kind!r}.tar")
        dest = tmp_path / f"dest{kind!r}"
        dest.mkdir()
        with pytest.raises(DataError, match=r"special|path traversal|hard-links"):
            safe_extract(archive, dest, source="SRC")


def test_zip_rejects_traversal_and_links(tmp_path: Path) -> None:
    for name in ("../evil.txt", "/abs.txt", "a\\..\\..\\evil.txt", "C:/win.txt"):
        archive = _archive(tmp_path, zip_bytes({"ok": b"1", name: b"x"}), "a.zip")
        dest = tmp_path / "dest"
        dest.mkdir(exist_ok=True)
        with pytest.raises(DataError, match="archive entry"):
            safe_extract(archive, dest, source="SRC")
        assert list(dest.iterdir()) == []


def test_corrupt_archive(tmp_path: Path) -> None:
    data = tar_bytes({"a.bin": b"a" * 100_000})
    archive = _archive(tmp_path, data[: len(data) // 2])
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(DataError, match="SRC: corrupt or truncated archive"):
        safe_extract(archive, dest, source="SRC")
    assert archive_kind(_archive(tmp_path, b"plain text", "p.txt")) is None
