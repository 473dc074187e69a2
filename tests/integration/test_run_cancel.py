"""`kubetrain run` stops when told to: its jobs are deleted, nothing is left running, exit 5.

The run is a real `kubetrain run mnist_pytorch` (kfp.local, the local backend, two DDP replicas)
long enough to be stopped while it trains.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubetrain.errors import ExitCode
from tests.integration.local_jobs import _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KUBETRAIN = str(Path(sys.executable).parent / "kubetrain")


def _leftovers(root: Path) -> list[str]:
    """Live processes that belong to the run: their command line or environment names its directory."""
    needle = str(root).encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry.name}/environ").read_bytes()
        except OSError:
            continue
        if state != "Z" and (needle in cmdline or needle in environ):
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {command[:120]}")
    return found


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its SigCgt mask): the command's own code is running."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def _storm(proc: subprocess.Popen[str], *, seconds: float = 120) -> int:
    """SIGTERM and SIGINT every few milliseconds until the process exits (or `seconds` pass); how many were sent.

    As from an impatient user or a supervisor repeating itself: every stage of the cancellation,
    of the clean-up and of the report after it receives some.
    """
    signals = (signal.SIGTERM, signal.SIGINT)
    sent = 0
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            proc.send_signal(signals[sent % 2])
        except ProcessLookupError:  # exited between poll() and the signal
            break
        sent += 1
        time.sleep(0.005)  # the pace of the storm, not a wait for anything
    return sent


class Run:
    """A `kubetrain run ... --json` in the background, with its stderr collected as it comes."""

    def __init__(self, cwd: Path, command: tuple[str, ...] = ("run", "mnist_pytorch", "--param", "epochs=200")) -> None:
        self.proc = subprocess.Popen(
            [KUBETRAIN, *command, "--json"],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.stderr: list[str] = []
        self.stdout: list[str] = []
        self.running = threading.Event()
        # One reader per pipe, and nothing else reads them: communicate() would also read stderr and
        # take lines from under the reader (the tail of the output went missing that way).
        self._readers = (
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_stdout, daemon=True),
        )
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            if "→ Running" in line:  # "Created → Running", or "submitted → Running" when the watch came late
                self.running.set()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        self.stdout.extend(self.proc.stdout)

    def wait_until_training(self) -> None:
        assert self.running.wait(120), "the training job never reached Running:\n" + "".join(self.stderr[-30:])

    def finish(self, timeout: float = 90) -> tuple[int, str]:
        self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(10)  # the pipes close when the process exits; this only collects what is left
        return self.proc.returncode, "".join(self.stdout)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    started = Run(tmp_path)
    yield started
    if started.proc.poll() is None:
        started.proc.kill()
        started.proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_run_deletes_its_job_and_exits_cancelled(run: Run, tmp_path: Path, sig: signal.Signals) -> None:
    run.wait_until_training()
    run.proc.send_signal(sig)
    code, out = run.finish()
    assert code == ExitCode.CANCELLED, "".join(run.stderr[-20:])
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["state"] == "CANCELLED"
    assert outcome["exit_code"] == ExitCode.CANCELLED
    assert outcome["tasks"]["download-dataset"]["state"] == "SUCCEEDED"
    assert outcome["tasks"]["pytorch-train"]["state"] == "CANCELLED"  # interrupted, not failed
    assert outcome["tasks"]["pytorch-train"]["exit_code"] == ExitCode.CANCELLED
    assert "Traceback" not in "".join(run.stderr)
    _wait_for(lambda: not _leftovers(tmp_path), timeout=10, what="every process of the run to end")


def test_more_signals_while_cancelling_change_nothing(run: Run, tmp_path: Path) -> None:
    run.wait_until_training()
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):
        run.proc.send_signal(sig)
    code, out = run.finish()
    assert code == ExitCode.CANCELLED, "".join(run.stderr[-20:])
    assert json.loads(out.strip().splitlines()[-1])["state"] == "CANCELLED"
    _wait_for(lambda: not _leftovers(tmp_path), timeout=10, what="every process of the run to end")


def test_a_sigkilled_run_leaves_nothing_behind(run: Run, tmp_path: Path) -> None:
    run.wait_until_training()
    run.proc.send_signal(signal.SIGKILL)  # no handler runs: only the run's watchdog can act
    run.proc.wait(10)
    _wait_for(lambda: not _leftovers(tmp_path), timeout=45, what="the run's steps and jobs to end after SIGKILL")


def test_a_storm_of_signals_while_training_keeps_exit_5_and_the_json(run: Run, tmp_path: Path) -> None:
    """Signals that kept coming once the run's guard was down (collecting, printing) killed it with 143, no JSON."""
    run.wait_until_training()
    assert _storm(run.proc) > 1
    code, out = run.finish()
    assert code == ExitCode.CANCELLED, "".join(run.stderr[-20:])
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["state"] == "CANCELLED"
    assert outcome["tasks"]["pytorch-train"]["state"] == "CANCELLED"
    assert "Traceback" not in "".join(run.stderr)
    _wait_for(lambda: not _leftovers(tmp_path), timeout=10, what="every process of the run to end")


def test_a_storm_of_signals_during_start_up_cancels_before_any_step(run: Run, tmp_path: Path) -> None:
    """From the moment the command runs (its SIGTERM handler is in place), while it loads kfp and the pipeline."""
    _wait_for(lambda: _catches_sigterm(run.proc.pid), timeout=60, what="kubetrain run to install its handlers")
    assert _storm(run.proc) > 1
    code, out = run.finish()
    assert code == ExitCode.CANCELLED, "".join(run.stderr[-20:])
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["state"] == "CANCELLED"
    assert "Traceback" not in "".join(run.stderr)
    _wait_for(lambda: not _leftovers(tmp_path), timeout=10, what="every process of the run to end")


def test_ctrl_c_during_the_demo_is_cancelled_exit_5(tmp_path: Path) -> None:
    """`kubetrain demo` used to say "the pipeline FAILED" and exit 1 while its JSON said CANCELLED."""
    demo = Run(tmp_path, ("demo",))
    try:
        demo.wait_until_training()
        demo.proc.send_signal(signal.SIGINT)
        code, out = demo.finish()
    finally:
        if demo.proc.poll() is None:
            demo.proc.kill()
            demo.proc.wait()
    stderr = "".join(demo.stderr)
    assert code == ExitCode.CANCELLED, stderr[-3000:]
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["state"] == "CANCELLED"
    states = {name: task["state"] for name, task in outcome["tasks"].items()}
    trainers = ("pytorch-train", "chainermn-train", "ps-train")
    # kfp.local runs one step at a time: the one training when Ctrl-C came is CANCELLED, none FAILED.
    assert sorted(states[t] for t in trainers) == ["CANCELLED", "NOT_RUN", "NOT_RUN"], states
    assert states["compare-summary"] == "NOT_RUN"
    assert "demo: cancelled" in stderr
    assert "FAILED" not in stderr
    _wait_for(lambda: not _leftovers(tmp_path), timeout=10, what="every process of the demo to end")
