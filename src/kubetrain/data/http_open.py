"""Opening one HTTP(S) request for a download: where it may go, how slow it may be.

- Every byte of the response, the status line and headers as much as the body, is kept to a
  minimum speed (:class:`Pace`): a server that answers a byte at a time, headers included, is given
  up on after ``speed_window`` seconds instead of holding the download for ever.
- Redirects go to http(s) only, and never from https down to http; a refused one is invalid input
  (the URL must change), whatever scheme it names.
- A path or query with characters outside ASCII is percent-encoded in UTF-8, as browsers send it
  (http.client would refuse it with a UnicodeEncodeError).
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import string
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kubetrain.data.errors import DataError, DownloadUnavailableError
from kubetrain.urls import redact_url

__all__ = ["Pace", "TooSlowError", "TransientError", "ascii_url", "open_url"]


class TransientError(Exception):
    """One attempt failed in a way a later attempt may not."""

    def __init__(self, what: str, retry_after: float | None = None) -> None:
        super().__init__(what)
        self.retry_after = retry_after


class TooSlowError(TransientError):
    """The transfer fell below the minimum speed: a failed attempt even though it made progress."""


class Pace:
    """Fails an attempt that receives fewer than `min_speed` bytes/s over any `window` seconds.

    The clock starts when the request is made, so waiting for the response counts too.
    """

    def __init__(self, min_speed: float, window: float) -> None:
        self.min_speed = min_speed
        self.window = window
        self.start = time.monotonic()
        self.received = 0

    def add(self, n: int) -> None:
        """Count `n` more bytes received."""
        self.received += n

    def check(self) -> None:
        """Raise :class:`TooSlowError` when the window that just ended was below the minimum speed."""
        now = time.monotonic()
        elapsed = now - self.start
        if elapsed < self.window:
            return
        if self.received < self.min_speed * elapsed:
            raise TooSlowError(
                f"too slow: {self.received} bytes in {elapsed:.1f}s, below the minimum of {self.min_speed:g} "
                "bytes/s (--speed-limit, over --speed-time seconds)"
            )
        self.start, self.received = now, 0


class _PacedReader(io.RawIOBase):
    """The socket as http.client reads it, every read counted and kept to the pace.

    The pace is checked before a read, not after it, so what did arrive is always handed on: a
    body cut short for being too slow is kept, and the next attempt resumes after it.
    """

    def __init__(self, raw: io.RawIOBase, pace: Pace) -> None:
        super().__init__()
        self._raw = raw
        self._pace = pace

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._pace.check()
        n = self._raw.readinto(buffer)
        if n:
            self._pace.add(n)
        return n

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        self._raw.close()
        super().close()


class _PacedResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, pace: Pace, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # the plain reader http.client made: replaced before anything is read
        self.fp = io.BufferedReader(_PacedReader(sock.makefile("rb", buffering=0), pace))


class _PacedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, *, pace: Pace, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        # http.client builds the response as response_class(sock, method=...): bind the pace to it.
        self.response_class = functools.partial(_PacedResponse, pace=pace)  # type: ignore[assignment]


class _PacedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, *, pace: Pace, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self.response_class = functools.partial(_PacedResponse, pace=pace)  # type: ignore[assignment]


class _PacedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, pace: Pace) -> None:
        super().__init__()
        self._pace = pace

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_PacedHTTPConnection, pace=self._pace), req)


class _PacedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, pace: Pace) -> None:
        super().__init__()
        self._pace = pace

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        # No context: http.client's default one, as urllib's own handler (SSL_CERT_FILE and all).
        return self.do_open(functools.partial(_PacedHTTPSConnection, pace=self._pace), req)


def _refuse_unsafe_redirect(req: urllib.request.Request, fp: Any, code: int, target: str) -> None:
    """Raise when a redirect from `req` to `target` leaves http(s) or steps down from https."""
    try:
        new = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, target)).scheme
    except ValueError as e:  # a malformed Location, e.g. "http://[::1"
        fp.close()
        raise DownloadUnavailableError(
            f"{redact_url(req.full_url)}: the server redirects (HTTP {code}) to a malformed URL ({e}); "
            "check the URL in a browser, or download it elsewhere and give the file's URL"
        ) from e
    old = urllib.parse.urlsplit(req.full_url).scheme
    if new in ("http", "https") and not (old == "https" and new != "https"):
        return
    fp.close()
    why = "leaves https for plain http" if new == "http" else f"leads to {new}://, not http(s)"
    raise DataError(
        f"{redact_url(req.full_url)}: refusing a redirect (HTTP {code}) to {redact_url(target)}: it {why}; "
        "give the file's final https URL"
    )


class _SafeRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects to http(s) only, and never from https to plain http."""

    def http_error_302(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any
    ) -> http.client.HTTPResponse | None:
        # Checked here, before urllib's own check, which answers a redirect to file:// (or any
        # scheme but http, https and ftp) with an HTTPError that reads like a server failure.
        target = headers.get("Location") or headers.get("URI")
        if target:
            _refuse_unsafe_redirect(req, fp, code, target)
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


# Every ASCII punctuation character stays as it is (so existing %XX escapes, ?, & and = keep their
# meaning); only what is not ASCII, spaces and control characters are encoded. urllib does the same
# to a redirect's Location.
_KEEP = string.punctuation


def ascii_url(url: str) -> str:
    """`url` with its path and query percent-encoded (UTF-8) where they are not ASCII."""
    parts = urllib.parse.urlsplit(url)
    path = urllib.parse.quote(parts.path, safe=_KEEP)
    query = urllib.parse.quote(parts.query, safe=_KEEP)
    return urllib.parse.urlunsplit(parts._replace(path=path, query=query))


def open_url(url: str, headers: dict[str, str], *, pace: Pace, timeout: float) -> http.client.HTTPResponse:
    """GET `url` with `headers`; the response (headers and body) is kept to `pace`.

    Raises urllib's errors (HTTPError for a status >= 400, URLError for a connection failure),
    :class:`TooSlowError`, or DataError for a refused redirect.
    """
    opener = urllib.request.build_opener(_SafeRedirects, _PacedHTTPHandler(pace), _PacedHTTPSHandler(pace))
    resp = opener.open(urllib.request.Request(ascii_url(url), headers=headers), timeout=timeout)
    assert isinstance(resp, http.client.HTTPResponse)  # http(s) URLs only reach here
    return resp
