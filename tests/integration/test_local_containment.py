"""A local pod's processes end with the pod, whatever they do to their session or environment.

On a node, a container's processes die with the container. Locally a daemon can leave the
replica's session (`setsid`) and even clear its environment, and with it the container's marker
(`setsid env -i`); it stays below the container's reaper in the process tree, though (a child
subreaper), so it still ends with its job: on the normal path, and after the supervising process
is SIGKILLed (the reaper's parent-death signal, and the watchdog).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.backends.local.process import CONTAINER_ENV
from kubetrain.status import JobPhase
from tests.integration.local_jobs import CLAIM, _alive, _follow, _pytorchjob, _template, _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# The daemon ignores SIGTERM and writes its pid to the file named by its argument (its environment
# may be empty); the replica's main process exits 0 once the daemon has written it (so the test
# knows whom to look for).
DAEMON = """
    import os, pathlib, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
    time.sleep(300)
"""
# How the daemon leaves: its session only, or its session and its whole environment. An absolute
# interpreter, since `env -i` leaves no PATH to find one.
LEAVES = ("setsid", "setsid env -i")


def _leave_and_exit(leave: str) -> str:
    daemon = f'{leave} {sys.executable} "$WORK/daemon.py" "$WORK/daemon.pid"'
    return f'{daemon} & while [ ! -s "$WORK/daemon.pid" ]; do sleep 0.05; done; exit 0'


def _claim(root: Path) -> Path:
    claim = root / "claims" / CLAIM
    claim.mkdir(parents=True, exist_ok=True)
    (claim / "daemon.py").write_text(textwrap.dedent(DAEMON))
    return claim


def _job(name: str, command: str) -> dict[str, object]:
    template = _template(["sh", "-c", command], env=[{"name": "WORK", "value": "/workspace"}])
    return _pytorchjob(name, template, None)


def _out_of_session_and_environment_reach(pid: int, leave: str) -> None:
    """The daemon is in a session of its own, and without the marker if it cleared its environment."""
    assert _sid(pid) == pid
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert (CONTAINER_ENV.encode() in environ) is (leave == "setsid")


@pytest.mark.parametrize("leave", LEAVES)
def test_a_daemon_that_left_its_session_ends_with_its_job(tmp_path: Path, leave: str) -> None:
    root = tmp_path / "root"
    claim = _claim(root)
    backend = LocalBackend(root, max_grace_seconds=1.0)
    try:
        # The replica exits 0 once the test has looked at the daemon (it opens the gate).
        command = _leave_and_exit(leave).replace("exit 0", 'while [ ! -e "$WORK/gate" ]; do sleep 0.05; done')
        ref = backend.submit(_job("daemon", command))
        pid_file = claim / "daemon.pid"
        _wait_for(lambda: pid_file.exists() and pid_file.read_text() != "", timeout=30, what="the daemon to start")
        daemon = int(pid_file.read_text())
        _out_of_session_and_environment_reach(daemon, leave)
        (claim / "gate").touch()
        status, _ = _follow(backend, ref)
        assert status.phase is JobPhase.SUCCEEDED
        _wait_for(lambda: not _alive(daemon), timeout=10, what="the daemon to end with its job")
    finally:
        backend.close()
        _kill_leftover_daemon(claim)


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


@pytest.mark.parametrize("leave", LEAVES)
def test_a_daemon_ends_after_its_supervisor_is_sigkilled(tmp_path: Path, leave: str) -> None:
    root = tmp_path / "root"
    claim = _claim(root)
    # The replica keeps running after starting the daemon, so the job is live when the supervisor dies.
    manifest = _job("daemon-kill", _leave_and_exit(leave).replace("exit 0", "sleep 300"))
    supervisor = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SUPERVISOR), str(root), json.dumps(manifest)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert supervisor.stdout is not None and supervisor.stdout.readline().strip() == "ready"
        daemon = int((claim / "daemon.pid").read_text())
        _out_of_session_and_environment_reach(daemon, leave)
        supervisor.send_signal(signal.SIGKILL)  # no handler, no atexit: only the reaper and the watchdog can act
        supervisor.wait(timeout=10)
        # The daemon ignores SIGTERM: it goes with the SIGKILL after the grace period.
        _wait_for(lambda: not _alive(daemon), timeout=15, what="the daemon to go after its supervisor died")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        _kill_leftover_daemon(claim)


def _sid(pid: int) -> int:
    """The session id of a live process."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


def _kill_leftover_daemon(claim: Path) -> None:
    """After a failed test, the daemon this test started must not linger for minutes."""
    pid_file = claim / "daemon.pid"
    text = pid_file.read_text() if pid_file.exists() else ""
    if text and _alive(int(text)):
        os.kill(int(text), signal.SIGKILL)
