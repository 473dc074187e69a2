"""Replica processes of the local backend: one container per pod, its processes ended with it, output captured.

A container's processes all die with it. A local replica imitates that with three nets, any one of
which makes a process the container's (:func:`container_members`):

- its tree: the container's first process is :mod:`.reaper`, a child subreaper that runs the
  command, so every process the container starts stays below it in the process tree whatever it
  does to its session or environment (`setsid env -i daemon &`), and the reaper kills what is left
  when the command exits;
- its session: the reaper starts in a session of its own (`start_new_session=True`), which the
  command and its children share unless they leave it (Open MPI's `mpirun` puts each local rank in
  a process group of its own, but all of them stay in the session);
- its environment marker (:data:`CONTAINER_ENV`, the container's own token), which a process keeps
  unless it clears its environment, and which is what finds `kubetrain run`'s steps (they have no
  reaper of their own).

Stopping a container kills its processes, the reaper last (:func:`kill_container`): while the
reaper lives, a process whose parent was just killed is re-parented to it and stays in reach.

If the Python process that supervises the replicas dies without cleaning up (SIGKILL, OOM), each
reaper receives SIGTERM through its parent-death signal and stops its container after the grace
period, and the backend's watchdog (`watchdog`) does the same for every container still
registered with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from kubetrain.backends.local import reaper
from kubetrain.backends.local.logfile import LogStream

LineSink = Callable[[str], None]


CONTAINER_ENV = "KUBETRAIN_LOCAL_CONTAINER"


@dataclass(frozen=True)
class ContainerId:
    """What makes a process one container's: its reaper's tree or session (`sid`, the reaper's pid), or its marker.

    `sid` -1: membership by the marker alone (`kubetrain run`'s steps, which share its session).
    """

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


_REAPER = Path(reaper.__file__)
# How often to look again while waiting for a session's processes to exit after SIGTERM.
_EXIT_CHECK_SECONDS = 0.02
# How long SIGKILLed processes may take to disappear (they are in uninterruptible I/O at worst).
_KILL_WAIT_SECONDS = 5.0
# How long an exited container may wait for its output to be captured before its exit is
# reported anyway: only a holder of the pipe that could not be killed keeps it open that long.
_OUTPUT_DRAIN_SECONDS = 30.0


def container_exit_code(returncode: int) -> int:
    """The exit code a container runtime reports: a process killed by signal N exits 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:  # exited meanwhile, or someone else's process
        return False


def container_members(container: ContainerId) -> list[int]:
    """Live (non-zombie) processes of a container: its reaper's tree, its session, whatever carries its marker."""
    marker = f"{CONTAINER_ENV}={container.token}".encode()
    table = reaper.process_table()
    members = {pid for pid, (_, sid) in table.items() if sid == container.sid}
    members.update(pid for pid in table if pid not in members and _has_marker(pid, marker))
    # The tree counts only while its root is this container's reaper: a pid can be reused.
    if container.sid in table and _has_marker(container.sid, marker):
        members.update(reaper.descendants(container.sid, table))
    return sorted(members)


def signal_container(container: ContainerId, sig: int) -> int:
    """Send `sig` to every live process of the container; the number signalled."""
    return _send(container_members(container), sig)


def _send(pids: Sequence[int], sig: int) -> int:
    count = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            count += 1
        except ProcessLookupError:
            continue
    return count


def kill_container(container: ContainerId, timeout_seconds: float = _KILL_WAIT_SECONDS) -> bool:
    """SIGKILL every process of the container, its reaper last; True once none is left (within the timeout).

    Last, because a process whose parent dies is re-parented to the reaper, where it is found again;
    were the reaper gone, it would go to init, out of reach.
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        members = container_members(container)
        if not members:
            return True
        if time.monotonic() > deadline:
            return False
        others = [pid for pid in members if pid != container.sid]
        _send(others or members, signal.SIGKILL)
        time.sleep(_EXIT_CHECK_SECONDS)  # SIGKILL is delivered asynchronously; nothing notifies us


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
        grace_seconds: float = 3.0,
    ) -> None:
        """Start `argv` under the container's reaper; `grace_seconds` is what the reaper gives it if we die."""
        self._log = log
        self._prefix = prefix
        self._sink = sink
        # Output closes when the container's processes exit: the supervisor looks at once rather
        # than at its next poll (which stays as the backstop for a child that keeps the pipe open).
        self._on_output_closed = on_output_closed
        token = uuid.uuid4().hex
        self._popen = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_REAPER), str(grace_seconds), str(os.getpid())],
            env={**env, CONTAINER_ENV: token, reaper.COMMAND_ENV: json.dumps(list(argv))},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            # Two pipes, read line by line, as the kubelet reads a container's two streams: one
            # pipe for both joins a line one process left unfinished on stdout to another's stderr
            # (mpirun relays every rank's streams).
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
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
        self._exited_at: float | None = None  # when poll() saw the main process exit
        self._open_pipes = 2
        self._pipes_lock = threading.Lock()
        self._readers = [
            threading.Thread(target=self._pump, args=(pipe,), name=f"kubetrain-log-{prefix}-{i}", daemon=True)
            for i, pipe in enumerate((self._popen.stdout, self._popen.stderr))
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, out: IO[bytes] | None) -> None:
        if out is None:  # pragma: no cover - both streams are pipes here
            return
        try:
            for line in iter(out.readline, b""):
                # A last line without its newline gets one: the other stream's next line is its own.
                self._log.write(line if line.endswith(b"\n") else line + b"\n")
                if self._sink is not None:
                    self._sink(f"[{self._prefix}] {line.decode('utf-8', 'replace').rstrip()}")
        finally:
            out.close()
            with self._pipes_lock:
                self._open_pipes -= 1
                last = self._open_pipes == 0
            if last:
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
        """The container exit code once the main process has exited (then the rest of it is killed)
        and its output is captured: the log of a container that has ended is complete."""
        if self._returncode is None:
            rc = self._popen.poll()
            if rc is None:
                return None
            self._returncode = rc
            self._exited_at = time.monotonic()
            # Like a container: when the main process ends, whatever it left behind ends too. The reaper
            # has ended its tree; this is for what left it another way (the reaper was killed).
            signal_container(self.container, signal.SIGKILL)
            self._unregister()
        # Up to a pipe's worth of output may still be on its way to the log (a reader slowed by a
        # busy machine); the reader wakes the supervisor once it is all written.
        exited_at = self._exited_at  # None: stop() ended it, and has waited for the output itself
        if exited_at is not None and not self._log.closed and time.monotonic() - exited_at < _OUTPUT_DRAIN_SECONDS:
            return None
        return container_exit_code(self._returncode)

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
        # Return only once nothing of the container runs (SIGKILL is delivered asynchronously).
        kill_container(self.container)
        self._returncode = self._popen.wait()
        self._unregister()
        # The pipe closes once every process of the session is gone; all of them were just killed.
        for reader in self._readers:
            reader.join(timeout=max(grace_seconds, 1.0))
        return container_exit_code(self._returncode)
