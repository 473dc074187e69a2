"""HashingSink: written bytes and the background hash always agree; disk errors are DataErrors."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from kubetrain.data.sink import HashingSink
from kubetrain.errors import DataError


def _append(path: Path, offset: int, hasher: object, chunks: list[bytes], size: int) -> int:
    with HashingSink(path, offset, hasher, chunk_size=size) as sink:
        for chunk in chunks:
            buf = sink.buffer()
            buf[: len(chunk)] = chunk
            sink.commit(buf, len(chunk))
        sink.release(sink.buffer())
    return sink.written


def test_hash_matches_file_across_buffer_reuse_and_append(tmp_path: Path) -> None:
    data = os.urandom(50_000)
    chunks = [data[i : i + 1000] for i in range(0, 30_000, 1000)]  # 30 chunks, 4 buffers
    path = tmp_path / "f.part"
    hasher = hashlib.sha256()
    assert _append(path, 0, hasher, chunks, 1000) == 30_000
    assert path.read_bytes() == data[:30_000]
    # Appending later (a resume) continues the same hash; stale bytes past offset are cut.
    with open(path, "ab") as f:
        f.write(b"garbage after the offset")
    _append(path, 30_000, hasher, [data[30_000:40_000], data[40_000:]], 10_000)
    assert path.read_bytes() == data
    assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux /dev/full")
def test_disk_full_is_a_data_error() -> None:
    with pytest.raises(DataError, match="/dev/full: no space left on the device"):
        _append(Path("/dev/full"), 0, hashlib.sha256(), [b"x" * 100], 100)
    assert Path("/dev/full").exists()  # a device is never taken for the partial file
