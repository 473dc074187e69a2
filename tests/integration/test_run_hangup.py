"""Issue 48: SIGHUP to `kubetrain run` (its terminal closed) left no outcome and a temporary directory.

SIGHUP's default action killed the run at once. It now stops the run as SIGTERM does: the running
step's job is deleted, the run ends CANCELLED (exit 5) with its outcome, and its temporary
directory is removed. Both as a plain `kill -HUP` (stdout a pipe: the JSON outcome is printed)
and as a real hang-up of the run's controlling terminal (every write to it fails then).
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubetrain.errors import ExitCode
from kubetrain.tooling.local_runs import OUTCOME_FILE
from tests.integration.local_jobs import _wait_for
from tests.integration.test_run_cancel import KUBETRAIN, _leftovers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

COMMAND = [KUBETRAIN, "run", "mnist_pytorch", "--param", "epochs=200", "--json"]


def _environment(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tmp").mkdir()
    return {**os.environ, "TMPDIR": str(tmp_path / "tmp")}


@pytest.fixture(autouse=True)
def _sighup_as_a_terminal_gives_it() -> Iterator[None]:
    """The run starts with SIGHUP's default action, as a shell in a terminal starts a command.

    The test runner itself may run under `nohup` (a CI runner can), and a command that inherits
    SIGHUP ignored keeps ignoring it, as nohup means; these tests are about the terminal's SIGHUP.
    The runner's own disposition comes back after the test.
    """
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def _outcome_file(tmp_path: Path) -> dict[str, object]:
    found = list((tmp_path / "runs").glob(f"*/{OUTCOME_FILE}"))
    assert len(found) == 1, found
    return dict(json.loads(found[0].read_text()))


def _assert_cleaned_up(tmp_path: Path) -> None:
    assert list((tmp_path / "tmp").iterdir()) == []  # the run's temporary directory went with it
    _wait_for(lambda: not _leftovers(tmp_path), timeout=10, what="every process of the run to end")


def test_sighup_stops_the_run_like_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        COMMAND, cwd=tmp_path, env=_environment(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    running = threading.Event()
    err: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if "→ Running" in line:
                running.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert running.wait(150), "".join(err[-30:])
        proc.send_signal(signal.SIGHUP)
        out = proc.stdout.read() if proc.stdout is not None else ""
        proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert proc.returncode == ExitCode.CANCELLED, "".join(err[-20:])
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["state"] == "CANCELLED"
    assert outcome["tasks"]["pytorch-train"]["state"] == "CANCELLED"
    assert _outcome_file(tmp_path)["state"] == "CANCELLED"
    assert "Traceback" not in "".join(err)
    _assert_cleaned_up(tmp_path)


def test_a_closed_terminal_stops_the_run_and_leaves_its_outcome(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    # A new session whose controlling terminal is the pty (setsid --ctty takes its stdin's).
    proc = subprocess.Popen(
        ["setsid", "--ctty", *COMMAND], cwd=tmp_path, env=_environment(tmp_path),
        stdin=slave, stdout=slave, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    seen = bytearray()
    running = threading.Event()

    def read_terminal() -> None:
        while not running.is_set():
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)
            if "→ Running".encode() in seen:
                running.set()

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        assert running.wait(150), seen[-3000:].decode(errors="replace")
        os.close(master)  # the terminal window closes: the kernel hangs the session up (SIGHUP)
        proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == ExitCode.CANCELLED
    outcome = _outcome_file(tmp_path)
    assert outcome["state"] == "CANCELLED"
    _assert_cleaned_up(tmp_path)
