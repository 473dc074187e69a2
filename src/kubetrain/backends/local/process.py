"""Replica processes of the local backend: one session per pod, output captured to a file.

A container's processes all die with it; a local replica imitates that by running in its own
session (`start_new_session=True`, so the replica is a session *and* process-group leader) and
by killing every process of that session when the replica is stopped or its main process exits.
The session, not the process group, is the unit: Open MPI's `mpirun` puts each local rank in a
process group of its own, but all of them stay in the launcher's session. A process can still
leave the session (`setsid`, a daemon's double fork); it keeps its environment, though, so every
container's processes also carry a marker variable (:data:`CONTAINER_ENV`) with the container's
own token, and a process with that marker counts as the container's wherever it went.

If the Python process that supervises the replicas dies without cleaning up (SIGKILL, OOM), each
replica's main process still receives SIGTERM through the parent-death signal (`setpriv
--pdeathsig`, when util-linux provides it), and the backend's watchdog (`watchdog`) stops
every process of the sessions still registered with it (mpirun, for one, leaves its ranks).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kubetrain.backends.local.logfile import LogStream

LineSink = Callable[[str], None]


CONTAINER_ENV = "KUBETRAIN_LOCAL_CONTAINER"


@dataclass(frozen=True)
class ContainerId:
    """What makes a process one container's: its session, or the container's environment marker."""

    sid: int
    token: str

    def __str__(self) -> str:
        return f"{self.sid} {self.token}"

    @classmethod
    def parse(cls, text: str) -> ContainerId:
        """The inverse of `str()`."""
        sid, token = text.split()
        return cls(sid=int(sid), token=token)


class SessionRegistry(Protocol):
    """Who must know which replica containers are alive (`watchdog.Watchdog`)."""

    def add(self, container: ContainerId) -> None:
        """A container started."""

    def remove(self, container: ContainerId) -> None:
        """A container is gone."""


_SETPRIV = shutil.which("setpriv")
# How often to look again while waiting for a session's processes to exit after SIGTERM.
_EXIT_CHECK_SECONDS = 0.02
# How long SIGKILLed processes may take to disappear (they are in uninterruptible I/O at worst).
_KILL_WAIT_SECONDS = 5.0


def container_exit_code(returncode: int) -> int:
    """The exit code a container runtime reports: a process killed by signal N exits 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _has_marker(pid: str, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:  # exited meanwhile, or someone else's process
        return False


def container_members(container: ContainerId) -> list[int]:
    """Live (non-zombie) processes of a container: its session, and whatever carries its marker."""
    marker = f"{CONTAINER_ENV}={container.token}".encode()
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the process exited while we looked
            continue
        # The command name is in parentheses and may contain anything: parse after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) <= 3 or fields[0] == b"Z":
            continue
        if int(fields[3]) == container.sid or _has_marker(entry.name, marker):
            members.append(int(entry.name))
    return members


def signal_container(container: ContainerId, sig: int) -> int:
    """Send `sig` to every live process of the container; the number signalled."""
    count = 0
    for pid in container_members(container):
        try:
            os.kill(pid, sig)
            count += 1
        except ProcessLookupError:
            continue
    return count


class ReplicaProcess:
    """One started container: its process tree, its captured output, and how to stop it."""

    def __init__(
        self,
        *,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log: LogStream,
        prefix: str,
        sink: LineSink | None,
        registry: SessionRegistry | None = None,
        on_output_closed: Callable[[], None] | None = None,
    ) -> None:
        command = list(argv)
        if _SETPRIV is not None:
            command = [_SETPRIV, "--pdeathsig", "TERM", "--", *command]
        self._log = log
        self._prefix = prefix
        self._sink = sink
        # Output closes when the container's processes exit: the supervisor looks at once rather
        # than at its next poll (which stays as the backstop for a child that keeps the pipe open).
        self._on_output_closed = on_output_closed
        token = uuid.uuid4().hex
        self._popen = subprocess.Popen(
            command,
            env={**env, CONTAINER_ENV: token},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
        self.pid = self._popen.pid
        self.container = ContainerId(sid=self.pid, token=token)
        self._registry = registry
        if registry is not None:
            registry.add(self.container)
        self.started_at = time.time()
        self._returncode: int | None = None
        self._reader = threading.Thread(target=self._pump, name=f"kubetrain-log-{prefix}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        out = self._popen.stdout
        if out is None:  # pragma: no cover - stdout is always a pipe here
            return
        try:
            for line in iter(out.readline, b""):
                self._log.write(line)
                if self._sink is not None:
                    self._sink(f"[{self._prefix}] {line.decode('utf-8', 'replace').rstrip()}")
        finally:
            out.close()
            self._log.close()
            if self._on_output_closed is not None:
                # Output ends as the main process exits; reaped first, so the supervisor sees the code.
                self._popen.wait()
                self._on_output_closed()

    @property
    def log(self) -> LogStream:
        """The stream this attempt writes to."""
        return self._log

    def poll(self) -> int | None:
        """The container exit code once the main process has exited (then the rest of it is killed)."""
        if self._returncode is not None:
            return container_exit_code(self._returncode)
        rc = self._popen.poll()
        if rc is None:
            return None
        self._returncode = rc
        # Like a container: when the main process ends, whatever it left behind ends too.
        signal_container(self.container, signal.SIGKILL)
        self._unregister()
        return container_exit_code(rc)

    def _unregister(self) -> None:
        if self._registry is not None:
            self._registry.remove(self.container)
            self._registry = None

    def stop(self, grace_seconds: float) -> int:
        """SIGTERM every process of the session, SIGKILL what is left after the grace period; reap.

        Returns the container exit code of the main process.
        """
        if self._returncode is None and self._popen.poll() is None:
            signal_container(self.container, signal.SIGTERM)
            deadline = time.monotonic() + grace_seconds
            while time.monotonic() < deadline:
                if self._popen.poll() is not None and not container_members(self.container):
                    break
                time.sleep(_EXIT_CHECK_SECONDS)
        signal_container(self.container, signal.SIGKILL)
        self._returncode = self._popen.wait()
        # SIGKILL is delivered asynchronously: return only once nothing of the session runs.
        deadline = time.monotonic() + _KILL_WAIT_SECONDS
        while container_members(self.container) and time.monotonic() < deadline:
            signal_container(self.container, signal.SIGKILL)
            time.sleep(_EXIT_CHECK_SECONDS)
        self._unregister()
        # The pipe closes once every process of the session is gone; all of them were just killed.
        self._reader.join(timeout=max(grace_seconds, 1.0))
        return container_exit_code(self._returncode)
