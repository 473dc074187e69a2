"""Loopback addresses for local replicas: one block of 127.0.0.0/8 per running job.

On a cluster every pod has its own IP, so two jobs (or two replicas) can listen on the same port.
Locally each job holds a *slot* s (1..65535) and its replicas get `127.<s // 256>.<s % 256>.<n>`,
n = 1..254 in the job's pod order (on Linux all of 127.0.0.0/8 routes to the loopback device, so
these addresses need no set-up). Slots rotate, so consecutive jobs get fresh addresses. A slot
is held with an exclusive `flock` on a file in a per-user directory, so concurrent jobs in
different processes get different slots, and a slot is freed automatically when its holder
exits, however it exits.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from kubetrain.errors import BackendError

MAX_PODS_PER_JOB = 254
_MAX_SLOT = 65535


def loopback_address(slot: int, ordinal: int) -> str:
    """The address of the `ordinal`-th pod (0-based) of the job holding `slot`."""
    if not 1 <= slot <= _MAX_SLOT:
        raise ValueError(f"slot must be in 1..{_MAX_SLOT}, got {slot}")
    if not 0 <= ordinal < MAX_PODS_PER_JOB:
        raise ValueError(f"a local job has at most {MAX_PODS_PER_JOB} pods; pod ordinal {ordinal} is out of range")
    return f"127.{slot >> 8}.{slot & 255}.{ordinal + 1}"


def default_lock_dir() -> Path:
    """Where slot locks live: shared by every kubetrain process of this user on this machine.

    /tmp, not TMPDIR: the loopback addresses are the machine's, so every process handing them out
    must meet in one directory whatever its environment. `kubetrain run` points each run's steps at
    a TMPDIR of their own; under TMPDIR two runs side by side both handed out slot 1 and their
    PyTorchJobs' rank 0 met at 127.0.1.1:23456.
    """
    root = Path("/tmp")
    return (root if root.is_dir() else Path(tempfile.gettempdir())) / f"kubetrain-loopback-{os.getuid()}"


class AddressBlock:
    """A held slot. Release it when the job's processes are gone."""

    def __init__(self, slot: int, fd: int) -> None:
        self.slot = slot
        self._fd: int | None = fd

    def address(self, ordinal: int) -> str:
        """The address of the job's `ordinal`-th pod."""
        return loopback_address(self.slot, ordinal)

    def release(self) -> None:
        """Give the slot back (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def allocate_block(lock_dir: Path | None = None) -> AddressBlock:
    """Hold the next free slot after the one handed out last.

    Slots rotate instead of restarting from the lowest: a new job's replicas then get addresses
    that no recent job used, like new pods get new IPs, so a server does not meet the TIME_WAIT
    sockets of the previous job on its port.
    """
    directory = lock_dir or default_lock_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    counter = os.open(directory / "next-slot", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(counter, fcntl.LOCK_EX)
        raw = os.pread(counter, 16, 0).decode().strip()
        start = int(raw) if raw.isdigit() and 1 <= int(raw) <= _MAX_SLOT else 1
        for step in range(_MAX_SLOT):
            slot = (start - 1 + step) % _MAX_SLOT + 1
            fd = os.open(directory / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            following = str(slot % _MAX_SLOT + 1).encode()
            os.ftruncate(counter, 0)
            os.pwrite(counter, following, 0)
            return AddressBlock(slot, fd)
    finally:
        os.close(counter)  # also drops the counter's lock
    raise BackendError(f"all {_MAX_SLOT} loopback address blocks in {directory} are in use by running local jobs")
