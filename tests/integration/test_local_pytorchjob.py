"""PyTorchJobs on the local backend with real processes: the operator's env, a missing command, adoption,
and a DDP program's own exception as the job's one-line error.

Restarts and back-off are in test_local_pytorchjob_restarts.py, deadline, suspend, delete and TTL in
test_local_pytorchjob_lifecycle.py, the supervisor's own failures in test_local_supervisor.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.backends.local.env import MACHINE_ENV, image_environment
from kubetrain.errors import JobConflictError, JobFailedError
from kubetrain.launcher import AwaitOptions, run_job
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from kubetrain.status import JobPhase
from tests.integration.local_jobs import CLAIM, _follow, _program, _pytorchjob, _template

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


ENV_DUMP = """
    import json, os, sys, time
    keys = ["PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_MASTER_ADDR",
            "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "USER_VALUE", "DATA",
            "SCRATCH", "POD_IP", "POD_NAME", "HOSTNAME", "LOCAL_RANK", "FOO_HOST_ONLY", "LC_ALL", "HTTPS_PROXY",
            "MKL_NUM_THREADS"]
    record = {k: os.environ.get(k) for k in keys}
    record["names"] = sorted(os.environ)
    record["argv"] = sys.argv[1:]
    record["cwd"] = os.getcwd()
    open(os.path.join(os.environ["DATA"], "env-" + os.environ["HOSTNAME"] + ".json"), "w").write(json.dumps(record))
    # The job succeeds when the master does, and the workers are then stopped: the master waits for them.
    while os.environ["RANK"] == "0" and len([f for f in os.listdir(os.environ["DATA"]) if f.startswith("env-")]) < 3:
        time.sleep(0.02)
"""


def test_hand_written_pytorchjob_sees_the_operators_env(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "99")  # the caller's own value must not leak into a replica
    monkeypatch.setenv("LOCAL_RANK", "7")
    monkeypatch.setenv("FOO_HOST_ONLY", "leaked")  # the shell that launched it is not the pod's
    monkeypatch.setenv("LC_ALL", "C.UTF-8")  # what this machine needs passes through
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    program = _program(backend, "env.py", ENV_DUMP)
    env: list[dict[str, Any]] = [
        {"name": "USER_VALUE", "value": "from-the-manifest"},
        {"name": "DATA", "value": "/workspace"},
        {"name": "SCRATCH", "value": "/scratch/tmp"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    command = ["python", program, "--master=$(MASTER_ADDR):$(MASTER_PORT)", "--out", "/workspace/out", "$(RANK)"]
    template = _template(command, env=env, ports=[{"name": "pytorchjob-port", "containerPort": 29555}])
    ref = backend.submit(_pytorchjob("envjob", template, template))
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED
    claim = backend.claim_dir(CLAIM)
    master_ip = backend.pod_address(ref, "envjob-master-0")
    assert master_ip.startswith("127.")
    # The job's own port stands for the manifest's (torch's stores listen on every interface).
    port = str(backend.rendezvous_ports(ref)[29555])
    seen_ips = set()
    for name, rank in (("envjob-master-0", 0), ("envjob-worker-0", 1), ("envjob-worker-1", 2)):
        got = json.loads((claim / f"env-{name}.json").read_text())
        operator = {
            "PYTHONUNBUFFERED": "1",
            "MASTER_ADDR": master_ip,
            "MASTER_PORT": port,
            "WORLD_SIZE": "3",
            "RANK": str(rank),
            "PET_MASTER_ADDR": master_ip,
            "PET_MASTER_PORT": port,
            "PET_NNODES": "3",
            "PET_NODE_RANK": str(rank),
            "PET_NPROC_PER_NODE": "auto",  # the operator's defaulting when nprocPerNode is not set
        }
        assert {k: got[k] for k in operator} == operator
        assert got["LOCAL_RANK"] is None
        assert got["FOO_HOST_ONLY"] is None
        assert (got["LC_ALL"], got["HTTPS_PROXY"], got["MKL_NUM_THREADS"]) == (
            "C.UTF-8",
            "http://proxy.example:3128",
            "1",
        )
        # Every name is the image's, the manifest's, the operator's, the backend's or this machine's.
        manifest = {"OMP_NUM_THREADS", "WORK"} | {e["name"] for e in env}
        pod = set(image_environment("registry.example/train:1")) | manifest | set(operator) | {"HOSTNAME"}
        backend_own = {"KUBETRAIN_BIND_ADDRESS", "KUBETRAIN_LOCAL_CONTAINER"}
        unexplained = [n for n in got["names"] if n not in pod | backend_own | MACHINE_ENV and not n.startswith("LC_")]
        assert unexplained == []
        assert got["USER_VALUE"] == "from-the-manifest"
        assert got["DATA"] == str(claim)
        assert got["SCRATCH"].startswith(str(backend.job_dir(ref))) and got["SCRATCH"].endswith("/scratch/tmp")
        assert got["POD_IP"] == backend.pod_address(ref, name)
        assert got["POD_NAME"] == got["HOSTNAME"] == name
        assert got["argv"] == [f"--master={master_ip}:{port}", "--out", f"{claim}/out", str(rank)]
        seen_ips.add(got["POD_IP"])
    assert len(seen_ips) == 3  # one loopback address per replica


def test_a_missing_command_fails_at_once_naming_replica_and_image(backend: LocalBackend) -> None:
    ref = backend.submit(_pytorchjob("nocmd", _template(["train-without-python", "--x"]), None))
    status, _ = _follow(backend, ref, timeout=20)
    assert status.phase is JobPhase.FAILED
    assert "replica master-0 of PyTorchJob nocmd" in status.message
    assert "'train-without-python' not found" in status.message
    assert "registry.example/train:1" in status.message


def test_resubmitting_with_the_same_run_labels_adopts_and_other_labels_conflict(backend: LocalBackend) -> None:
    labels = {LABEL_RUN_ID: "run-1", LABEL_TASK_ID: "task-1"}
    program = _program(backend, "wait.py", "import time\ntime.sleep(600)\n")
    manifest = _pytorchjob("twice", _template(["python", program]), None, labels=labels)
    first = backend.submit(manifest)
    assert backend.submit(manifest) == first
    other = _pytorchjob("twice", _template(["python", program]), None, labels={**labels, LABEL_RUN_ID: "run-2"})
    with pytest.raises(JobConflictError, match="belongs to another run"):
        backend.submit(other)
    backend.delete(first)


RANK1_RAISES = """
    import os
    import torch, torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    if dist.get_rank() == 1:
        raise ValueError("no labels in shard 1")
    dist.all_reduce(t)  # rank 0 waits here for the peer that died: Connection closed by peer
"""


def test_a_ddp_programs_own_exception_is_the_one_line_error(backend: LocalBackend) -> None:
    """Issues 48 item 10 and 49 item 2: the error said `worker-0 exited with code 1`, or rank 0's lost connection."""
    program = _program(backend, "raise.py", RANK1_RAISES)
    template = _template(["python", program])  # the job's own rendezvous port, locally (issue 49.1)
    manifest = _pytorchjob("ddpraise", template, template, workers=1, policy="Never")
    with pytest.raises(JobFailedError) as failed:
        run_job(manifest, backend=backend, options=AwaitOptions(timeout_seconds=120), log_sink=lambda _: None)
    assert failed.value.program_error == "rank 1: ValueError: no labels in shard 1"
    assert failed.value.headline().startswith("rank 1: ValueError: no labels in shard 1; PyTorchJob default/ddpraise")
