"""Loopback addresses and rendezvous ports for local replicas: one block of each per running job.

On a cluster every pod has its own IP, so two jobs (or two replicas) can listen on the same port.
Locally each job holds a *slot* s (1..65535) and its replicas get `127.<s // 256>.<s % 256>.<n>`,
n = 1..254 in the job's pod order (on Linux all of 127.0.0.0/8 routes to the loopback device, so
these addresses need no set-up). Slots rotate, so consecutive jobs get fresh addresses.

Addresses alone do not keep jobs apart: torch's stores (an `env://` program's TCPStore at
MASTER_PORT, torchrun's rendezvous store) listen on every interface, so two jobs with the same
master port meet on it. A job therefore also holds, for each rendezvous port its manifest names,
a port of its own (`AddressBlock.hold_port`), free on every interface and held by no other job,
and its operator hands that port to the programs (MASTER_PORT, PET_MASTER_PORT, the rendezvous
endpoint) in place of the manifest's.

Slots and ports are held with an exclusive `flock` on a file in a per-user lock directory, so
concurrent jobs in different processes get different ones, and they are freed automatically when
their holder exits, however it exits. The directory is one only this user can write (see
`default_lock_dir`), and nothing in it is followed through a symbolic link.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

from kubetrain.errors import BackendError

MAX_PODS_PER_JOB = 254
_MAX_SLOT = 65535
# Below Linux's ephemeral range (32768-60999 by default): a port the kernel hands a client socket,
# or a gloo listener bound to port 0, is never one of these, so a held port stays free until the
# job's rank 0 listens on it.
RENDEZVOUS_PORTS = range(20000, 32768)
LOCK_DIR_NAME = "kubetrain-loopback"


def loopback_address(slot: int, ordinal: int) -> str:
    """The address of the `ordinal`-th pod (0-based) of the job holding `slot`."""
    if not 1 <= slot <= _MAX_SLOT:
        raise ValueError(f"slot must be in 1..{_MAX_SLOT}, got {slot}")
    if not 0 <= ordinal < MAX_PODS_PER_JOB:
        raise ValueError(f"a local job has at most {MAX_PODS_PER_JOB} pods; pod ordinal {ordinal} is out of range")
    return f"127.{slot >> 8}.{slot & 255}.{ordinal + 1}"


def default_lock_dir() -> Path:
    """Where slot and port locks live: `$XDG_RUNTIME_DIR/kubetrain-loopback`, else `~/.kubetrain/loopback`.

    Shared by every kubetrain process of this user, whatever its TMPDIR: `kubetrain run` points
    each run's steps at a TMPDIR of their own, and under TMPDIR two runs side by side both handed
    out slot 1. Not a fixed name in /tmp either: another user could create it first and point its
    files at ours. `$XDG_RUNTIME_DIR` (the login's private runtime directory) counts only when it
    is a directory of this user that nobody else can write.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        try:
            info = os.stat(runtime)
        except OSError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode) and _private(info):
            return Path(runtime) / LOCK_DIR_NAME
    return Path.home() / ".kubetrain" / "loopback"


def _private(info: os.stat_result) -> bool:
    return info.st_uid == os.geteuid() and not info.st_mode & 0o022


def open_lock_dir(directory: Path) -> int:
    """A descriptor of `directory` (created 0700 if missing), once it is shown to be this user's alone.

    Refused, with what to do: a path that is not a directory (or is a symbolic link), one owned by
    another user, or one that group or others can write (they could plant links in it).
    """
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        what = "is a symbolic link" if e.errno == errno.ELOOP else f"cannot be used as a directory ({e.strerror})"
        raise BackendError(
            f"the local backend's lock directory {directory} {what}; remove it (kubetrain creates it again) "
            "or point XDG_RUNTIME_DIR at a directory of your own"
        ) from e
    info = os.fstat(fd)
    if not _private(info):
        os.close(fd)
        problem = (
            f"belongs to uid {info.st_uid}, not to you (uid {os.geteuid()})"
            if info.st_uid != os.geteuid()
            else f"can be written by group or others (mode {stat.S_IMODE(info.st_mode):o})"
        )
        raise BackendError(
            f"the local backend's lock directory {directory} {problem}; another user could take over its "
            f"lock files: remove it (kubetrain creates it again, mode 700) or run `chmod 700 {directory}`"
        )
    return fd


