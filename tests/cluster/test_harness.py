"""The harness itself: a cluster start that fails, or is killed half-way, leaves no process behind.

A second cluster (its own state directory and kwokctl name) is started beside the session's
one, with real binaries: its control plane comes up for real, and its operators cannot start
because the session cluster's operators hold their fixed ports, which is the failure on purpose.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.cluster import operators, processes
from tools.cluster.controlplane import REPO_ROOT, Cluster

pytestmark = [pytest.mark.timeout(600)]


def _harness(state: Path, action: str, **popen: object) -> subprocess.Popen[str]:
    # One real node per machine (fixed ports, one bridge): the session cluster has it, a second one none.
    env = {**os.environ, "KUBETRAIN_CLUSTER_DIR": str(state), "KUBETRAIN_CLUSTER_NAME": f"kubetrain-{state.name}",
           "KUBETRAIN_REAL_NODE": "0"}  # fmt: skip
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "tools.cluster", action], cwd=REPO_ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen,
    )  # fmt: skip


def _apiserver(state: Path) -> int | None:
    for pid in processes.members(state):
        # The executable's name: kwokctl's own command line names "--kube-apiserver-binary" too.
        command = processes.describe(pid).split("(", 1)[1]
        if Path(command.split()[0]).name == "kube-apiserver":
            return pid
    return None


def test_a_failed_start_names_the_taken_port_and_stops_what_it_started(cluster: Cluster, tmp_path: Path) -> None:
    state = tmp_path / "failing"
    # The first of the operators' ports, held by the session cluster's operator of that port.
    taken, what = min(operators.ports().items())
    holder = processes.listener(taken)
    assert holder is not None and holder in processes.members(cluster.workdir.parent)
    command = processes.describe(holder).split(" (", 1)[1].removesuffix(")")

    up = _harness(state, "up")
    _out, err = up.communicate(timeout=420)

    assert up.returncode == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    # The holder, or the same operator started again since: under load, one that loses its leader
    # lease exits and the cluster starts it again (another pid, the same command line).
    named = re.fullmatch(rf"cluster up: port {taken}, needed by {re.escape(what)}, is taken by pid (\d+) \((.*)\); "
                         "stop it or free the port", lines[0])  # fmt: skip
    assert named is not None, lines[0]
    assert named[2] == command, lines[0]
    assert processes.members(state) == []  # its etcd, API server, controller-manager, scheduler and kwok too
    assert not state.exists()
    assert processes.listener(taken) in processes.members(cluster.workdir.parent)  # the session cluster's, untouched
    cluster.kubectl("get", "--raw", "/readyz")


def test_down_after_a_start_killed_half_way_and_its_directory_removed_leaves_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    state = tmp_path / "killed"
    up = _harness(state, "up")
    deadline = time.monotonic() + 300
    while _apiserver(state) is None:  # wait for the real control plane to be half-way up
        assert up.poll() is None, up.communicate()
        assert time.monotonic() < deadline, "the second control plane never started its API server"
        time.sleep(0.5)
    os.kill(up.pid, signal.SIGKILL)  # the harness dies, no cleanup runs; kwokctl and what it started live on
    up.wait(timeout=30)
    left = processes.members(state)
    assert left, "the kill should leave the control plane running; nothing to test otherwise"
    _remove_while_written(state)  # `.cluster/` gone, as a `make cluster-down` of the old harness left it

    down = _harness(state, "down")
    out, err = down.communicate(timeout=120)

    assert down.returncode == 0, err
    assert processes.members(state) == []
    for pid in left:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    assert "nothing of the cluster is running" in out
    cluster.kubectl("get", "--raw", "/readyz")


def _remove_while_written(folder: Path) -> None:
    """`rm -rf` of a folder the live control plane still writes into: again while it reappears.

    A process that creates a file between rmtree's listing of a folder and its rmdir fails the
    rmdir (ENOTEMPTY; a cold CI run's kwokctl did); once a folder is gone, nothing is created in it.
    """
    for _ in range(20):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            return
    raise AssertionError(f"{folder} kept reappearing while its processes ran")
