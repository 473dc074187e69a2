"""The container reaper: exit codes as a runtime reports them, and no process of the container outlives it.

Each test starts the reaper as the local backend does (`python -I -S reaper.py GRACE PARENT` with
the command in its environment) and gives it a command that leaves a daemon behind in a session
of its own with an empty environment, out of reach of everything but the process tree.
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

from kubetrain.backends.local import reaper
from tests.unit.process_checks import alive, wait_for

pytestmark = pytest.mark.timeout(60)

# Starts a daemon that leaves the session and the environment and ignores SIGTERM, prints its
# pid, then does what the test asks ($THEN).
LEAVE = (
    f"setsid env -i {sys.executable} -c "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)' & "
    'echo $!; eval "$THEN"'
)


def _reaper_argv(grace: float, parent: int) -> list[str]:
    return [sys.executable, "-I", "-S", reaper.__file__, str(grace), str(parent)]


def _env(command: list[str], then: str = "exit 0") -> dict[str, str]:
    return {**os.environ, reaper.COMMAND_ENV: json.dumps(command), "THEN": then}


@pytest.mark.parametrize(("then", "code"), [("exit 0", 0), ("exit 3", 3), ("kill -TERM $$", 128 + signal.SIGTERM)])
def test_the_reaper_exits_with_the_commands_code_and_ends_what_it_left(then: str, code: int) -> None:
    done = subprocess.run(
        _reaper_argv(1.0, os.getpid()),
        env=_env(["sh", "-c", LEAVE], then),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == code, done.stderr
    daemon = int(done.stdout.split()[0])
    assert not alive(daemon)  # killed and reaped before the reaper exited


def test_a_command_that_cannot_run_is_reported_with_the_shells_codes(tmp_path: Path) -> None:
    missing = subprocess.run(
        _reaper_argv(1.0, os.getpid()), env=_env([str(tmp_path / "nope")]), capture_output=True, text=True, check=False
    )
    assert missing.returncode == 127
    assert f"kubetrain: cannot run {tmp_path / 'nope'}: No such file or directory" in missing.stderr


PARENT = """
    import json, os, subprocess, sys, time
    argv, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    argv[-1] = str(os.getpid())  # the reaper's parent is this process
    subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    time.sleep(600)
"""


def test_when_its_parent_dies_the_reaper_stops_the_container_after_the_grace_period() -> None:
    """The backend's process SIGKILLed: the parent-death signal alone stops everything, daemon included."""
    command = ["sh", "-c", LEAVE]
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT), json.dumps(_reaper_argv(0.5, 0)), json.dumps(_env(command, "sleep 300"))],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        daemon = int(parent.stdout.readline())  # the daemon's pid, echoed by the command
        reaper_pid = _reaper_of(daemon)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: not alive(daemon))  # it ignores SIGTERM: SIGKILLed after the grace period
        wait_for(lambda: not alive(reaper_pid))
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _reaper_of(pid: int) -> int:
    """The reaper above a process: the ancestor running reaper.py."""
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if reaper.__file__.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    raise AssertionError("no reaper above the daemon")