def _open_lock_file(dir_fd: int, name: str, directory: Path) -> int:
    """Open (create) a lock file in the lock directory, never through a symbolic link."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as e:
        what = "is a symbolic link" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})"
        raise BackendError(
            f"{directory / name} {what}; kubetrain never follows links there: remove it, or the whole directory"
        ) from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BackendError(f"{directory / name} is not a regular file; remove it, or the whole directory")
    return fd


def port_free(port: int) -> bool:
    """Whether a server can listen on `port` on every interface, IPv4 and (where this machine has it) IPv6.

    As torch's TCPStore listens (SO_REUSEADDR: a port left in TIME_WAIT by an earlier job is free).
    """
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this machine
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((host, port))
                sock.listen(1)
            except OSError as e:
                if e.errno in (errno.EADDRINUSE, errno.EACCES):
                    return False
                if family == socket.AF_INET6 and e.errno == errno.EADDRNOTAVAIL:
                    continue
                raise
    return True


def _hold_next(
    dir_fd: int, directory: Path, kind: str, candidates: range, usable: Callable[[int], bool]
) -> tuple[int, int] | None:
    """Lock the first usable candidate after the one handed out last: (number, descriptor holding it).

    Numbers rotate instead of restarting from the lowest: a new job's replicas then get addresses
    (and ports) that no recent job used, like new pods get new IPs, so a server does not meet the
    TIME_WAIT sockets of the previous job.
    """
    counter = _open_lock_file(dir_fd, f"next-{kind}", directory)
    try:
        fcntl.flock(counter, fcntl.LOCK_EX)
        raw = os.pread(counter, 16, 0).decode(errors="replace").strip()
        start = int(raw) if raw.isdigit() and int(raw) in candidates else candidates[0]
        for step in range(len(candidates)):
            number = candidates[(start - candidates[0] + step) % len(candidates)]
            fd = _open_lock_file(dir_fd, f"{kind}-{number}.lock", directory)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if not usable(number):
                os.close(fd)
                continue
            following = candidates[(number - candidates[0] + 1) % len(candidates)]
            os.ftruncate(counter, 0)
            os.pwrite(counter, str(following).encode(), 0)
            return number, fd
    finally:
        os.close(counter)  # also drops the counter's lock
    return None


class AddressBlock:
    """A held slot, and the ports held with it. Release it when the job's processes are gone."""

    def __init__(self, slot: int, fd: int, *, dir_fd: int | None = None, directory: Path | None = None) -> None:
        self.slot = slot
        self._fds: list[int] = [fd]
        self._dir_fd = dir_fd
        self._directory = directory
        self._ports: dict[int, int] = {}

    def address(self, ordinal: int) -> str:
        """The address of the job's `ordinal`-th pod."""
        return loopback_address(self.slot, ordinal)

    def hold_port(self, manifest_port: int) -> int:
        """The job's own port standing for `manifest_port` (the same one each time it is asked for).

        Free on every interface now and held by no other job until this block is released.
        """
        if manifest_port in self._ports:
            return self._ports[manifest_port]
        if self._dir_fd is None or self._directory is None:
            raise BackendError("this address block was released; its job cannot hold ports any more")
        held = _hold_next(self._dir_fd, self._directory, "port", RENDEZVOUS_PORTS, port_free)
        if held is None:
            raise BackendError(
                f"no port in {RENDEZVOUS_PORTS.start}..{RENDEZVOUS_PORTS.stop - 1} is free for a local job's "
                f"rendezvous (all are held by running local jobs or by other servers on this machine)"
            )
        self._ports[manifest_port] = held[0]
        self._fds.append(held[1])
        return held[0]

    @property
    def ports(self) -> dict[int, int]:
        """Manifest port → the job's own port, for every port held so far."""
        return dict(self._ports)

    def release(self) -> None:
        """Give the slot and the ports back (idempotent)."""
        for fd in self._fds:
            os.close(fd)  # closing a descriptor drops its flock
        self._fds = []
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None


def allocate_block(lock_dir: Path | None = None) -> AddressBlock:
    """Hold the next free slot after the one handed out last (see `_hold_next`)."""
    directory = lock_dir or default_lock_dir()
    dir_fd = open_lock_dir(directory)
    try:
        held = _hold_next(dir_fd, directory, "slot", range(1, _MAX_SLOT + 1), lambda _: True)
    except BaseException:
        os.close(dir_fd)
        raise
    if held is None:
        os.close(dir_fd)
        raise BackendError(f"all {_MAX_SLOT} loopback address blocks in {directory} are in use by running local jobs")
    return AddressBlock(held[0], held[1], dir_fd=dir_fd, directory=directory)
