"""Fetch one file from a URL or path into the download cache, verified and renamed atomically.

Remote files (http(s) and fsspec stores) land in a cache directory as ``<key>-<name>.part`` and
are renamed to ``<key>-<name>`` only when complete and, if a sha256 was given, verified; a
mismatch deletes the part. A file lock keeps two processes from writing the same entry. A later
fetch of the same URL reuses the cached file (re-checked against the sha256 when one is given).
Local files (`file://` and plain paths) are read in place.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kubetrain.data import locks
from kubetrain.data.dataset_format import file_sha256
from kubetrain.data.errors import CACHE_FIX, ChecksumError, DataError, write_error
from kubetrain.data.http import RetryPolicy, fetch_http
from kubetrain.data.progress import Progress
from kubetrain.data.stores import fetch_fsspec, local_path, open_store
from kubetrain.urls import redact_url

__all__ = [
    "FetchOptions",
    "Fetched",
    "default_cache_dir",
    "fetch",
    "is_local",
    "normalize_sha256",
    "split_checksum",
    "url_name",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def default_cache_dir() -> Path:
    """`$KUBETRAIN_CACHE_DIR`, else `$XDG_CACHE_HOME/kubetrain/downloads` (~/.cache by default)."""
    if env := os.environ.get("KUBETRAIN_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kubetrain" / "downloads"


@dataclass(frozen=True)
class FetchOptions:
    """Where and how files are fetched; shared by every file of one download."""

    cache_dir: Path = field(default_factory=default_cache_dir)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    refresh: bool = False  # ignore cached copies and download again
    progress_stream: TextIO | None = None  # None: stderr
    quiet: bool = False

    def __post_init__(self) -> None:
        # Accept any path-like for convenience; store a Path.
        object.__setattr__(self, "cache_dir", Path(self.cache_dir))
        if not isinstance(self.retry, RetryPolicy):
            raise DataError(f"retry: got {self.retry!r}; expected a RetryPolicy")


@dataclass(frozen=True)
class Fetched:
    """A file available locally: where it is, what it was called at the source, its sha256."""

    path: Path
    name: str
    url: str
    sha256: str | None


def normalize_sha256(value: str, what: str) -> str:
    """Lower-case `value` and check it is 64 hex digits."""
    digest = value.strip().lower()
    if not _HEX64.fullmatch(digest):
        raise DataError(f"{what}: sha256 {value!r} is not 64 hexadecimal digits")
    return digest


def split_checksum(url: str) -> tuple[str, str | None]:
    """Split a ``URL#sha256=HEX`` fragment off `url` (pip's convention for per-file hashes)."""
    base, sep, fragment = url.partition("#")
    if sep and fragment.startswith("sha256="):
        return base, normalize_sha256(fragment.removeprefix("sha256="), base)
    return url, None


def is_local(url: str) -> bool:
    """Whether `url` is a plain path or a `file://` URL."""
    scheme = urllib.parse.urlsplit(url).scheme
    return scheme in ("", "file")


def url_name(url: str) -> str:
    """The last path component of `url`, unquoted (the file's name at the source)."""
    path = urllib.parse.urlsplit(url).path if not is_local(url) else os.fspath(local_path(url))
    return urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1])


def _entry_name(url: str) -> str:
    key = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    name = _UNSAFE_NAME_CHARS.sub("_", url_name(url))[-100:] or "download"
    return f"{key}-{name}"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    # A lock per cache entry (locks.py): a second process waits, then finds the finished file, and
    # the cache keeps no `.lock` per URL.
    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = locks.acquire(lock_path)
    except OSError as e:
        raise write_error(lock_path, e, fix=CACHE_FIX) from e
    try:
        yield
    finally:
        locks.release(lock_path, fd)


def _cached(
    url: str,
    expected: str | None,
    options: FetchOptions,
    progress: Progress,
    transfer: Callable[[Path], str],
) -> Fetched:
    try:
        options.cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(options.cache_dir, e, fix=CACHE_FIX) from e
    entry = options.cache_dir / _entry_name(url)
    part = entry.with_name(entry.name + ".part")
    meta = part.with_name(part.name + ".json")
    name = url_name(url)
    with _locked(entry):
        if options.refresh:
            for stale in (entry, part, meta):
                stale.unlink(missing_ok=True)
        if entry.is_file():
            actual = file_sha256(entry) if expected is not None else None
            if actual == expected:
                progress.note(f"using the cached copy {entry}")
                return Fetched(entry, name, url, actual)
            progress.note(f"the cached copy has sha256 {actual}; downloading again")
            entry.unlink()
        actual = transfer(part)
        if expected is not None and actual != expected:
            part.unlink(missing_ok=True)
            meta.unlink(missing_ok=True)
            raise ChecksumError(redact_url(url), expected, actual)
        os.replace(part, entry)
        meta.unlink(missing_ok=True)
    return Fetched(entry, name, url, actual)


def fetch(url: str, *, sha256: str | None, options: FetchOptions) -> Fetched:
    """Make the file at `url` available locally, verified against `sha256` when given."""
    scheme = urllib.parse.urlsplit(url).scheme
    name = url_name(url)
    progress = Progress(name or redact_url(url), None, stream=options.progress_stream, enabled=not options.quiet)
    if is_local(url):
        path = local_path(url)
        if not path.is_file():
            what = "is not a regular file" if path.exists() else "does not exist"
            raise DataError(f"{redact_url(url)}: {what}")
        actual = file_sha256(path) if sha256 is not None else None
        if actual != sha256:
            # The user's own file: report it, never delete it.
            raise DataError(f"{redact_url(url)}: sha256 mismatch: expected {sha256}, got {actual}")
        return Fetched(path, name, url, actual)
    if scheme in ("http", "https"):
        return _cached(
            url,
            sha256,
            options,
            progress,
            lambda part: fetch_http(url, part, policy=options.retry, progress=progress),
        )
    open_store(url)  # an unknown scheme or a missing driver fails before the cache is touched
    return _cached(
        url,
        sha256,
        options,
        progress,
        lambda part: fetch_fsspec(url, part, attempts=options.retry.attempts, progress=progress),
    )
