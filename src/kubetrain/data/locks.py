"""Exclusive file locks that leave no lock file behind: for the download cache and data set directories.

A lock is `flock` on a lock file, which works on local disks and on NFS (Linux emulates it with
POSIX locks there). The holder removes the file before it lets go, and a waiter that then gets a
removed file's lock opens the path again, so no lock file is left behind and no two holders ever
hold different files of one name.

Two users: the download cache (fetch.py), one lock per cached URL, so a second process waits and
then finds the finished file; and the writers of one data set directory (:func:`directory_turn`).
Runs started together on one workspace claim (a sweep, a ParallelFor) each run a download step for
the same source, hence for the same directory. Without turns, one step's swap of its finished copy
raced another's (the rename onto a directory just put there fails, or the check of the old copy
reads a `dataset.json` being moved away), and that run failed. With turns, the first step writes
and the others find its copy and reuse it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# Filesystems that refuse locks: the holders then run without turns, as before, and say so.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS}
_held = threading.local()


def acquire(lock: Path) -> int | None:
    """An fd holding `lock`'s flock, the path still naming that file; None where locks are refused.

    Waits for the holder. Raises OSError when the lock file cannot be created.
    """
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            os.close(fd)
            if e.errno in _NO_LOCKS:
                log.warning("%s: this filesystem refuses locks (%s); going on without them", lock, e.strerror)
                return None
            raise
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder before us removed this file: take the path's new one


def release(lock: Path, fd: int | None) -> None:
    """Remove the lock file, then let go of `fd` (from :func:`acquire`)."""
    if fd is None:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)
    os.close(fd)


def lock_path(directory: Path) -> Path:
    """The lock file of `directory`: a hidden file beside it, present only while someone holds it."""
    return directory.parent / f".{directory.name}.lock"


@contextlib.contextmanager
def directory_turn(directory: Path) -> Iterator[None]:
    """Hold `directory`'s lock for the block; a thread that holds it already just goes on.

    Re-entrant per thread, so a step that holds the turn while it checks and downloads can call
    the writer, which takes the same turn for its swap.
    """
    key = directory.absolute()
    held: set[Path] = getattr(_held, "paths", set())
    _held.paths = held
    if key in held:
        yield
        return
    fd = acquire(lock_path(key))
    held.add(key)
    try:
        yield
    finally:
        held.discard(key)
        release(lock_path(key), fd)
