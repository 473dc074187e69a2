"""Checks on real processes the local backend's unit tests start: alive or not, and waiting on them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie waiting to be reaped is dead."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(predicate: Callable[[], object], timeout: float = 20.0) -> None:
    """Return once `predicate()` is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)
