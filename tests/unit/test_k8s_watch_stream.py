"""A watch stream cut inside an event (backends/kubernetes/stream.py): the fragment is dropped, not parsed."""

from __future__ import annotations

import json
from collections.abc import Iterator

from kubetrain.backends.kubernetes.stream import json_lines, stream_lines


class _Body:
    """A streamed response whose chunks are given."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def stream(self, amt: None = None, decode_content: bool = False) -> Iterator[bytes]:
        del amt, decode_content
        yield from self.chunks


def _event(name: str) -> bytes:
    return json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": name}}}).encode() + b"\n"


def test_a_watch_cut_inside_an_event_yields_the_whole_events_and_drops_the_fragment() -> None:
    # Cut in the middle of a two-byte character: parsing the fragment would raise UnicodeDecodeError.
    cut = _event("pödé")[:-8]
    events = list(json_lines(_Body(_event("a") + _event("b")[:10], _event("b")[10:] + cut)))
    assert [e["object"]["metadata"]["name"] for e in events] == ["a", "b"]


def test_a_logs_last_line_without_a_newline_is_still_read() -> None:
    assert list(stream_lines(_Body(b"one\ntw", b"o\nthree"))) == [b"one", b"two", b"three"]
