"""Replica processes: the whole session dies with the replica, output is captured, addresses are unique."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kubetrain.backends.local.addresses import allocate_block, loopback_address
from kubetrain.backends.local.logfile import LogStream, read_log
from kubetrain.backends.local.process import ReplicaProcess, container_exit_code
from tests.unit.process_checks import alive, wait_for

pytestmark = pytest.mark.timeout(60)

# A parent that starts a child in a process group of its own (as mpirun does with its ranks),
# reports both pids, then waits; the child ignores SIGTERM.
TREE = r"""
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('child up', flush=True); time.sleep(600)"],
    process_group=0)
print(os.getpid(), child.pid, flush=True)
time.sleep(600)
"""


def _start(tmp_path: Path, code: str, sink: list[str] | None = None) -> ReplicaProcess:
    return ReplicaProcess(
        argv=[sys.executable, "-c", code],
        env={"PATH": os.environ["PATH"]},
        cwd=tmp_path,
        log=LogStream(tmp_path / "logs" / "r.0.log"),
        prefix="worker-0",
        sink=sink.append if sink is not None else None,
    )


def test_stop_kills_every_process_of_the_session_even_other_groups(tmp_path: Path) -> None:
    proc = _start(tmp_path, TREE)
    log = proc.log
    wait_for(lambda: "child up" in log.path.read_text())
    parent, child = (int(x) for x in log.path.read_text().splitlines()[0].split())
    assert os.getpgid(child) != os.getpgid(parent)  # the child really is in another process group
    code = proc.stop(grace_seconds=0.5)
    assert code == 128 + signal.SIGTERM
    assert not alive(parent)
    assert not alive(child)  # ignored SIGTERM, got SIGKILL after the grace period


def test_when_the_main_process_exits_its_leftovers_are_killed(tmp_path: Path) -> None:
    leaves = r"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], process_group=0)
print(child.pid, flush=True)
sys.exit(3)
"""
    proc = _start(tmp_path, leaves)
    wait_for(lambda: proc.poll() is not None)
    assert proc.poll() == 3
    child = int(proc.log.path.read_text().split()[0])
    wait_for(lambda: not alive(child))


def test_output_goes_to_the_file_and_the_prefixed_sink(tmp_path: Path) -> None:
    lines: list[str] = []
    proc = _start(tmp_path, "import sys; print('out'); print('err', file=sys.stderr); sys.stdout.write('tail')", lines)
    wait_for(lambda: proc.poll() is not None)
    wait_for(lambda: proc.log.closed)
    assert sorted(read_log(proc.log.path, stream=None, follow=False)) == ["err", "out", "tail"]
    assert sorted(lines) == ["[worker-0] err", "[worker-0] out", "[worker-0] tail"]
    assert list(read_log(proc.log.path, stream=None, follow=False, tail_lines=1)) == ["tail"]


def _exited(pid: int) -> bool:
    """The process has ended and waits to be reaped (a zombie), or is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_an_exit_is_reported_only_once_the_output_is_in_the_log(tmp_path: Path) -> None:
    # A busy machine: the log reader lags behind a program that has already exited. Here the
    # reader is held on the first line by its sink until the test lets it go.
    let_go = threading.Event()
    first = threading.Event()

    def sink(line: str) -> None:
        first.set()
        let_go.wait(timeout=50)

    proc = ReplicaProcess(
        argv=[sys.executable, "-c", "for i in range(500): print(f'line {i:03d}')"],
        env={"PATH": os.environ["PATH"]},
        cwd=tmp_path,
        log=LogStream(tmp_path / "logs" / "r.0.log"),
        prefix="worker-0",
        sink=sink,
    )
    try:
        assert first.wait(timeout=50)
        wait_for(lambda: _exited(proc.pid), timeout=50)
        assert proc.poll() is None  # exited, but 499 lines are still in the pipe
    finally:
        let_go.set()
    wait_for(lambda: proc.poll() is not None, timeout=50)
    assert proc.poll() == 0
    lines = list(read_log(proc.log.path, stream=None, follow=False))
    assert lines == [f"line {i:03d}" for i in range(500)]


def test_follow_returns_lines_as_they_come_and_ends_with_the_process(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    code = f"""
import os, time
print('first', flush=True)
while not os.path.exists({str(gate)!r}):
    time.sleep(0.01)
