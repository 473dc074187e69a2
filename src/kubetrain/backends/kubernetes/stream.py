"""Streams of the Kubernetes backend: watch and log line framing, and the watch's resume state."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubetrain.backends.base import JobObject


@dataclass
class WatchState:
    """The last object a watch delivered and the resourceVersion to resume from."""

    obj: JobObject
    resource_version: str


def stream_lines(response: Any) -> Iterator[bytes]:
    """Complete lines of a streamed HTTP body, as soon as each arrives."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from complete
    if buffer:
        yield buffer


def json_lines(response: Any) -> Iterator[dict[str, Any]]:
    """Watch events: one JSON object per line."""
    for line in stream_lines(response):
        if line.strip():
            yield json.loads(line)


def close_response(response: Any) -> None:
    """Close a streamed response: one left unread (a window ended, a consumer stopped) must not go
    back to the pool with the rest of its body still on the wire."""
    response.close()
    response.release_conn()
