"""A watchdog process that stops a local backend's replicas if the backend dies without doing it.

The backend stops its replicas itself on every normal path (success, failure, delete, close,
interpreter exit). A SIGKILL or the OOM killer leaves no such chance. Each container's reaper
(`reaper`) then gets its parent-death signal and stops its container; the watchdog is the second
net, for a reaper that could not (killed too, or no parent-death signal on this system). Each
backend starts one small watchdog in its own session and tells it, over a pipe, which replica
containers are alive (reaper pid and session, environment marker: `process.ContainerId`); when
the pipe reaches end-of-file without a clean "bye" (the backend is gone), the watchdog SIGTERMs
every process of those containers (their reapers' trees included), SIGKILLs what is left after a
grace period, reapers last (`process.kill_container`), and exits.

Run as `python -m kubetrain.backends.local.watchdog GRACE_SECONDS`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from kubetrain.backends.local.process import (
    CONTAINER_ENV,
    ContainerId,
    container_members,
    kill_container,
    signal_container,
)


class Watchdog:
    """The backend's side: register and unregister replica sessions."""

    def __init__(self, grace_seconds: float) -> None:
        self._lock = threading.Lock()
        # Not a member of any container around this process (a step of `kubetrain run`): whoever
        # stops that container's processes must not stop the one process that cleans up after them.
        env = {k: v for k, v in os.environ.items() if k != CONTAINER_ENV}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kubetrain.backends.local.watchdog", str(grace_seconds)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # neither a terminal's Ctrl-C nor our death signals reach it
            close_fds=True,
            text=True,
        )

    def _send(self, line: str) -> None:
        with self._lock:
            stdin = self._proc.stdin
            if stdin is None or stdin.closed:
                return
            try:
                stdin.write(line + "\n")
                stdin.flush()
            except BrokenPipeError:  # the watchdog is gone; the backend still cleans up itself
                stdin.close()

    def add(self, container: ContainerId) -> None:
        """A replica container started."""
        self._send(f"add {container}")

    def remove(self, container: ContainerId) -> None:
        """A replica container is gone."""
        self._send(f"del {container}")

    def close(self) -> None:
        """The backend has stopped everything itself: let the watchdog exit without acting."""
        self._send("bye")
        with self._lock:
            if self._proc.stdin is not None and not self._proc.stdin.closed:
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def main(argv: list[str]) -> int:
    """Read commands until end-of-file; then stop the containers still registered (unless told 'bye')."""
    grace = float(argv[0]) if argv else 3.0
    # The backend's process group may be signalled as a whole (Ctrl-C): the watchdog outlives it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    containers: set[ContainerId] = set()
    clean = False
    for line in sys.stdin:
        op, _, value = line.strip().partition(" ")
        if op == "add":
            containers.add(ContainerId.parse(value))
        elif op == "del":
            containers.discard(ContainerId.parse(value))
        elif op == "bye":
            clean = True
    if clean or not containers:
        return 0
    for container in containers:
        signal_container(container, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(container_members(c) for c in containers):
        time.sleep(0.05)
    for container in containers:
        kill_container(container)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
