"""Terminating a run on the real KFP 2.17 backend deletes its training job, whatever the step was doing.

Issue 33: terminated 6 s after submission, a run's PyTorchJob trained on to Succeeded. The step's
container dies within a second of the signal, so kubetrain's reaper (deploy/reaper.yaml, a host
process here as its ServiceAccount) is what deletes the job: at every moment, every time. The
moments run side by side (tests/cluster/concurrent.py), each with its own run.
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Iterator

import pytest

from tests.cluster import kfp_runs
from tests.cluster.concurrent import Scenarios, scenarios
from tests.cluster.kfp_pipelines import GONE_WITHIN_SECONDS, launcher_pods, run_jobs, wait_for
from tests.cluster.kfp_runs import KfpBackend
from tools.cluster.controlplane import STATE, Cluster

pytestmark = pytest.mark.timeout(2400)

# When to terminate, as the run's own state tells it: the step's launcher starting (nothing
# submitted yet), the job just created, its pods pending, and training. The delete must not depend
# on winning a race. "The job ended, the step uploads its artifacts" is not among them: the step
# deletes a succeeded job within a second, too soon for a poll of the job's phase to catch.
MOMENTS = ("before-submission", "job-created", "pods-pending", "training")
# Once each in CI (time); KUBETRAIN_TERMINATE_REPEATS=N repeats them to look for a flake.
REPEATS = int(os.environ.get("KUBETRAIN_TERMINATE_REPEATS", "1"))


@pytest.fixture(scope="module")
def kfp_backend(cluster: Cluster) -> KfpBackend:
    """The backend, with the images mnist_pytorch runs."""
    return kfp_runs.prepare(cluster, ["launcher", "pytorch"])


@pytest.fixture(scope="module")
def started(kfp_backend: KfpBackend) -> Iterator[Scenarios]:
    """Every moment's run, side by side from the module's start."""
    with scenarios() as running:
        for attempt in range(REPEATS):
            for moment in MOMENTS:
                running.start(f"{moment}-{attempt}", functools.partial(_terminate_at, kfp_backend, moment, attempt))
        yield running


@pytest.mark.parametrize("attempt", range(REPEATS))
@pytest.mark.parametrize("moment", MOMENTS)
def test_terminating_a_run_deletes_its_training_job_at_every_moment_of_the_step(
    started: Scenarios, moment: str, attempt: int
) -> None:
    started.result(f"{moment}-{attempt}")


def _job_pods(kfp_backend: KfpBackend, job: str, field: str = "{.items[*].status.phase}") -> str:
    return kfp_backend.kubectl("get", "pods", "-l", f"training.kubeflow.org/job-name={job}", "-o", f"jsonpath={field}")


def _main_running(kfp_backend: KfpBackend, run_id: str) -> bool:
    """Whether the training step's pod runs its `main` container (kubetrain's launcher is starting)."""
    for pod in launcher_pods(kfp_backend, run_id, "pytorch_train"):
        status = json.loads(kfp_backend.kubectl("get", "pod", pod, "-o", "json"))["status"]
        if any(c["name"] == "main" and "running" in c["state"] for c in status.get("containerStatuses") or []):
            return True
    return False


def _the_job(kfp_backend: KfpBackend, run_id: str) -> str:
    """The run's PyTorchJob's name ('' while it has none)."""
    jobs = run_jobs(kfp_backend, run_id)
    return jobs[0].split("/")[-1] if jobs else ""


def _terminate_at(kfp_backend: KfpBackend, moment: str, attempt: int) -> None:
    package = kfp_runs.REPO_ROOT / "pipelines" / "mnist_pytorch.yaml"
    run_id = kfp_backend.start(package, {"epochs": 400}, f"terminate-{moment}-{attempt}-{uuid.uuid4().hex[:6]}")
    if moment == "before-submission":
        wait_for("the training step's launcher running", lambda: _main_running(kfp_backend, run_id), 600)
    else:
        wait_for("the PyTorchJob of the run", lambda: run_jobs(kfp_backend, run_id), 600)
    job = _the_job(kfp_backend, run_id)
    if moment == "pods-pending":
        wait_for("a pod of the job", lambda: bool(_job_pods(kfp_backend, job).strip()), 300)
    elif moment == "training":
        wait_for("its master pod running", lambda: "Running" in _job_pods(kfp_backend, job), 300)
    kfp_backend.client.terminate_run(run_id)
    if moment == "before-submission":
        # A create sent just before the signal may land a moment after it: once the step's container
        # has ended nothing more can come, and the job (if any) must then go.
        wait_for("the training step's launcher ended", lambda: not _main_running(kfp_backend, run_id),
                 GONE_WITHIN_SECONDS)  # fmt: skip
        job = _the_job(kfp_backend, run_id)
    wait_for("the run's job deleted", lambda: not run_jobs(kfp_backend, run_id), GONE_WITHIN_SECONDS)
    if job:
        wait_for("its pods gone",
                 lambda: not _job_pods(kfp_backend, job, "{.items[?(@.status.phase!='Succeeded')].metadata.name}")
                 .strip(), GONE_WITHIN_SECONDS)  # fmt: skip
    run = kfp_backend.wait(run_id, timeout=300)
    assert run.state in {"CANCELED", "FAILED"}, run.state
    assert run_jobs(kfp_backend, run_id) == []  # nothing was created after the step ended
    reaper_log = (STATE / "kfp" / "reaper.log").read_text()
    # The real authorizer let it do all it did as its ServiceAccount (deploy/reaper.yaml's Role).
    assert "HTTP 403" not in reaper_log, reaper_log[-3000:]
    if job:
        by_reaper = f"deleted PyTorchJob kubeflow/{job}" in reaper_log
        print(f"{moment} #{attempt}: job {job} deleted by {'the reaper' if by_reaper else 'the step'}")
