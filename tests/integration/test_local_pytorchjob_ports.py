"""Two local PyTorchJobs with the same master port at the same time, as two jobs on a cluster can.

Each job's rank 0 must host its rendezvous store on its own loopback address: torch's default
store listens on every interface, so the second master could not bind the port, or the second
job's workers would reach the first job's store.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.base import JobRef
from kubetrain.backends.local.backend import LocalBackend
from kubetrain.data.download import download
from kubetrain.status import JobPhase, parse_job_status
from tests.integration.local_jobs import CLAIM, _follow, _pytorchjob, _template, _wait_for, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

GATE = "/workspace/go"
# Workers start training only once the test opened the gate (bounded: 120 s), so both jobs'
# masters are listening on the shared port at the same time, whatever the machine's load.
WORKER_GATE = f"i=0; until [ -e {GATE} ] || [ $i -ge 2400 ]; do sleep 0.05; i=$((i+1)); done; exec "


def _listening(address: str, port: int) -> bool:
    """Whether a socket listens on exactly `address`:`port` (not on the wildcard address)."""
    want = f"{socket.inet_aton(address)[::-1].hex().upper()}:{port:04X}"
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(f[1] == want and f[3] == "0A" for f in (line.split() for line in lines))  # 0A: LISTEN


def _ddp_job(name: str, port: int) -> dict[str, Any]:
    train = (
        f"python -m kubetrain.train.torch_ddp --data /workspace/digits --output /workspace/{name} "
        "--epochs 1 --threads 1 --timeout-seconds 60 --init-timeout-seconds 150"
    )
    ports = [{"name": "pytorchjob-port", "containerPort": port}]
    master = _template(["sh", "-c", train], ports=ports)
    worker = _template(["sh", "-c", WORKER_GATE + train], ports=ports)
    # One worker per job is enough to show each job's workers reach their own master's store.
    job = _pytorchjob(name, master, worker, workers=1, policy="Never")
    job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 200
    return job


def _master_address(backend: LocalBackend, ref: JobRef) -> str:
    return backend.host_addresses(ref)[f"{ref.name}-master-0"]


def test_two_jobs_with_the_same_master_port_train_side_by_side(backend: LocalBackend) -> None:
    claim = backend.claim_dir(CLAIM)
    download("builtin:digits", claim / "digits", quiet=True)
    port = free_port()
    refs = [backend.submit(_ddp_job(name, port)) for name in ("ddp-a", "ddp-b")]
    masters = [_master_address(backend, ref) for ref in refs]
    assert masters[0] != masters[1]

    def both_listen() -> bool:
        for ref in refs:
            status = parse_job_status(backend.get(ref))
            assert not status.phase.terminal, f"{ref.name} ended early: {status.message}"
        return all(_listening(address, port) for address in masters)

    # Each master's store listens on its own address only; with the wildcard one master fails.
    _wait_for(both_listen, timeout=150, what=f"both masters to listen on {masters} port {port}")
    (claim / "go").touch()
    for ref in refs:
        status, _ = _follow(backend, ref, timeout=180)
        assert status.phase is JobPhase.SUCCEEDED, status.message
    for name in ("ddp-a", "ddp-b"):
        metrics = json.loads((claim / name / "metrics.json").read_text())
        assert (metrics["world_size"], metrics["epochs"]) == (2, 1)


def test_a_master_port_held_by_another_process_fails_the_job_before_its_first_start(backend: LocalBackend) -> None:
    """Issue 34: the job used all its starts (about 20 s) before failing; no start can succeed while the port is held."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))  # the wildcard address: every loopback address's port is taken
        holder.listen(1)
        port = int(holder.getsockname()[1])
        ports = [{"name": "pytorchjob-port", "containerPort": port}]
        job = _pytorchjob("held", _template(["sh", "-c", "exit 1"], ports=ports), None, workers=0)
        job["spec"]["runPolicy"]["backoffLimit"] = 3
        ref = backend.submit(job)
        status, _ = _follow(backend, ref, timeout=60)
    assert status.phase is JobPhase.FAILED
    assert f"port {port}, where held-master-0 hosts the job's rendezvous, is held by another process" in status.message
    assert status.restarts == 0
    assert backend.pods(ref) == []  # no replica was started
