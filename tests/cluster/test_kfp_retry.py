"""Retried steps on the real Kubeflow Pipelines 2.17 backend: a step's job is never trained twice at once.

Two ways a step is retried, as KFP 2.17 ships Argo (`templateDefaults.retryStrategy.retryPolicy:
OnError`, tools/cluster/kfp/manifests.py):
- A step whose pod vanished (its node lost, the pod force-deleted) is started again by Argo in a new
  pod (a new uid; v4.0.5 names it after a new retry node). The new launcher finds the same job by
  the identity read from its output URI, adopts it while it trains, and records itself on it
  before kubetrain's reaper's grace period runs out.
- A step that *failed* (its launcher killed with the pod still there) is not retried by Argo: the run
  fails, the reaper deletes the job, and a retry of the run (the UI's Retry, RetryRun) trains one
  new job under the same name. Here for a placeholder-free step, whose identity comes from its
  output URI; with the run's ids it is the browser module's Retry scenario (test_kfp_ui.py).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import kfp_runs
from tests.cluster.concurrent import Scenarios, scenarios
from tests.cluster.kfp_pipelines import (
    GONE_WITHIN_SECONDS,
    by_name_pipeline,
    gate,
    launcher_pods,
    run_jobs,
    users_pipeline,
    wait_for,
    wait_retried,
)
from tests.cluster.kfp_runs import KfpBackend
from tools.cluster.controlplane import STATE, Cluster, ControlPlaneError

pytestmark = pytest.mark.timeout(2400)


@pytest.fixture(scope="module")
def kfp_backend(cluster: Cluster) -> KfpBackend:
    """The backend, with the images these runs use built and pushed."""
    return kfp_runs.prepare(cluster, ["launcher", "pytorch"])


@pytest.fixture(scope="module")
def started(kfp_backend: KfpBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenarios]:
    """The two scenarios side by side (tests/cluster/concurrent.py), each with its own run."""
    with scenarios() as running:
        running.start(
            "lost", functools.partial(_lost_step_adopts_its_job, kfp_backend, tmp_path_factory.mktemp("lost"))
        )
        running.start(
            "placeholder-free",
            functools.partial(_retried_step_reattaches, kfp_backend, tmp_path_factory.mktemp("placeholder-free")),
        )
        yield running


def test_a_step_lost_with_its_pod_is_started_again_and_adopts_its_running_job(started: Scenarios) -> None:
    started.result("lost")


def test_a_placeholder_free_step_killed_mid_job_has_its_job_reaped_and_a_retry_trains_one_job_of_its_name(
    started: Scenarios,
) -> None:
    # No run_id/task_id/task_name: the step reads its identity from its output URI, which the
    # driver drew once and the retried executor pod reuses, so the retry names the same job.
    started.result("placeholder-free")


def _recreated_step_log(kfp_backend: KfpBackend, run_id: str, lost_uid: str) -> str:
    """The log of the step's new pod (any uid but the lost one's); '' until it has one."""
    for pod in launcher_pods(kfp_backend, run_id, "pytorch_train"):
        uid = kfp_backend.kubectl("get", "pod", pod, "-o", "jsonpath={.metadata.uid}", "--ignore-not-found")
        if uid and uid != lost_uid:
            try:
                return kfp_backend.kubectl("logs", pod, "-c", "main")
            except ControlPlaneError:  # not started yet
                return ""
    return ""


def _job_pods_running(kfp_backend: KfpBackend, job: str) -> bool:
    phases = kfp_backend.kubectl("get", "pods", "-l", f"training.kubeflow.org/job-name={job}",
                                 "-o", "jsonpath={.items[*].status.phase}").split()  # fmt: skip
    return bool(phases) and all(p == "Running" for p in phases)


def _lost_step_adopts_its_job(kfp_backend: KfpBackend, tmp_path: Path) -> None:
    # A node lost under a running step: its launcher dies without a word (SIGKILL, so it cannot
    # delete the job) and its pod object goes (force-deleted, as the node lifecycle controller
    # does). Argo starts the step again in a new pod.
    # The job runs until the test opens its gate, so it trains as long as the adoption takes.
    opened, gated = gate("lost")
    package = by_name_pipeline(
        tmp_path,
        "lost",
        f"""
        @dsl.pipeline(name="lost-step")
        def pipeline() -> None:
            data = claim(download_dataset(source="builtin:digits"))
            task = claim(pytorch_train(dataset=data.outputs["dataset"], workers=0, delete_after="never",
                                       command={gated!r}))
            task.set_retry(num_retries=2)
    """,
    )
    run_id = kfp_backend.start(package, {}, f"lost-{uuid.uuid4().hex[:6]}")
    wait_for("the PyTorchJob of the run", lambda: run_jobs(kfp_backend, run_id), 600)
    job = run_jobs(kfp_backend, run_id)[0].split("/")[-1]
    wait_for("the job's pods Running", lambda: _job_pods_running(kfp_backend, job), 300)
    uid = kfp_backend.kubectl("get", "pytorchjob", job, "-o", "jsonpath={.metadata.uid}")
    (lost,) = launcher_pods(kfp_backend, run_id, "pytorch_train")
    lost_uid = kfp_backend.kubectl("get", "pod", lost, "-o", "jsonpath={.metadata.uid}")
    kfp_backend.kill_main_container(lost)
    kfp_backend.kubectl("delete", "pod", lost, "--grace-period=0", "--force", "--wait=false")
    adopted = f"adopted existing PyTorchJob kubeflow/{job}"
    wait_for("the step's new pod to adopt the job",
             lambda: adopted in _recreated_step_log(kfp_backend, run_id, lost_uid), 600)  # fmt: skip
    opened.touch()

    run = kfp_backend.wait(run_id)
    assert run.state == "SUCCEEDED", f"{run.state} {run.error}\n{kfp_backend.workflow_tail(run_id)}"
    (again,) = launcher_pods(kfp_backend, run_id, "pytorch_train")
    assert kfp_backend.kubectl("get", "pod", again, "-o", "jsonpath={.metadata.uid}") != lost_uid  # a new pod
    # The same job, never deleted nor replaced: the retried step adopted it as it trained.
    assert run_jobs(kfp_backend, run_id) == [f"pytorchjob.kubeflow.org/{job}"]
    assert kfp_backend.kubectl("get", "pytorchjob", job, "-o", "jsonpath={.metadata.uid}") == uid
    assert f"uid {uid}" not in (STATE / "kfp" / "reaper.log").read_text()
    log = kfp_backend.kubectl("logs", again, "-c", "main")
    assert adopted in log, log[-3000:]
    kfp_backend.kubectl("delete", "pytorchjob", job, "--wait=true")


def _retried_step_reattaches(kfp_backend: KfpBackend, tmp_path: Path) -> None:
    # The launcher container dies mid-job (SIGKILLed, as a node loss or an OOM kill ends it: no
    # SIGTERM, so it cannot delete the job). Its step has ended, so kubetrain's reaper deletes the
    # job by its uid (issue 33: whatever kills the step, its job stops). KFP 2.17's own
    # workflow-controller defaults (templateDefaults retryPolicy OnError) keep `set_retry` from
    # retrying a step that *failed*: the run fails. Retrying the run (the UI's Retry, RetryRun)
    # starts a new launcher, which submits one job and trains: never two at once. (Adoption of a
    # job that still exists, with the retried step's pod re-recorded on it, is proven against the
    # stand-in API server: tests/integration/test_reaper.py, test_k8s_launcher.py.)
    # The first job waits on its gate until it is reaped; the retried one finds it open.
    opened, gated = gate("retried")
    package = users_pipeline(
        tmp_path,
        "retried",
        f"""
        @dsl.pipeline(name="retried-training")
        def pipeline() -> None:
            data = claim(download(source="builtin:digits"))
            task = claim(train(dataset=data.outputs["dataset"], delete_after="never", command={gated!r}))
            task.set_retry(num_retries=2)
            # Without the run's ids, an earlier run of this pipeline on the same backend would be a
            # cache hit: no job to kill.
            task.set_caching_options(False)
    """,
    )
    run_id = kfp_backend.start(package, {}, f"retried-{uuid.uuid4().hex[:6]}")
    wait_for("the PyTorchJob of the run", lambda: run_jobs(kfp_backend, run_id), 600)
    job = run_jobs(kfp_backend, run_id)[0].split("/")[-1]
    uid = kfp_backend.kubectl("get", "pytorchjob", job, "-o", "jsonpath={.metadata.uid}")
    kfp_backend.kill_main_container(launcher_pods(kfp_backend, run_id, "pytorch_train")[0])
    wait_for("the killed step's job reaped", lambda: not run_jobs(kfp_backend, run_id), GONE_WITHIN_SECONDS)
    assert f"deleted PyTorchJob kubeflow/{job} (uid {uid})" in (STATE / "kfp" / "reaper.log").read_text()
    run = kfp_backend.wait(run_id)
    assert run.state == "FAILED", run.state  # set_retry did not retry it (see above)
    assert len(launcher_pods(kfp_backend, run_id, "pytorch_train")) == 1
    opened.touch()
    # Argo's retry replaces the failed pod by a new one of the same name.
    kfp_backend.client._run_api.run_service_retry_run(run_id=run_id)
    state = wait_retried(kfp_backend, run_id, lambda: str(kfp_backend.client.get_run(run_id).state))
    assert state == "SUCCEEDED", f"{state}\n{kfp_backend.workflow_tail(run_id)}"
    assert run_jobs(kfp_backend, run_id) == [f"pytorchjob.kubeflow.org/{job}"]  # one job (delete_after never)
    assert kfp_backend.kubectl("get", "pytorchjob", job, "-o", "jsonpath={.metadata.uid}") != uid
    kfp_backend.kubectl("delete", "pytorchjob", job, "--wait=true")
