"""Safe extraction of tar (plain, gz, bz2, xz) and zip archives.

Every entry is checked before anything is written: no absolute paths, no ``..`` components, no
links that resolve outside the target, no device files, a cap on the total unpacked size
(:data:`MAX_UNPACKED_BYTES`, 1 GiB, which a single .gz and an npz's declared arrays share) and on
the number of entries (:data:`MAX_MEMBERS`). A tar's entries are checked as their headers are read,
so a bomb is refused at the header that crosses a cap, before the data behind it is inflated.
Tar extraction also runs with Python's ``data`` filter as a second line of defence.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from kubetrain.data.errors import TMP_FIX, CorruptFileError, write_error
from kubetrain.errors import DataError

__all__ = ["MAX_MEMBERS", "MAX_UNPACKED_BYTES", "archive_kind", "is_zip", "safe_extract", "too_big"]

# The default cap on what one source may unpack to (an archive's members, a .gz inflated, an npz's
# declared arrays): the whole data set is loaded into memory and converted to float32, so far more
# would not train here anyway, and a small bomb (2 MB of gzip inflate to 2 GiB) is stopped before
# it fills the disk. `kubetrain download --max-unpacked-bytes` (download(max_unpacked_bytes=...)) raises it.
MAX_UNPACKED_BYTES = 1 << 30  # 1 GiB

# What kubetrain reads from an archive is one npz or the four MNIST files; an archive of more
# entries than this is not a data set it can read, and 100,000 empty entries cost minutes to
# extract (and to list) while the size cap never saw a byte.
MAX_MEMBERS = 10_000


ZIP_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or the end record of an empty zip


def is_zip(path: Path) -> bool:
    """Whether the file starts as a zip does (zipfile.is_zipfile also finds zips *inside* a tar)."""
    with open(path, "rb") as f:
        return f.read(4) in ZIP_SIGNATURES


def archive_kind(path: Path) -> str | None:
    """'zip', 'tar' or None, by the content's signature, not the file name."""
    if is_zip(path):
        return "zip"
    try:
        return "tar" if tarfile.is_tarfile(path) else None
    except (OSError, EOFError, zlib.error):
        return None  # e.g. a truncated .gz: not a readable tar; the caller reports the gzip


def _check_name(source: str, name: str) -> PurePosixPath:
    # Zip files written on Windows may use backslashes; treat them as separators for the check.
    rel = PurePosixPath(name.replace("\\", "/"))
    if rel.is_absolute() or (rel.parts and rel.parts[0].endswith(":")):
        raise DataError(f"{source}: archive entry {name!r} has an absolute path; refusing to extract")
    if ".." in rel.parts:
        raise DataError(
            f"{source}: archive entry {name!r} escapes the target directory (path traversal); refusing to extract"
        )
    return rel


def _inside(dest: Path, target: Path) -> bool:
    resolved = Path(os.path.normpath(dest / target))
    return resolved == dest or dest in resolved.parents


def too_big(source: str, what: str, limit: int) -> DataError:
    """The error for a source that unpacks to more than `limit` bytes."""
    return DataError(
        f"{source}: {what} more than {limit} bytes; if the data set really is that large, raise the cap "
        f"with --max-unpacked-bytes (default {MAX_UNPACKED_BYTES})"
    )


def _too_many(source: str) -> DataError:
    return DataError(
        f"{source}: the archive has more than {MAX_MEMBERS} entries; kubetrain reads one .npz or the MNIST "
        "idx files from an archive: pack only those"
    )


def _check_tar(source: str, tf: tarfile.TarFile, dest: Path, limit: int) -> None:
    total = 0
    # One header at a time (not getmembers(), which reads, and inflates, the whole archive first).
    for count, member in enumerate(tf, start=1):
        if count > MAX_MEMBERS:
            raise _too_many(source)
        rel = _check_name(source, member.name)
        if member.issym():
            # A symlink's target is relative to the link's own directory.
            target = rel.parent / member.linkname
            if PurePosixPath(member.linkname).is_absolute() or not _inside(dest, Path(target)):
                raise DataError(
                    f"{source}: archive entry {member.name!r} links to {member.linkname!r}, "
                    "outside the target directory; refusing to extract"
                )
        elif member.islnk():
            if not _inside(dest, Path(_check_name(source, member.linkname))):
                raise DataError(f"{source}: archive entry {member.name!r} hard-links outside the target")
        elif not (member.isfile() or member.isdir()):
            raise DataError(
                f"{source}: archive entry {member.name!r} is a device, fifo or other special file; refusing to extract"
            )
        total += member.size
        if total > limit:
            raise too_big(source, "the archive unpacks to", limit)


def _check_zip(source: str, zf: zipfile.ZipFile, limit: int) -> None:
    if len(zf.infolist()) > MAX_MEMBERS:
        raise _too_many(source)
    total = 0
    for info in zf.infolist():
        _check_name(source, info.filename)
        if stat.S_ISLNK(info.external_attr >> 16):
            # zipfile would write the link as a plain file holding its target's name.
            raise DataError(
                f"{source}: archive entry {info.filename!r} is a symbolic link; zip links are not supported"
            )
        total += info.file_size
        if total > limit:
            raise too_big(source, "the archive unpacks to", limit)


def safe_extract(path: Path, dest: Path, *, source: str, max_bytes: int = MAX_UNPACKED_BYTES) -> None:
    """Extract the archive at `path` into the existing directory `dest` after checking every entry.

    `source` names the archive in error messages; its members may unpack to `max_bytes` in all.
    """
    dest = dest.resolve()
    try:
        if is_zip(path):
            with zipfile.ZipFile(path) as zf:
                _check_zip(source, zf, max_bytes)
                zf.extractall(dest)
            return
        with tarfile.open(path) as tf:
            _check_tar(source, tf, dest, max_bytes)
            tf.extractall(dest, filter="data")
    except DataError:
        raise
    except tarfile.FilterError as e:
        raise DataError(f"{source}: unsafe archive entry: {e}; refusing to extract") from e
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error) as e:
        raise CorruptFileError(f"{source}: corrupt or truncated archive: {e}") from e
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise write_error(dest, e, fix=TMP_FIX) from e  # the machine's problem, not the archive's
        raise DataError(f"{source}: cannot extract the archive: {e}") from e
