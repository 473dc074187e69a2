"""Streams of the Kubernetes backend: watch and log line framing, followed logs, ending a streamed response."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kubetrain.backends.base import LogStream
from kubetrain.backends.kubernetes.retry import TRANSPORT_ERRORS
from kubetrain.errors import BackendError

logger = logging.getLogger(__name__)


def stream_lines(response: Any, *, partial_last: bool = True) -> Iterator[bytes]:
    """The lines of a streamed HTTP body, each as soon as it is complete; and, with `partial_last`,
    what followed the last newline when the body ended (a log's last line may have none)."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from complete
    if buffer and partial_last:
        yield buffer
    elif buffer:
        logger.debug("a stream ended inside a line (%d bytes dropped)", len(buffer))


def json_lines(response: Any) -> Iterator[dict[str, Any]]:
    """Watch events: one JSON object per line. A watch whose connection ends inside an event (cut
    mid-line, perhaps mid-character) drops that fragment: the watch resumes from the last event
    it did deliver, so the server sends that event again whole."""
    for line in stream_lines(response, partial_last=False):
        if line.strip():
            yield json.loads(line)


def shutdown_response(response: Any) -> None:
    """Stop reads of a streamed response from another thread: its socket is shut down for reading,
    so a read blocked on it returns at once (closing the socket would leave that read blocked)."""
    shutdown = getattr(response, "shutdown", None)  # urllib3 ≥ 2.3
    try:
        if shutdown is not None:
            shutdown()
        else:
            response.close()
    except (OSError, RuntimeError, ValueError) as e:  # already released or closed: nothing to stop
        logger.debug("shutting a streamed response down: %s", e)


def close_response(response: Any) -> None:
    """Close a streamed response: one left unread (a window ended, a consumer stopped) must not go
    back to the pool with the rest of its body still on the wire."""
    response.close()
    response.release_conn()


class FollowedLog(LogStream):
    """A followed log over HTTP: `close` shuts the socket down, so a read blocked on it returns."""

    def __init__(self, open_response: Callable[[], Any], *, what: str) -> None:
        super().__init__(iter(()))
        self._open = open_response
        self._what = what
        self._response: Any = None
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            if self._closed.is_set():
                return
            self._response = self._open()
        try:
            for raw in stream_lines(self._response):
                yield raw.decode("utf-8", "replace")
        except TRANSPORT_ERRORS as e:
            if not self._closed.is_set():
                raise BackendError(f"{self._what}: stream broken: {e}") from e
        finally:
            close_response(self._response)

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            if self._response is not None:
                shutdown_response(self._response)
