"""Object stores (s3://, gs://, az://, memory://, ...) through fsspec, and local files.

fsspec is a core dependency; the store drivers are optional extras (`kubetrain[s3]` installs
s3fs, `kubetrain[gcs]` gcsfs). A scheme fsspec does not know is an unknown scheme; a known one
whose driver is missing names the package to install.
"""

from __future__ import annotations

import hashlib
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from kubetrain.data.errors import DataError, DownloadUnavailableError
from kubetrain.data.progress import Progress
from kubetrain.data.sink import CHUNK_SIZE, HashingSink
from kubetrain.urls import redact_url

__all__ = ["check_store", "fetch_fsspec", "local_path", "open_store", "store_exists"]

_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}


def local_path(url: str) -> Path:
    """The filesystem path of a `file://` URL or a plain path."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise DataError(f"{redact_url(url)}: file:// URLs must name a local path (file:///path)")
        return Path(urllib.request.url2pathname(parts.path))
    return Path(url)


def check_store(url: str, *, driver: bool = True) -> None:
    """DataError when fsspec knows no store for `url`'s scheme or (`driver`) its driver is not installed; no I/O."""
    import fsspec

    scheme = urllib.parse.urlsplit(url).scheme
    if not driver:
        if scheme not in fsspec.available_protocols():
            raise DataError(_unknown_scheme(url, scheme))
        return
    try:
        fsspec.get_filesystem_class(scheme)
    except ValueError as e:
        raise DataError(_unknown_scheme(url, scheme)) from e
    except ImportError as e:
        extra = _EXTRAS.get(scheme)
        hint = (
            f"pip install 'kubetrain[{extra}]' (kubetrain's launcher image: build it with LAUNCHER_EXTRAS={extra})"
            if extra
            else "install its fsspec driver"
        )
        raise DataError(f"{redact_url(url)}: the {scheme}:// driver is not installed ({e}); {hint}") from e


def _unknown_scheme(url: str, scheme: str) -> str:
    return (
        f"{redact_url(url)}: unknown scheme {scheme!r}; expected http(s)://, file://, a local path, "
        "builtin:NAME, or an fsspec object store such as s3:// or gs://"
    )


def open_store(url: str) -> tuple[Any, str]:
    """The fsspec filesystem and in-store path for `url`; DataError for unknown or missing."""
    import fsspec

    check_store(url)
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError, OSError) as e:
        raise DataError(f"{redact_url(url)}: cannot open the store: {e}") from e
    return fs, str(path)


def store_exists(url: str) -> bool:
    """Whether `url` names an existing object in its store."""
    fs, path = open_store(url)
    try:
        return bool(fs.isfile(path))
    except (OSError, ValueError) as e:
        raise DataError(f"{redact_url(url)}: cannot reach the store: {e}") from e


def fetch_fsspec(url: str, part_path: Path, *, attempts: int, progress: Progress) -> str:
    """Copy the object at `url` into `part_path`, resuming a partial copy; return its sha256.

    The store drivers retry their own requests (s3fs, gcsfs); a connection that still breaks is
    resumed from the bytes already copied, up to `attempts` times in a row without progress.
    """
    fs, path = open_store(url)
    try:
        total = int(fs.size(path))
    except FileNotFoundError as e:
        raise DataError(f"{redact_url(url)}: not found in the store") from e
    except (OSError, ValueError, TypeError) as e:
        raise DataError(f"{redact_url(url)}: cannot read the object's size: {e}") from e
    failures = 0
    done = part_path.stat().st_size if part_path.exists() else 0
    if done > total:
        part_path.unlink()
        done = 0
    hasher = _hash_file(part_path) if done else hashlib.sha256()
    progress.restart(done, total)
    while done < total:
        before = done
        try:
            with fs.open(path, "rb") as src, HashingSink(part_path, done, hasher) as sink:
                src.seek(done)
                while True:
                    buf = sink.buffer()
                    n = src.readinto(buf)
                    if not n:
                        sink.release(buf)
                        break
                    sink.commit(buf, n)
                    done += n
                    progress.update(n)
        except FileNotFoundError as e:
            raise DataError(f"{redact_url(url)}: not found in the store") from e
        except (ConnectionError, TimeoutError) as e:
            failures = 1 if done > before else failures + 1
            if failures >= attempts:
                raise DownloadUnavailableError(
                    f"{redact_url(url)}: giving up after {failures} failed reads in a row: {e}"
                ) from e
            progress.note(f"{type(e).__name__}: {e}; resuming at byte {done}")
            continue
        except OSError as e:
            raise DataError(f"{redact_url(url)}: cannot read from the store: {e}") from e
        if done < total:
            raise DataError(f"{redact_url(url)}: the store returned {done} of {total} bytes")
    progress.close()
    return hasher.hexdigest()


def _hash_file(path: Path) -> Any:
    hasher = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            hasher.update(chunk)
    return hasher
