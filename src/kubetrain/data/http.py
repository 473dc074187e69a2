"""HTTP(S) transfer into a partial file: streamed, hashed on the fly, resumed, retried.

Only the standard library is used (urllib for redirects, proxies and TLS; http.client underneath)
so the launcher image needs no extra dependency. One call appends to `part` until the whole entity
is there and returns its sha256:

- A partial file from an earlier attempt (or an earlier run) is resumed with ``Range`` and
  ``If-Range`` (the server's strong ETag or its Last-Modified), so a changed file restarts from
  zero instead of being spliced. Without a validator nothing tells a changed file from the one
  the part holds, so such a part is started over, never resumed. A 200 to a range request also
  restarts from zero.
- Connection errors, 5xx and 429 are retried with exponential backoff and jitter (``Retry-After``
  is honoured); the failure count resets whenever an attempt made progress at the minimum speed.
  Any other 4xx fails at once: retrying cannot fix a wrong URL.
- A response slower than ``RetryPolicy.min_speed`` bytes/s over any ``speed_window`` seconds
  (curl's ``--speed-limit``/``--speed-time``), its status line and headers included, is given up
  and counts as a failed attempt, so a server that drips a byte a minute ends in an error instead
  of never.
- Redirects go to http(s) only, and never from https down to http.
- A path or query with characters outside ASCII (``/données/é.npz``) is sent percent-encoded in
  UTF-8, as a browser sends it.
"""

from __future__ import annotations

import email.utils
import errno
import hashlib
import http.client
import json
import math
import random
import re
import socket
import ssl
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.data.errors import (
    CACHE_FIX,
    DataError,
    DiskFullError,
    DownloadUnavailableError,
    HTTPStatusError,
    write_error,
)
from kubetrain.data.http_open import Pace, TooSlowError, TransientError, open_url
from kubetrain.data.progress import Progress
from kubetrain.data.sink import CHUNK_SIZE, HashingSink
from kubetrain.urls import redact_url

__all__ = ["RetryPolicy", "fetch_http"]

_USER_AGENT = "kubetrain-download/1"
# getaddrinfo's "no such name" answers: EAI_NONAME, and glibc's EAI_NODATA (no address for it).
_NO_SUCH_NAME = frozenset({socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)})
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIABLE_RANGE = re.compile(r"bytes \*/(\d+)")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: `attempts` tries per stretch without progress, backoff between them."""

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    timeout: float = 60.0  # socket timeout of one connect or read
    min_speed: float = 1024.0  # bytes/s; an attempt slower than this over speed_window seconds fails
    speed_window: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise DataError(f"retry attempts: got {self.attempts}; expected >= 1")
        if not (math.isfinite(self.min_speed) and self.min_speed > 0):
            raise DataError(f"--speed-limit: got {self.min_speed}; expected a number of bytes per second > 0")
        if not (math.isfinite(self.speed_window) and self.speed_window > 0):
            raise DataError(f"--speed-time: got {self.speed_window}; expected a number of seconds > 0")
        if not 0 <= self.base_delay <= self.max_delay:
            raise DataError(
                f"retry delays: got base {self.base_delay}, max {self.max_delay}; expected 0 <= base <= max"
            )
        if self.timeout <= 0:
            raise DataError(f"retry timeout: got {self.timeout}; expected > 0")

    def delay(self, failures: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait after the `failures`-th failure in a row ("equal jitter" backoff)."""
        cap = min(self.max_delay, self.base_delay * 2 ** (failures - 1))
        wait = rng.uniform(cap / 2, cap)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_delay))
        return wait


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    if value.strip().isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class _Part:
    """The partial file, its sidecar (validators), and the hash of what it holds."""

    path: Path
    hasher: Any = None  # hashlib sha256 object over the first `hashed` bytes of the file
    hashed: int = 0

    @property
    def meta_path(self) -> Path:
        return self.path.with_name(self.path.name + ".json")

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def validator(self) -> str | None:
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        value = meta.get("etag") or meta.get("last_modified")
        return value if isinstance(value, str) else None

    def start(self, offset: int, headers: Any) -> None:
        """Prepare to append at `offset` (0 truncates); record the response's validators."""
        try:
            self._start(offset, headers)
        except OSError as e:
            # A local disk problem, not a network one: never retried.
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                self.discard()
            raise write_error(self.path, e, fix=CACHE_FIX) from e

    def _start(self, offset: int, headers: Any) -> None:
        if offset == 0:
            # A fresh file, not a truncated one: ext4 flushes truncated-then-rewritten files
            # on close, which would cost the write-back of the whole download.
            self.path.unlink(missing_ok=True)
            self.hasher, self.hashed = hashlib.sha256(), 0
        etag = headers.get("ETag")
        meta = {
            # Weak ETags do not guarantee byte-identical content, so they cannot guard a resume.
            "etag": etag if etag and not etag.startswith("W/") else None,
            "last_modified": headers.get("Last-Modified"),
        }
        self.meta_path.write_text(json.dumps(meta), encoding="utf-8")
        if self.hasher is None or self.hashed != offset:
            # Resuming a part left by another run: hash what it already holds.
            self.hasher, self.hashed = hashlib.sha256(), 0
            with open(self.path, "rb") as f:
                while chunk := f.read(CHUNK_SIZE):
                    self.hasher.update(chunk)
                    self.hashed += len(chunk)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
        self.meta_path.unlink(missing_ok=True)
        self.hasher, self.hashed = None, 0


