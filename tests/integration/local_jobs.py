"""Building and following jobs on the local backend with real processes, for its integration tests:
replica templates and PyTorchJob manifests, programs in the claim, the processes a test left behind.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path
from typing import Any

from kubetrain.backends.base import JobRef
from kubetrain.backends.local.backend import LocalBackend
from kubetrain.status import JobPhase, JobStatus, parse_job_status

CLAIM = "work"


def _pids_of(root: Path) -> list[int]:
    """Live processes whose command line mentions `root` (every replica here runs a file under it)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(root) in cmdline and state != "Z":
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie waiting to be reaped is dead."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _program(backend: LocalBackend, name: str, source: str) -> str:
    (backend.claim_dir(CLAIM) / name).write_text(textwrap.dedent(source))
    return f"/workspace/{name}"


def _template(command: list[str], *, env: list[dict[str, Any]] | None = None, **container: Any) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "registry.example/train:1",
                    "command": command,
                    # Paths inside a program's source are not translated (only env and args are):
                    # programs find the claim through $WORK.
                    "env": [
                        {"name": "OMP_NUM_THREADS", "value": "1"},
                        {"name": "WORK", "value": "/workspace"},
                        *(env or []),
                    ],
                    "volumeMounts": [
                        {"name": "work", "mountPath": "/workspace"},
                        {"name": "scratch", "mountPath": "/scratch"},
                    ],
                    **container,
                }
            ],
            "volumes": [
                {"name": "work", "persistentVolumeClaim": {"claimName": CLAIM}},
                {"name": "scratch", "emptyDir": {}},
            ],
        }
    }


def _pytorchjob(
    name: str,
    master: dict[str, Any] | None,
    worker: dict[str, Any] | None = None,
    *,
    workers: int = 2,
    policy: str = "OnFailure",
    run_policy: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    replicas: dict[str, Any] = {}
    if master is not None:
        replicas["Master"] = {"replicas": 1, "restartPolicy": policy, "template": master}
    if worker is not None:
        replicas["Worker"] = {"replicas": workers, "restartPolicy": policy, "template": worker}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"runPolicy": run_policy or {}, "pytorchReplicaSpecs": replicas},
    }


def _follow(backend: LocalBackend, ref: JobRef, timeout: float = 120) -> tuple[JobStatus, list[JobPhase]]:
    """Watch until terminal; the final status and every phase seen on the way."""
    phases: list[JobPhase] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for obj in backend.watch(ref, timeout_seconds=deadline - time.monotonic()):
            status = parse_job_status(obj)
            if not phases or phases[-1] is not status.phase:
                phases.append(status.phase)
            if status.phase.terminal:
                return status, phases
    raise AssertionError(f"not finished within {timeout}s; phases {phases}")


def _wait_for(predicate: Any, timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
