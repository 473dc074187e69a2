"""A local pod's processes end with the pod, whatever they do to their session.

On a node, a container's processes die with the container. Locally a replica is a session, and a
daemon can leave its session (`setsid`); it keeps its environment, though, and the local backend
marks every container's environment, so such a daemon still ends with its job: on the normal
path, and through the watchdog after the supervising process is SIGKILLed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.status import JobPhase
from tests.integration.test_local_pytorchjob import CLAIM, _alive, _follow, _pytorchjob, _template, _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# The daemon leaves the replica's session and ignores SIGTERM; the replica's main process exits 0
# once the daemon has written its pid (so the test knows whom to look for).
DAEMON = """
    import os, pathlib, signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pathlib.Path(os.environ["WORK"], "daemon.pid").write_text(str(os.getpid()))
    time.sleep(300)
"""
LEAVE_AND_EXIT = 'setsid python3 "$WORK/daemon.py" & while [ ! -s "$WORK/daemon.pid" ]; do sleep 0.05; done; exit 0'


def _claim(root: Path) -> Path:
    claim = root / "claims" / CLAIM
    claim.mkdir(parents=True, exist_ok=True)
    (claim / "daemon.py").write_text(textwrap.dedent(DAEMON))
    return claim


def _job(name: str) -> dict[str, object]:
    template = _template(["sh", "-c", LEAVE_AND_EXIT], env=[{"name": "WORK", "value": "/workspace"}])
    return _pytorchjob(name, template, None)


def test_a_daemon_that_left_its_session_ends_with_its_job(tmp_path: Path) -> None:
    root = tmp_path / "root"
    claim = _claim(root)
    backend = LocalBackend(root, max_grace_seconds=1.0)
    try:
        ref = backend.submit(_job("daemon"))
        status, _ = _follow(backend, ref)
        assert status.phase is JobPhase.SUCCEEDED
        daemon = int((claim / "daemon.pid").read_text())
        _wait_for(lambda: not _alive(daemon), timeout=10, what="the daemon to end with its job")
    finally:
        backend.close()


SUPERVISOR = """
    import json, pathlib, sys, time
    from kubetrain.backends.local.backend import LocalBackend
    root, manifest = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2])
    backend = LocalBackend(root, max_grace_seconds=1.0)
    backend.submit(manifest)
    pid_file = backend.claim_dir("work") / "daemon.pid"
    while not (pid_file.exists() and pid_file.read_text()):
        time.sleep(0.02)
    print("ready", flush=True)
    time.sleep(600)
"""


def test_a_daemon_ends_after_its_supervisor_is_sigkilled(tmp_path: Path) -> None:
    root = tmp_path / "root"
    claim = _claim(root)
    # The replica keeps running after starting the daemon, so the job is live when the supervisor dies.
    template = _template(
        ["sh", "-c", LEAVE_AND_EXIT.replace("exit 0", "sleep 300")], env=[{"name": "WORK", "value": "/workspace"}]
    )
    manifest = _pytorchjob("daemon-kill", template, None)
    supervisor = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SUPERVISOR), str(root), json.dumps(manifest)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert supervisor.stdout is not None and supervisor.stdout.readline().strip() == "ready"
        daemon = int((claim / "daemon.pid").read_text())
        assert _sid(daemon) == daemon  # its own session: session-based cleanup alone would miss it
        supervisor.send_signal(signal.SIGKILL)  # no handler, no atexit: only the watchdog can act
        supervisor.wait(timeout=10)
        # The daemon ignores SIGTERM: it goes with the watchdog's SIGKILL after the grace period.
        _wait_for(lambda: not _alive(daemon), timeout=15, what="the daemon to go after its supervisor died")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()


def _sid(pid: int) -> int:
    """The session id of a live process."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