def _fill(resp: http.client.HTTPResponse, buf: bytearray) -> tuple[int, TooSlowError | None]:
    """Read into `buf` until it is full or the body ends: the bytes read, and why it stopped early if too slow.

    One `read1` per socket read, not `readinto`, which blocks until the whole buffer is full and
    so would never let a dripping server be noticed (the response's reader keeps the pace).
    """
    filled = 0
    with memoryview(buf) as view:
        while filled < len(view):
            try:
                data = resp.read1(len(view) - filled)
            except TooSlowError as e:
                return filled, e  # what did arrive is kept: the next attempt resumes after it
            if not data:
                break
            view[filled : filled + len(data)] = data
            filled += len(data)
    return filled, None


def _stream(resp: http.client.HTTPResponse, part: _Part, progress: Progress) -> None:
    """Append the response body to the part file; a helper thread hashes it meanwhile."""
    with HashingSink(part.path, part.hashed, part.hasher) as sink:
        try:
            while True:
                buf = sink.buffer()
                n, too_slow = _fill(resp, buf)
                if not n:
                    sink.release(buf)
                    if too_slow is not None:
                        raise too_slow
                    break
                sink.commit(buf, n)
                part.hashed += n
                progress.update(n)
                if too_slow is not None:
                    raise too_slow
        except DiskFullError:
            part.discard()  # a full disk keeps no partial file (nor its sidecar): no room to grow it
            raise
        except DataError:
            part.hasher = None  # hashed and written may differ: rehash from disk if resumed
            raise


