"""The e2e harness's process registry (tools/cluster/processes.py) with real processes.

What `make cluster-down` relies on: every process of a cluster is found and ended whatever is left
of its state directory (records deleted, the directory itself deleted, a grandchild that left its
parent's process group), nothing of another cluster is touched; and a port a component needs is
checked first, naming the process that holds it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.cluster import operators, processes

# A process that starts a detached grandchild (its own session, as a daemon does), prints the
# grandchild's pid, and then sleeps: the grandchild is in no process group the harness recorded.
SPAWNER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def _wait_for_line(path: Path) -> str:
    for _ in range(600):  # the spawner writes its line at once; this only bounds a broken test
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return text.strip()
        time.sleep(0.05)
    raise AssertionError(f"no line in {path}")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cluster"
    path.mkdir()
    yield path
    processes.stop_all(path, grace_seconds=2)  # whatever a failing test left


def test_a_recorded_process_and_its_detached_grandchild_are_stopped_with_the_records_gone(state: Path) -> None:
    out = state / "spawner.log"
    record = processes.start(
        state, "spawner", [sys.executable, "-c", SPAWNER], env=dict(os.environ), log=out, cwd=state.parent
    )
    grandchild = int(_wait_for_line(out))
    assert record.pgid == record.pid
    assert os.getpgid(grandchild) != record.pgid  # killpg of the record alone would miss it
    assert {record.pid, grandchild} <= set(processes.members(state))

    shutil.rmtree(state / "processes")  # the records are gone, as after `rm -rf .cluster`
    ended = processes.stop_all(state, grace_seconds=5)

    assert {record.pid, grandchild} <= set(ended)
    assert _gone(record.pid)
    assert _gone(grandchild)
    assert processes.members(state) == []


def _unmarked(argv: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    """A process started without the harness: no record, no marker."""
    env = {k: v for k, v in os.environ.items() if k != processes.MARKER}
    return subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True)


def test_unmarked_cluster_binaries_left_in_a_deleted_state_directory_are_found(tmp_path: Path) -> None:
    state, cache = tmp_path / "cluster", tmp_path / "cache"
    (state / "kwok" / "bin").mkdir(parents=True)
    (cache / "bin").mkdir(parents=True)
    # A copy kwokctl keeps in the state directory, and a pinned binary whose working directory is there.
    shutil.copy("/bin/sleep", state / "kwok" / "bin" / "etcd")
    shutil.copy("/bin/sleep", cache / "bin" / "kube-apiserver")
    copied = _unmarked([str(state / "kwok" / "bin" / "etcd"), "600"], cwd=tmp_path)
    pinned = _unmarked([str(cache / "bin" / "kube-apiserver"), "600"], cwd=state / "kwok")
    try:
        shutil.rmtree(state)  # their executable and working directory now read "… (deleted)"
        assert processes.members(state, binary_roots=[cache]) == sorted([copied.pid, pinned.pid])
        processes.stop_all(state, grace_seconds=5)  # default roots: the copy is found by its executable
        assert copied.wait(timeout=10) is not None
    finally:
        pinned.kill()
        copied.kill()
        pinned.wait()
        copied.wait()


def test_a_developers_shell_in_the_state_directory_is_not_a_member(state: Path) -> None:
    # A shell cd'd into .cluster/, or `tail -f .cluster/…/log`: neither marked nor a cluster binary.
    (state / "logs").mkdir()
    (state / "logs" / "x.log").write_text("")
    tail = _unmarked(["tail", "-f", str(state / "logs" / "x.log")], cwd=state / "logs")
    try:
        assert tail.pid not in processes.members(state)
        processes.stop_all(state, grace_seconds=2)
        assert tail.poll() is None
    finally:
        tail.kill()
        tail.wait()


def test_another_clusters_processes_are_left_alone(tmp_path: Path) -> None:
    mine, other = tmp_path / "mine", tmp_path / "mine-2"  # a prefix of the other's path, on purpose
    mine.mkdir()
    other.mkdir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    theirs = processes.start(other, "theirs", sleeper, env=dict(os.environ), log=other / "l.log", cwd=other)
    ours = processes.start(mine, "ours", sleeper, env=dict(os.environ), log=mine / "l.log", cwd=mine)
    try:
        assert processes.members(mine) == [ours.pid]
        processes.stop_all(mine, grace_seconds=5)
        assert processes.running(theirs)
        assert not processes.running(ours)
    finally:
        processes.stop_all(other, grace_seconds=2)
    assert not processes.running(theirs)


def test_stopping_what_one_start_began_leaves_earlier_processes_running(state: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    earlier = processes.start(state, "earlier", sleeper, env=dict(os.environ), log=state / "a.log", cwd=state)
    before = {r.pid for r in processes.records(state)}
    later = processes.start(state, "later", sleeper, env=dict(os.environ), log=state / "b.log", cwd=state)

    assert processes.stop_all(state, keep=before, grace_seconds=5) == [later.pid]

    assert processes.running(earlier)
    assert not processes.running(later)
    assert [r.name for r in processes.records(state)] == ["earlier"]


def test_a_taken_port_is_named_with_its_process_before_anything_binds() -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        assert processes.listener(port) == holder.pid
        with pytest.raises(processes.PortTakenError) as caught:
            processes.require_free({port: "mpi-operator (health probe)"})
        message = str(caught.value)
        assert "\n" not in message
        assert f"port {port}, needed by mpi-operator (health probe), is taken by pid {holder.pid}" in message
        assert "time.sleep(600)" in message  # the holder's command line
    finally:
        holder.kill()
        holder.wait()


def test_a_free_port_passes() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert processes.listener(port) is None
    processes.require_free({port: "anything"})


# Answers every connection with an HTTP/2 SETTINGS frame, as a gRPC or HTTP/2-only server on an
# operator's health port does; http.client reads it as BadStatusLine.
HTTP2_SERVER = """
import socket
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()
print(s.getsockname()[1], flush=True)
while True:
    conn, _ = s.accept()
    conn.sendall(bytes([0, 0, 0x18, 4, 0, 0, 0, 0, 0]) + bytes(24) + b"\\r\\n")
    conn.close()
