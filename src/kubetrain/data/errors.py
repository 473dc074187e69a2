"""Errors of the data layer, all subclasses of :class:`kubetrain.errors.DataError`.

`DataError` (exit code 2, invalid input) covers anything wrong with the data or the source: a 404,
a file that is not idx, a truncated gzip, a wrong checksum, an unsafe archive. Only failures that
may go away on their own (connection errors and 5xx/429 that outlast the retries) use
:class:`DownloadUnavailableError`, which maps to the infrastructure exit code.
"""

from __future__ import annotations

import errno
from pathlib import Path

from kubetrain.errors import DataError, ExitCode, KubetrainError

__all__ = [
    "CACHE_FIX",
    "OUT_FIX",
    "TMP_FIX",
    "ChecksumError",
    "CorruptFileError",
    "DataError",
    "DiskFullError",
    "DownloadCancelledError",
    "DownloadUnavailableError",
    "HTTPStatusError",
    "write_error",
]


class HTTPStatusError(DataError):
    """The server answered with a status that retrying cannot fix (a 4xx other than 429)."""

    def __init__(self, url: str, status: int, reason: str) -> None:
        self.url = url
        self.status = status
        super().__init__(f"{url}: HTTP {status} {reason}".rstrip())


class DownloadUnavailableError(DataError):
    """The source kept failing (connection errors, 5xx, 429) after every retry."""

    exit_code = ExitCode.INFRASTRUCTURE


class ChecksumError(DataError):
    """A downloaded file's sha256 differs from the expected one; the file has been deleted."""

    def __init__(self, source: str, expected: str, actual: str) -> None:
        self.source = source
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{source}: sha256 mismatch: expected {expected}, got {actual}; "
            "the downloaded file was deleted (check the URL and the --sha256 value)"
        )


class CorruptFileError(DataError):
    """A file's bytes are damaged (a bad CRC, a truncated gzip or archive), as opposed to a wrong format."""


class DiskFullError(DataError):
    """The local disk (or quota) is full: the machine's problem, not the data's; nothing partial is kept."""

    exit_code = ExitCode.INFRASTRUCTURE


class DownloadCancelledError(KubetrainError):
    """SIGTERM or SIGINT stopped a download; the cache's lock was let go, its partial file kept."""

    exit_code = ExitCode.CANCELLED


OUT_FIX = "choose another --out"
TMP_FIX = "free space there, or point TMPDIR at a disk with room"
CACHE_FIX = "free space there, or choose another --cache-dir (or KUBETRAIN_CACHE_DIR)"


def _file_ancestor(target: Path) -> Path | None:
    """The nearest existing ancestor of `target` when it is not a directory (so nothing fits below it)."""
    for parent in target.parents:
        if parent.is_dir():
            return None
        if parent.exists() or parent.is_symlink():
            return parent
    return None


def write_error(target: Path, error: OSError, *, fix: str = OUT_FIX) -> DataError:
    """The error for a failed local write of `target`: a full disk, or a place that cannot be written.

    `fix` says what to do when the place is wrong (the default: another --out).
    """
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(f"{target}: no space left on the device ({error.strerror}); free space or {fix}")
    blocker = _file_ancestor(target)
    if blocker is not None:
        return DataError(f"{target}: cannot be written: {blocker} is a file, not a directory; {fix}")
    where = f" ({error.filename})" if error.filename else ""
    return DataError(f"{target}: cannot be written: {error.strerror}{where}; {fix}")