def _open(url: str, offset: int, validator: str | None, policy: RetryPolicy) -> http.client.HTTPResponse:
    headers = {"User-Agent": _USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        headers["If-Range"] = str(validator)
    # No byte for speed_window seconds is below any minimum speed: no need to wait the longer timeout.
    timeout = min(policy.timeout, policy.speed_window)
    return open_url(url, headers, pace=Pace(policy.min_speed, policy.speed_window), timeout=timeout)


def _attempt(url: str, part: _Part, progress: Progress, policy: RetryPolicy) -> bool:
    """One request. True when the part is complete; False to start over at once."""
    offset = part.size()
    validator = part.validator()
    if offset and validator is None:
        # The server gave neither a strong ETag nor Last-Modified: nothing would tell it that the
        # file changed since the part was written, and a range of the new file would be spliced
        # onto the old one (a corrupt file, or an npz with a bad CRC in every later run).
        progress.note("the partial download has no ETag or Last-Modified to check it against; starting over")
        part.discard()
        offset = 0
    try:
        resp = _open(url, offset, validator, policy)
    except urllib.error.HTTPError as e:
        with e:
            if e.code == 416 and offset:
                # Range not satisfiable: complete if the part already has every byte.
                m = _UNSATISFIABLE_RANGE.fullmatch(e.headers.get("Content-Range", ""))
                if m and int(m.group(1)) == offset:
                    part.start(offset, e.headers)
                    return True
                part.discard()
                return False
            if e.code >= 500 or e.code == 429:
                raise TransientError(f"HTTP {e.code} {e.reason}", _retry_after(e.headers)) from e
            if 300 <= e.code < 400:
                # urllib gives up on a redirect loop (or a redirect without a target): the server's
                # fault, not the request's, so the network exit code rather than "invalid input".
                reason = " ".join(str(e.reason).split())  # urllib's loop message spans lines
                raise DownloadUnavailableError(
                    f"{redact_url(url)}: the server's redirects do not lead to the file (HTTP {e.code}: {reason}); "
                    "check the URL in a browser, or download it elsewhere and give the file's URL"
                ) from e
            raise HTTPStatusError(redact_url(url), e.code, str(e.reason)) from e
    with resp:
        total: int | None = None
        if resp.status == 206:
            m = _CONTENT_RANGE.fullmatch(resp.headers.get("Content-Range", ""))
            if not m or int(m.group(1)) != offset:
                part.discard()  # a range we did not ask for: start over cleanly
                return False
            total = None if m.group(3) == "*" else int(m.group(3))
        else:
            offset = 0  # 200: no range support, or the entity changed (If-Range failed)
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        part.start(offset, resp.headers)
        progress.restart(offset, total)
        _stream(resp, part, progress)
        if total is not None and part.hashed != total:
            raise TransientError(f"connection closed at byte {part.hashed} of {total}")
        return True


def fetch_http(
    url: str,
    part_path: Path,
    *,
    policy: RetryPolicy,
    progress: Progress,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> str:
    """Download `url` into `part_path` (resuming what is there); return the content's sha256."""
    rng = rng or random.Random()
    part = _Part(part_path)
    failures = 0
    restarts = 0
    last: Exception
    while True:
        before, started = part.size(), time.monotonic()
        try:
            if _attempt(url, part, progress, policy):
                progress.close()
                return str(part.hasher.hexdigest())
            restarts += 1
            if restarts > policy.attempts:
                raise DownloadUnavailableError(
                    f"{redact_url(url)}: the server kept answering range requests inconsistently"
                )
            continue
        except ssl.SSLCertVerificationError as e:
            raise DataError(f"{redact_url(url)}: TLS certificate verification failed: {e.verify_message}") from e
        except TransientError as e:
            what, retry_after, last = str(e), e.retry_after, e
        except urllib.error.URLError as e:
            if isinstance(e.reason, ssl.SSLCertVerificationError):
                raise DataError(
                    f"{redact_url(url)}: TLS certificate verification failed: {e.reason.verify_message}"
                ) from e
            if isinstance(e.reason, socket.gaierror) and e.reason.errno in _NO_SUCH_NAME:
                # The resolver's definite answer (a temporary DNS failure is EAI_AGAIN, retried):
                # six tries over half a minute only delayed the news of a typo.
                raise DownloadUnavailableError(
                    f"{redact_url(url)}: the host name does not resolve ({e.reason.strerror}); check the URL's "
                    "host, and that this machine's (a pod's: the cluster's) DNS knows it"
                ) from e
            what, retry_after, last = f"cannot connect: {e.reason}", None, e
        except (OSError, http.client.HTTPException) as e:
            # Resets, timeouts and truncated bodies (IncompleteRead) mid-transfer.
            what, retry_after, last = f"{type(e).__name__}: {e}", None, e
        # Progress at the minimum speed means the link works: give it a fresh set of tries. A
        # trickle (a byte, then a stall until the timeout) is not progress, or a drip never ends.
        grown = part.size() - before
        steady = grown > 0 and grown >= policy.min_speed * (time.monotonic() - started)
        failures = 1 if steady and not isinstance(last, TooSlowError) else failures + 1
        if failures >= policy.attempts:
            raise DownloadUnavailableError(
                f"{redact_url(url)}: giving up after {failures} failed attempts in a row; last error: {what}"
            ) from last
        wait = policy.delay(failures, rng, retry_after)
        progress.note(f"{what}; retry {failures}/{policy.attempts - 1} in {wait:.1f}s")
        sleep(wait)