"""


def test_a_health_probe_answered_by_another_program_says_so_in_one_line(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HTTP2_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        op = operators.Operator(
            name="mpi-operator", argv=(), env=(), ports=(port,), health=f"http://127.0.0.1:{port}/healthz"
        )
        with pytest.raises(operators.ProbeError) as caught:
            operators.wait_for("mpi-operator", lambda: operators.probe(op, tmp_path), deadline_s=30)
        message = str(caught.value)
        assert "\n" not in message
        probe_url = f"http://127.0.0.1:{port}/healthz"
        assert message.startswith(f"mpi-operator: its health probe {probe_url} was answered by pid {holder.pid} (")
        assert message.endswith("not by the operator (BadStatusLine)")
    finally:
        holder.kill()
        holder.wait()


# Ignores SIGTERM, as weed does (tools/cluster/kfp/object_store.py: STOP_GRACE_S).
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
time.sleep(600)
"""


def test_a_process_with_a_grace_of_its_own_is_killed_after_it_not_after_the_clusters(state: Path) -> None:
    out = state / "stubborn.log"
    record = processes.start(state, "stubborn", [sys.executable, "-c", STUBBORN], env=dict(os.environ), log=out,
                             cwd=state.parent, stop_grace_seconds=0.2)  # fmt: skip
    _wait_for_line(out)
    assert [r.stop_grace_seconds for r in processes.records(state)] == [0.2]  # kept in its record
    start = time.monotonic()
    ended = processes.stop_all(state, grace_seconds=300)
    assert record.pid in ended and _gone(record.pid)
    assert time.monotonic() - start < 150, "stop_all waited out the cluster's grace, not the process's own"


def test_records_are_found_two_folders_down_and_the_walk_never_descends_into_the_nodes_pod_tree(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    for folder, name in ((state, "a"), (state / "kfp", "b"), (state / "kfp" / "identity", "c")):
        (folder / "processes").mkdir(parents=True)
        (folder / "processes" / f"{name}.json").write_text(
            json.dumps({"name": name, "pid": 1, "pgid": 1, "argv": ["x"]})
        )
    # A kubelet's pod folders, deeper than any piece's: a record there is not the cluster's, and a
    # folder that vanishes mid-walk (a pod's, removed as it ends) must not fail the walk.
    deep = state / "node" / "kubelet-root" / "pods" / "uid-1" / "processes"
    deep.mkdir(parents=True)
    (deep / "z.json").write_text(json.dumps({"name": "z", "pid": 1, "pgid": 1, "argv": ["x"]}))
    assert sorted(r.name for r in processes.records(state)) == ["a", "b", "c"]
