"""Local PyTorchJobs with the same master port side by side, as two jobs on a cluster can (issue 49).

A user's program that rendezvouses through `env://` makes rank 0's TCPStore listen on every
interface at MASTER_PORT, whatever loopback address the job's replicas have: two local jobs with the
same port collided (EADDRINUSE), or one job's workers joined the other job's store and hung. Each
local job's programs are therefore told a port of the job's own; these tests run two such jobs at
once, in one backend (two iterations of a ParallelFor) and in two processes (two `kubetrain run`s).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.local.addresses import RENDEZVOUS_PORTS
from kubetrain.backends.local.backend import LocalBackend
from kubetrain.status import JobPhase
from tests.integration.local_jobs import CLAIM, _follow, _pytorchjob, _template

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MANIFEST_PORT = 23456  # the operator's default: what two users' jobs share most often
# A program that knows nothing of kubetrain: the operator's env, `env://`, gloo. Once its group is
# up, rank 0 marks that in a directory both jobs share ($MARKS); every rank then waits (bounded)
# for both jobs' marks, so both jobs' stores are up at the same time, and gathers which job each
# rank of its group belongs to.
ENV_PROGRAM = """
import json, os, time
from datetime import timedelta
import torch.distributed as dist
work, job, marks = os.environ["WORK"], os.environ["JOB"], os.environ["MARKS"]
dist.init_process_group("gloo", timeout=timedelta(seconds=90))
if dist.get_rank() == 0:
    open(os.path.join(marks, job), "w").close()
deadline = time.monotonic() + 120
while len(os.listdir(marks)) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
jobs = [None] * dist.get_world_size()
dist.all_gather_object(jobs, job)
with open(os.path.join(work, f"{job}-rank-{dist.get_rank()}.json"), "w") as f:
    json.dump({"jobs": jobs, "port": os.environ["MASTER_PORT"], "overlapped": len(os.listdir(marks)) >= 2}, f)
dist.destroy_process_group()
"""


def env_job(name: str, program: str, marks: Path) -> dict[str, Any]:
    """A PyTorchJob of the env:// program, master + one worker, at the operator's default port."""
    env = [{"name": "JOB", "value": name}, {"name": "MARKS", "value": str(marks)}]
    ports = [{"name": "pytorchjob-port", "containerPort": MANIFEST_PORT}]
    template = _template(["python", program], env=env, ports=ports)
    job = _pytorchjob(name, template, template, workers=1, policy="Never")
    job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 240
    return job


def assert_each_job_met_only_itself(claim: Path, names: tuple[str, ...]) -> set[int]:
    """Every rank of every job gathered only its own job's ranks; the ports the jobs were told."""
    ports = set()
    for name in names:
        for rank in (0, 1):
            seen = json.loads((claim / f"{name}-rank-{rank}.json").read_text())
            assert seen["jobs"] == [name, name], f"{name} rank {rank} joined a group of {seen['jobs']}"
            assert seen["overlapped"], f"{name} rank {rank} never saw the other job's store up"
            ports.add(int(seen["port"]))
    assert ports <= set(RENDEZVOUS_PORTS), ports
    return ports


def test_two_env_jobs_with_the_same_master_port_run_side_by_side_in_one_backend(backend: LocalBackend) -> None:
    """Two iterations of a ParallelFor: one backend (one step process each in kfp.local; one here)."""
    claim = backend.claim_dir(CLAIM)
    (claim / "train.py").write_text(ENV_PROGRAM)
    (claim / "marks").mkdir()
    names = ("iter-0", "iter-1")
    refs = [backend.submit(env_job(name, "/workspace/train.py", claim / "marks")) for name in names]
    ports = [backend.rendezvous_ports(ref)[MANIFEST_PORT] for ref in refs]
    assert ports[0] != ports[1]
    for ref in refs:
        status, _ = _follow(backend, ref, timeout=200)
        assert status.phase is JobPhase.SUCCEEDED, status.message
    assert assert_each_job_met_only_itself(claim, names) == set(ports)


RUN_ONE = """
import json, sys
from pathlib import Path
from kubetrain.backends.local.backend import LocalBackend
from tests.integration.local_jobs import _follow
from tests.integration.test_local_pytorchjob_ports import MANIFEST_PORT, ENV_PROGRAM, env_job
root, name, marks = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
backend = LocalBackend(root)
(backend.claim_dir("work") / "train.py").write_text(ENV_PROGRAM)
ref = backend.submit(env_job(name, "/workspace/train.py", marks))
print(backend.rendezvous_ports(ref)[MANIFEST_PORT], flush=True)
status, _ = _follow(backend, ref, timeout=200)
print(json.dumps({"phase": status.phase.value, "message": status.message}), flush=True)
backend.close()
"""


def test_two_env_jobs_with_the_same_master_port_run_side_by_side_from_two_processes(tmp_path: Path) -> None:
    """Two `kubetrain run`s in two terminals: two processes, each with its own backend and root."""
    repo = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(repo / "src"), str(repo), os.environ.get("PYTHONPATH", "")])
    names = ("term-a", "term-b")
    (tmp_path / "marks").mkdir()
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN_ONE, str(tmp_path / name), name, str(tmp_path / "marks")],
            env={**os.environ, "PYTHONPATH": path},
            text=True,
            stdout=subprocess.PIPE,
        )
        for name in names
    ]
    try:
        ports = [int(run.stdout.readline()) for run in runs if run.stdout is not None]
        assert len(ports) == 2 and ports[0] != ports[1], ports
        for run in runs:
            out, _ = run.communicate(timeout=240)
            result = json.loads(out.strip().splitlines()[-1])
            assert result["phase"] == JobPhase.SUCCEEDED.value, result["message"]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()
    for name in names:
        assert_each_job_met_only_itself(tmp_path / name / "claims" / CLAIM, (name,))


def test_a_manifest_port_held_by_another_server_does_not_stop_a_local_job(backend: LocalBackend) -> None:
    """The job is told a port of its own, so a server already on the manifest's port is no obstacle."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))  # the wildcard address: every loopback address's port is taken
        holder.listen(1)
        port = int(holder.getsockname()[1])
        code = "import os; print('port', os.environ['MASTER_PORT'], os.environ['PET_MASTER_PORT'])"
        ports = [{"name": "pytorchjob-port", "containerPort": port}]
        ref = backend.submit(_pytorchjob("held", _template(["python", "-c", code], ports=ports), None, workers=0))
        status, _ = _follow(backend, ref, timeout=60)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    own = backend.rendezvous_ports(ref)[port]
    assert own != port
    master = next(p for p in backend.pods(ref) if p.name == "held-master-0")
    assert list(backend.pod_log(ref, master, follow=False)) == [f"port {own} {own}"]
