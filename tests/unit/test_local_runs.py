"""`kubetrain list`, `logs` and `cancel` for local runs (issue 34), against a real runner process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode
from kubetrain.tooling.local_runs import OUTCOME_FILE, RUNNER_FILE

# A stand-in for `kubetrain run`: marks itself the runner, says so, and on SIGTERM ends CANCELLED.
RUNNER = """
import signal, sys
from pathlib import Path
from kubetrain.tooling.local_runs import mark_ended, mark_running
run_dir = Path(sys.argv[1])
def stop(signum, frame):
    mark_ended(run_dir, {"state": "CANCELLED"})
    sys.exit(5)
signal.signal(signal.SIGTERM, stop)
mark_running(run_dir)
print("ready", flush=True)
signal.pause()
"""


def _run_dir(runs: Path, name: str, log: str) -> Path:
    path = runs / name
    path.mkdir(parents=True)
    (path / "run.log").write_text(log)
    return path


def test_list_logs_and_cancel_a_running_local_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    done = _run_dir(runs, "mnist_ps-20260101-000000-000001", "old run\n")
    (done / OUTCOME_FILE).write_text(json.dumps({"state": "SUCCEEDED"}))
    live = _run_dir(runs, "mnist_pytorch-20260102-000000-000001", "step pytorch-train: running\n")
    os.utime(done, (1, 1))  # the older one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(live)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert main(["list", "--runs-dir", str(runs), "--json"]) == ExitCode.SUCCESS
        listed = json.loads(capsys.readouterr().out)
        assert listed["runs"] == {done.name: "SUCCEEDED", live.name: "RUNNING"}
        assert main(["logs", "mnist_pytorch", "--runs-dir", str(runs)]) == ExitCode.SUCCESS
        assert capsys.readouterr().out == "step pytorch-train: running\n"
        assert main(["cancel", "latest", "--runs-dir", str(runs)]) == ExitCode.SUCCESS
        assert proc.wait(timeout=30) == ExitCode.CANCELLED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    capsys.readouterr()
    assert not (live / RUNNER_FILE).exists()
    assert main(["list", "--runs-dir", str(runs)]) == ExitCode.SUCCESS
    assert f"{live.name}  CANCELLED" in capsys.readouterr().out
    # Not running any more, an ambiguous name, no runs at all: one line each, exit 2.
    assert main(["cancel", "latest", "--runs-dir", str(runs)]) == ExitCode.INVALID_INPUT
    assert "is not running (state CANCELLED); nothing to cancel" in capsys.readouterr().err
    assert main(["logs", "mnist", "--runs-dir", str(runs)]) == ExitCode.INVALID_INPUT
    assert "'mnist' matches several runs" in capsys.readouterr().err
    assert main(["logs", "latest", "--runs-dir", str(tmp_path / "none")]) == ExitCode.INVALID_INPUT


def test_a_runner_whose_pid_was_reused_is_not_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_dir(tmp_path, "p-1", "x\n")
    (run / RUNNER_FILE).write_text(json.dumps({"pid": os.getpid(), "start": "0"}))  # this pid, another start
    assert main(["list", "--runs-dir", str(tmp_path)]) == ExitCode.SUCCESS
    assert "p-1  UNKNOWN" in capsys.readouterr().out
    assert main(["cancel", "p-1", "--runs-dir", str(tmp_path)]) == ExitCode.INVALID_INPUT
