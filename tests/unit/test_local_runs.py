"""`kubetrain list`, `logs` and `cancel` for local runs (issue 34), against a real runner process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode
from kubetrain.tooling.local_runs import OUTCOME_FILE, RUNNER_FILE, _start_time, find_run, log_lines

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
    assert "p-1  ABORTED" in capsys.readouterr().out  # its runner is gone without an outcome
    assert main(["cancel", "p-1", "--runs-dir", str(tmp_path)]) == ExitCode.INVALID_INPUT


def test_a_sigkilled_run_is_aborted_not_unknown_forever(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49: after a SIGKILL a run stayed UNKNOWN forever."""
    run = _run_dir(tmp_path, "killed-1", "step x: running\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    _run_dir(tmp_path, "never-started-1", "")  # neither a runner nor an outcome: nothing is known
    assert main(["list", "--runs-dir", str(tmp_path), "--json"]) == ExitCode.SUCCESS
    assert json.loads(capsys.readouterr().out)["runs"] == {"killed-1": "ABORTED", "never-started-1": "UNKNOWN"}


RAW_LOG = (
    "running p in /r (full log: run.log there)\n"
    "\x1b[1m12:00:00.000 - INFO - Executing task 'train'\x1b[0m\n"
    "    [KFP Executor 12:00:01.000 INFO]: Looking for component `train` in --component_module_path ...\n"
    "    [KFP Executor 12:00:01.000 INFO]: Got executor_input:\n"
    "    {\n"
    '        "inputs": {"parameterValues": {"epochs": 3}}\n'
    "    }\n"
    "    pytorch: job pytorch-1 on the local backend\n"
    "\x1b[32m12:00:09.000 - INFO - Task 'train' finished with status SUCCESS\x1b[0m\n"
)


def test_logs_show_what_the_console_showed_and_raw_shows_run_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 49: `logs` printed the raw run.log, ANSI codes and kfp's executor_input dumps included."""
    run = _run_dir(tmp_path, "p-1", RAW_LOG)
    (run / OUTCOME_FILE).write_text(json.dumps({"state": "SUCCEEDED"}))
    assert main(["logs", "latest", "--runs-dir", str(tmp_path)]) == ExitCode.SUCCESS
    assert capsys.readouterr().out == (
        "running p in /r (full log: run.log there)\n"
        "step train: running\n"
        "    pytorch: job pytorch-1 on the local backend\n"
        "step train: done\n"
    )
    assert main(["logs", "latest", "--raw", "--runs-dir", str(tmp_path)]) == ExitCode.SUCCESS
    assert capsys.readouterr().out == RAW_LOG


# A stand-in for `kubetrain run` that prints one line, waits for its stdin, prints another and ends.
WRITER = """
import sys
from pathlib import Path
from kubetrain.tooling.local_runs import mark_ended, mark_running
run_dir = Path(sys.argv[1])
mark_running(run_dir)
with (run_dir / "run.log").open("a") as log:
    log.write("first\\n"); log.flush()
    print("ready", flush=True)
    sys.stdin.readline()
    log.write("sec"); log.flush()
    log.write("ond\\n"); log.flush()
mark_ended(run_dir, {"state": "SUCCEEDED"})
"""


def test_logs_follow_prints_lines_as_they_come_and_ends_with_the_run(tmp_path: Path) -> None:
    """Issue 49: there was no `logs --follow`."""
    run_dir = _run_dir(tmp_path, "p-1", "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        follower = threading.Thread(target=lambda: seen.extend(log_lines(find_run(tmp_path, "p-1"), follow=True)))
        follower.start()
        deadline = time.monotonic() + 30
        while seen != ["first\n"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen == ["first\n"] and follower.is_alive()  # the run goes on: the follow waits
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
        assert proc.wait(30) == 0
        follower.join(30)
        assert not follower.is_alive()  # the run ended: so did the follow
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert seen == ["first\n", "second\n"]  # a line written in two parts comes whole


def test_clean_removes_ended_runs_but_the_newest_and_never_a_running_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 49: there was no `clean`; 34 runs (20 MB) piled up in ./runs."""
    runs = tmp_path / "runs"
    ended = []
    for i in range(5):
        path = _run_dir(runs, f"p-{i}", "x" * 1000)
        (path / OUTCOME_FILE).write_text(json.dumps({"state": "SUCCEEDED"}))
        os.utime(path, (i + 1, i + 1))
        ended.append(path)
    live = _run_dir(runs, "p-live", "step: running\n")
    os.utime(live, (0, 0))  # the oldest of all, and running
    (live / RUNNER_FILE).write_text(json.dumps({"pid": os.getpid(), "start": _start_time(os.getpid())}))
    (runs / "notes").mkdir()  # not a run directory
    (runs / "linked").symlink_to(ended[0], target_is_directory=True)
    assert main(["clean", "--keep", "2", "--dry-run", "--runs-dir", str(runs)]) == ExitCode.SUCCESS
    assert "would remove 3 run(s)" in capsys.readouterr().out
    assert all(p.exists() for p in ended)
    assert main(["clean", "--keep", "2", "--runs-dir", str(runs)]) == ExitCode.SUCCESS
    out = capsys.readouterr().out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("removed ")] == ["p-0", "p-1", "p-2"]
    assert sorted(p.name for p in runs.iterdir()) == ["linked", "notes", "p-3", "p-4", "p-live"]
    assert main(["clean", "--keep", "-1", "--runs-dir", str(runs)]) == ExitCode.INVALID_INPUT
