"""Writing a file so that a reader, or a process restarted after a crash, never sees half of it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write `path` through `write(f)` so readers see the old file or the whole new one, never half.

    The data goes to a temporary file in the same directory, is fsynced, then renamed over `path`
    (rename is atomic within one file system, which is what a restarted reader relies on).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600; a model or metrics.json on a shared claim must be readable
        # by the next step's pod, which may run as another user: the mode open() would give.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The rename itself must reach the disk too, or a crash can bring the old name back.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _umask() -> int:
    """This process's umask, read without changing it (os.umask can only be read by setting it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """`atomic_write` of a byte string."""

    def write(f: IO[bytes]) -> None:
        f.write(data)

    atomic_write(path, write)