print('second', flush=True)
"""
    proc = _start(tmp_path, code)
    seen: list[str] = []
    follower = threading.Thread(target=lambda: seen.extend(read_log(proc.log.path, stream=proc.log, follow=True)))
    follower.start()
    wait_for(lambda: seen == ["first"])
    gate.touch()
    follower.join(timeout=20)
    assert not follower.is_alive()
    assert seen == ["first", "second"]
    wait_for(lambda: proc.poll() is not None)  # the pipe closes a moment before the process exits
    assert proc.poll() == 0


def test_signal_deaths_read_as_container_exit_codes() -> None:
    assert container_exit_code(-signal.SIGKILL) == 137
    assert container_exit_code(2) == 2


def test_each_job_holds_its_own_address_block(tmp_path: Path) -> None:
    first, second = allocate_block(tmp_path), allocate_block(tmp_path)
    try:
        assert first.slot != second.slot
        assert first.address(0) != second.address(0)
        first.release()
        third = allocate_block(tmp_path)
        assert third.slot == second.slot + 1  # the next job gets fresh addresses, not the released ones
        third.release()
    finally:
        first.release()
        second.release()
    assert loopback_address(1, 0) == "127.0.1.1"
    assert loopback_address(258, 253) == "127.1.2.254"
    with pytest.raises(ValueError, match="at most 254 pods"):
        loopback_address(1, 254)


# Holds a block from the default directory until its stdin closes, after printing the slot.
HOLD_BLOCK = "import sys; from kubetrain.backends.local.addresses import allocate_block; " \
             "b = allocate_block(); print(b.slot, flush=True); sys.stdin.read()"  # fmt: skip


def test_jobs_started_under_different_tmpdirs_get_different_addresses(tmp_path: Path) -> None:
    """`kubetrain run` gives each run's steps a TMPDIR of their own; two runs at once met at 127.0.1.1:23456."""
    holders = []
    try:
        for name in ("first-run", "second-run"):
            (tmp_path / name).mkdir()
            env = {**os.environ, "TMPDIR": str(tmp_path / name)}
            holders.append(subprocess.Popen([sys.executable, "-c", HOLD_BLOCK], env=env, text=True,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE))  # fmt: skip
        slots = [int(h.stdout.readline()) for h in holders if h.stdout is not None]
        assert len(slots) == 2 and slots[0] != slots[1], slots
    finally:
        for holder in holders:
            holder.communicate(timeout=30)
    left = [str(p) for name in ("first-run", "second-run") for p in (tmp_path / name).rglob("*")]
    assert not left, left  # nothing under TMPDIR


def test_one_streams_unfinished_line_is_not_joined_to_the_others(tmp_path: Path) -> None:
    """Issue 34: one MPI rank's stdout was joined to another rank's stderr on one line (mpirun relays both)."""
    code = (
        "import sys\n"
        "sys.stdout.write('rank 0 epoch 1 '); sys.stdout.flush()\n"
        "sys.stderr.write('rank 1 warning\\n'); sys.stderr.flush()\n"
        "sys.stdout.write('loss 0.5\\n'); sys.stdout.flush()\n"
    )
    proc = _start(tmp_path, code)
    wait_for(lambda: proc.poll() is not None)
    wait_for(lambda: proc.log.closed)
    assert sorted(read_log(proc.log.path, stream=None, follow=False)) == ["rank 0 epoch 1 loss 0.5", "rank 1 warning"]
