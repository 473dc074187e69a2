"""Test fixtures for data: MNIST-format idx files, archives, and a scriptable loopback HTTP server.

Import as ``from tests.data_helpers import ...`` (pytest runs from the repository root).
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import re
import socket
import tarfile
import threading
import urllib.parse
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "MNIST_NAMES",
    "LoopbackServer",
    "Request",
    "idx_bytes",
    "mnist_arrays",
    "mnist_files",
    "sha256_hex",
    "tar_bytes",
    "zip_bytes",
]

MNIST_NAMES = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}
_IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(">i4"): 0x0C}


def sha256_hex(data: bytes) -> str:
    """The hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def idx_bytes(array: npt.NDArray[Any]) -> bytes:
    """`array` (uint8, int8 or int32) encoded as an idx file."""
    dtype = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    header = bytes([0, 0, _IDX_CODES[dtype], array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + np.ascontiguousarray(array, dtype=dtype).tobytes()


def mnist_arrays(n: int, *, seed: int, rows: int = 28, cols: int = 28) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """`n` random uint8 images (n, rows, cols) and uint8 labels 0..9 (all ten present if n >= 10)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, rows, cols), dtype=np.uint8)
    labels = (np.arange(n) % 10).astype(np.uint8)
    rng.shuffle(labels)
    return images, labels


def mnist_files(
    n_train: int = 300, n_test: int = 100, *, gz: bool = True, seed: int = 0
) -> tuple[dict[str, bytes], dict[tuple[str, str], npt.NDArray[Any]]]:
    """The four MNIST files (name -> bytes, names with .gz when `gz`) and the arrays inside."""
    arrays: dict[tuple[str, str], npt.NDArray[Any]] = {}
    arrays["train", "images"], arrays["train", "labels"] = mnist_arrays(n_train, seed=seed)
    arrays["test", "images"], arrays["test", "labels"] = mnist_arrays(n_test, seed=seed + 1)
    files = {}
    for role, name in MNIST_NAMES.items():
        data = idx_bytes(arrays[role])
        # mtime=0: the same arrays always give the same bytes, so checksums are stable.
        files[name + (".gz" if gz else "")] = gzip.compress(data, mtime=0) if gz else data
    return files, arrays


def tar_bytes(
    files: Mapping[str, bytes],
    *,
    compression: str = "gz",
    symlinks: Mapping[str, str] | None = None,
) -> bytes:
    """A tar archive of `files` (name -> content, names written verbatim) plus `symlinks`."""
    buf = io.BytesIO()
    mode = f"w:{compression}"
    with tarfile.open(fileobj=buf, mode=mode) as tf:  # type: ignore[call-overload]
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)
    return buf.getvalue()


def tar_member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    """The archive's regular file `name`, to read (extractfile gives None for a directory or a link)."""
    member = tar.extractfile(name)
    assert member is not None, f"{name}: not a regular file in the archive"
    return member


def zip_bytes(files: Mapping[str, bytes]) -> bytes:
    """A zip archive of `files` (name -> content, names written verbatim)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


@dataclass(frozen=True)
class Request:
    """One request the server saw."""

    path: str
    range: str | None
    if_range: str | None


@dataclass
class _Script:
    files: dict[str, bytes]
    validators: bool = True
    statuses: dict[str, list[int]] = field(default_factory=dict)
    cut_after: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        del format, args  # keep test output clean

    def do_GET(self) -> None:
        script = self.server.script
        path, query_mark, query = self.path.lstrip("/").partition("?")
        path = urllib.parse.unquote(path) + query_mark + query  # the query as sent: it may hold %2F
        with script.lock:
            script.requests.append(Request(path, self.headers.get("Range"), self.headers.get("If-Range")))
            queued = script.statuses.get(path)
            status = queued.pop(0) if queued else None
            cut = script.cut_after.pop(path, None)
            data = script.files.get(path)
        if status is not None:
            self.send_response(status)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if data is None:
            self.send_error(404)
            return
        etag = f'"{sha256_hex(data)[:16]}"'
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        # Without validators (If-Range has nothing to match), a range is served whatever it resumes.
        if m and (not script.validators or self.headers.get("If-Range", etag) == etag):
            start = int(m.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        if script.validators:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        if cut is not None:
            # Promise the whole body, send part of it, then drop the connection.
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: _Script) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script


class LoopbackServer:
    """An HTTP server on 127.0.0.1 (free port) serving `files`, with scripted failures.

    - ``fail(path, 500, 500)``: the next requests for `path` get those statuses.
    - ``cut(path, n)``: the next response for `path` sends `n` body bytes, then disconnects.
    - ``requests``: every request seen (path, Range, If-Range); the path percent-decoded.
    - ``validators=False``: answer with no ETag (and no Last-Modified), as some servers do.
    """

    def __init__(self, files: Mapping[str, bytes], *, validators: bool = True) -> None:
        self._script = _Script(files=dict(files), validators=validators)
        self._server = _Server(self._script)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._server.server_address[1])

    def url(self, path: str = "") -> str:
        """The URL of `path` on this server."""
        return f"http://127.0.0.1:{self.port}/{path}"

    def put(self, path: str, data: bytes) -> None:
        """Serve `data` at `path` from now on."""
        with self._script.lock:
            self._script.files[path] = data

    def fail(self, path: str, *statuses: int) -> None:
        """Answer the next requests for `path` with `statuses`, in order."""
        with self._script.lock:
            self._script.statuses.setdefault(path, []).extend(statuses)

    def cut(self, path: str, after: int) -> None:
        """Drop the next response for `path` after `after` body bytes."""
        with self._script.lock:
            self._script.cut_after[path] = after

    @property
    def requests(self) -> list[Request]:
        """A copy of the request log."""
        with self._script.lock:
            return list(self._script.requests)

    def requests_for(self, path: str) -> list[Request]:
        """The logged requests for `path`."""
        return [r for r in self.requests if r.path == path]

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@contextmanager
def serving(files: Mapping[str, bytes]) -> Iterator[LoopbackServer]:
    """`with serving(files) as server:` a started LoopbackServer, shut down afterwards."""
    with LoopbackServer(files) as server:
        yield server


def write_files(directory: Path, files: Mapping[str, bytes]) -> None:
    """Write `files` (name -> content) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
