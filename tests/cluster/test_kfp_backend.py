"""The compiled pipelines on the real Kubeflow Pipelines 2.17 backend, through `kfp.Client` as a user would.

The backend (tools/cluster/kfp/backend.py) runs on the e2e cluster's real node: KFP's API server,
persistence agent, driver and launcher, Argo's workflow-controller and executor, ML Metadata, an S3
store. A run's steps are pods in namespace `kubeflow` (kubetrain's launcher image, as the
committed YAML names it); the training jobs they create are run by the real operators in real pods.
What a run produced is read as the Kubeflow UI reads it: the run's artifacts in ML Metadata, their
objects in the store (tests/cluster/kfp_runs.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kfp_server_api.exceptions import ApiException

from kubetrain.names import LABEL_RUN_ID
from tests.cluster import kfp_runs
from tests.cluster.kfp_pipelines import (
    GONE_WITHIN_SECONDS,
    TARGET,
    by_name_pipeline,
    check_shipped_run,
    launcher_pods,
    run_jobs,
    users_pipeline,
    wait_for,
)
from tests.cluster.kfp_runs import Artifact, KfpBackend
from tools.cluster.controlplane import STATE, Cluster
from tools.cluster.node_config import NODE_NAME

EXAMPLES = kfp_runs.REPO_ROOT / "docs" / "examples"
COMPONENTS = kfp_runs.REPO_ROOT / "components"
pytestmark = pytest.mark.timeout(2400)


@pytest.fixture(scope="module")
def kfp_backend(cluster: Cluster) -> KfpBackend:
    """The backend, with every kubetrain image built and pushed."""
    return kfp_runs.prepare(cluster, ["launcher", "pytorch", "chainermn", "ps"])


def _by_type(artifacts: list[Artifact], kind: str) -> list[Artifact]:
    return [a for a in artifacts if a.type == kind]


@pytest.mark.parametrize("package", kfp_runs.compiled_pipelines() + kfp_runs.compiled_components(),
                         ids=lambda p: p.name)  # fmt: skip
def test_every_compiled_pipeline_and_component_uploads(kfp_backend: KfpBackend, package: Path) -> None:
    # The call the UI's upload makes; a refused YAML raises with the server's own message.
    name = f"{package.stem}-{uuid.uuid4().hex[:8]}"
    uploaded = kfp_backend.client.upload_pipeline(str(package), pipeline_name=name)
    versions = kfp_backend.client.list_pipeline_versions(uploaded.pipeline_id).pipeline_versions
    assert [v.display_name for v in versions] == [name]
    spec = versions[0].pipeline_spec
    spec = spec.get("pipeline_spec", spec)  # with a platform spec beside it, the server nests both
    assert spec["pipelineInfo"]["name"] == kfp_runs.pipeline_name(package)
    kfp_backend.client.delete_pipeline_version(uploaded.pipeline_id, versions[0].pipeline_version_id)
    kfp_backend.client.delete_pipeline(uploaded.pipeline_id)


@pytest.mark.parametrize("pipeline", ["mnist_pytorch", "mnist_chainermn", "mnist_ps", "compare_frameworks"])
def test_a_shipped_pipeline_runs_to_succeeded_with_its_model_metrics_and_report(
    kfp_backend: KfpBackend, pipeline: str
) -> None:
    package = kfp_runs.REPO_ROOT / "pipelines" / f"{pipeline}.yaml"
    run_id = kfp_backend.start(package, {}, f"{pipeline}-{uuid.uuid4().hex[:6]}")
    run = kfp_backend.wait(run_id)
    assert run.state == "SUCCEEDED", f"{pipeline}: {run.state} {run.error}\n{kfp_backend.workflow_tail(run_id)}"
    check_shipped_run(kfp_backend, pipeline, run_id)


def test_a_users_pipeline_of_loaded_components_runs_two_training_jobs(kfp_backend: KfpBackend, tmp_path: Path) -> None:
    # As the user guide writes it: components loaded from the compiled YAML, two pytorch_train
    # tasks side by side, one running the user's own DDP script from the workspace claim.
    programs = STATE / "node" / "workspace-kubeflow" / "programs"
    programs.mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "ddp_train.py", programs / "ddp_train.py")
    package = users_pipeline(
        tmp_path,
        "two_trainings",
        """
        @dsl.pipeline(name="two-trainings")
        def pipeline() -> None:
            data = claim(download(source="builtin:digits"))
            ours = claim(train(dataset=data.outputs["dataset"], **IDS, workers=1, epochs=5))
            theirs = claim(train(dataset=data.outputs["dataset"], **IDS, workers=1,
                                 command=["python", "/workspace/programs/ddp_train.py"], args=["--epochs", "20"]))
            ours.set_display_name("kubetrain-ddp")
            theirs.set_display_name("own-ddp")
    """,
    )
    run_id = kfp_backend.start(package, {}, f"two-trainings-{uuid.uuid4().hex[:6]}")
    run = kfp_backend.wait(run_id)
    assert run.state == "SUCCEEDED", f"{run.state} {run.error}\n{kfp_backend.workflow_tail(run_id)}"
    models = _by_type(kfp_backend.artifacts(run_id), "system.Model")
    jobs = {m.properties["job_name"] for m in models}
    assert len(models) == 2 and len(jobs) == 2, [m.properties for m in models]
    for model in models:
        written = json.loads(model.objects["metrics.json"]["text"])
        assert written["test_accuracy"] >= TARGET, written


def _trained_jobs(kfp_backend: KfpBackend, run_id: str, count: int) -> set[str]:
    """The run SUCCEEDED with `count` models, each from its own job, labelled with the run's id."""
    run = kfp_backend.wait(run_id)
    assert run.state == "SUCCEEDED", f"{run.state} {run.error}\n{kfp_backend.workflow_tail(run_id)}"
    models = _by_type(kfp_backend.artifacts(run_id), "system.Model")
    jobs = {m.properties["job_name"] for m in models}
    assert len(models) == count and len(jobs) == count, [m.properties for m in models]
    for model in models:
        assert model.properties["status"] == "Succeeded", model.properties
    # The run id read from the output URI is the run's own: the jobs carry it as their label.
    labelled = {name.split("/")[-1] for name in run_jobs(kfp_backend, run_id)}
    assert labelled == jobs, (labelled, jobs)
    return jobs


def test_a_placeholder_free_pipeline_of_components_imported_by_name_runs_two_distinct_jobs(
    kfp_backend: KfpBackend, tmp_path: Path
) -> None:
    package = by_name_pipeline(
        tmp_path,
        "by_name",
        """
        @dsl.pipeline(name="by-name-two-trainings")
        def pipeline() -> None:
            data = claim(download_dataset(source="builtin:digits"))
            claim(pytorch_train(dataset=data.outputs["dataset"], workers=0, epochs=5, delete_after="never"))
            claim(pytorch_train(dataset=data.outputs["dataset"], workers=1, epochs=5, delete_after="never"))
    """,
    )
    run_id = kfp_backend.start(package, {}, f"by-name-{uuid.uuid4().hex[:6]}")
    for job in _trained_jobs(kfp_backend, run_id, 2):
        kfp_backend.kubectl("delete", "pytorchjob", job, "--wait=true")


def test_a_parallel_for_over_pytorch_train_gives_each_iteration_its_own_job(
    kfp_backend: KfpBackend, tmp_path: Path
) -> None:
    # The iterations are one task of the DAG (one name, one enclosing DAG id per iteration): each
    # has its own driver, hence its own output URI, hence its own job.
    package = by_name_pipeline(
        tmp_path,
        "loop",
        """
        @dsl.pipeline(name="parallel-for-training")
        def pipeline() -> None:
            data = claim(download_dataset(source="builtin:digits"))
            with dsl.ParallelFor([3, 4]) as epochs:
                claim(pytorch_train(dataset=data.outputs["dataset"], workers=0, epochs=epochs, delete_after="never"))
    """,
    )
    run_id = kfp_backend.start(package, {}, f"loop-{uuid.uuid4().hex[:6]}")
    for job in _trained_jobs(kfp_backend, run_id, 2):
        kfp_backend.kubectl("delete", "pytorchjob", job, "--wait=true")


def _job_pods(kfp_backend: KfpBackend, job: str, field: str = "{.items[*].status.phase}") -> str:
    return kfp_backend.kubectl("get", "pods", "-l", f"training.kubeflow.org/job-name={job}", "-o", f"jsonpath={field}")


def _main_running(kfp_backend: KfpBackend, run_id: str) -> bool:
    """Whether the training step's pod runs its `main` container (kubetrain's launcher is starting)."""
    for pod in launcher_pods(kfp_backend, run_id, "pytorch_train"):
        status = json.loads(kfp_backend.kubectl("get", "pod", pod, "-o", "json"))["status"]
        if any(c["name"] == "main" and "running" in c["state"] for c in status.get("containerStatuses") or []):
            return True
    return False


def _job_phase(kfp_backend: KfpBackend, run_id: str) -> str:
    """The last condition type of the run's PyTorchJob ('' while it has none)."""
    return kfp_backend.kubectl("get", "pytorchjobs", "-l", f"{LABEL_RUN_ID}={run_id}", "-o",
                               "jsonpath={.items[*].status.conditions[-1:].type}").strip()  # fmt: skip


# When to terminate, as the run's own state tells it: the step's launcher starting (nothing
# submitted yet), the job just created, its pods pending, and training. The delete must not depend
# on winning a race. "The job ended, the step uploads its artifacts" is not among them: the step
# deletes a succeeded job within a second, too soon for a poll of the job's phase to catch.
MOMENTS = ("before-submission", "job-created", "pods-pending", "training")
# Once each in CI (time); KUBETRAIN_TERMINATE_REPEATS=N repeats them to look for a flake.
REPEATS = int(os.environ.get("KUBETRAIN_TERMINATE_REPEATS", "1"))


@pytest.mark.parametrize("attempt", range(REPEATS))
@pytest.mark.parametrize("moment", MOMENTS)
def test_terminating_a_run_deletes_its_training_job_at_every_moment_of_the_step(
    kfp_backend: KfpBackend, moment: str, attempt: int
) -> None:
    """Issue 33: terminated 6 s after submission, a run's PyTorchJob trained on to Succeeded. The
    step's container dies within a second of the signal, so kubetrain's reaper (deploy/reaper.yaml,
    a host process here as its ServiceAccount) is what deletes the job: at every moment, every time."""
    package = kfp_runs.REPO_ROOT / "pipelines" / "mnist_pytorch.yaml"
    epochs = 2 if moment == "artifact-upload" else 400
    run_id = kfp_backend.start(package, {"epochs": epochs}, f"terminate-{moment}-{attempt}-{uuid.uuid4().hex[:6]}")
    if moment == "before-submission":
        wait_for("the training step's launcher running", lambda: _main_running(kfp_backend, run_id), 600)
    else:
        wait_for("the PyTorchJob of the run", lambda: run_jobs(kfp_backend, run_id), 600)
    job = run_jobs(kfp_backend, run_id)[0].split("/")[-1] if run_jobs(kfp_backend, run_id) else ""
    if moment == "pods-pending":
        wait_for("a pod of the job", lambda: bool(_job_pods(kfp_backend, job).strip()), 300)
    elif moment == "training":
        wait_for("its master pod running", lambda: "Running" in _job_pods(kfp_backend, job), 300)
    elif moment == "artifact-upload":
        wait_for("the job succeeded", lambda: _job_phase(kfp_backend, run_id) == "Succeeded", 900)
    try:
        kfp_backend.client.terminate_run(run_id)
    except ApiException:
        # Only the last moment may miss its window (the run ended before the call): a finished run
        # cannot be terminated; what follows still holds.
        if moment != "artifact-upload":
            raise
    if moment == "before-submission":
        # A create sent just before the signal may land a moment after it: once the step's container
        # has ended nothing more can come, and the job (if any) must then go.
        wait_for("the training step's launcher ended", lambda: not _main_running(kfp_backend, run_id),
                  GONE_WITHIN_SECONDS)  # fmt: skip
        job = run_jobs(kfp_backend, run_id)[0].split("/")[-1] if run_jobs(kfp_backend, run_id) else ""
    if moment == "artifact-upload":
        # The job had ended: nothing of it may run on (the step deletes it on success, and the
        # reaper leaves a finished job alone).
        wait_for("no pod of the job running",
                  lambda: "Running" not in _job_pods(kfp_backend, job) and "Pending" not in _job_pods(kfp_backend, job),
                  GONE_WITHIN_SECONDS)  # fmt: skip
    else:
        wait_for("the run's job deleted", lambda: not run_jobs(kfp_backend, run_id), GONE_WITHIN_SECONDS)
    if job:
        wait_for("its pods gone",
                  lambda: not _job_pods(kfp_backend, job, "{.items[?(@.status.phase!='Succeeded')].metadata.name}")
                  .strip(), GONE_WITHIN_SECONDS)  # fmt: skip
    run = kfp_backend.wait(run_id, timeout=300)
    ended = {"CANCELED", "FAILED"} | ({"SUCCEEDED"} if moment == "artifact-upload" else set())
    assert run.state in ended, run.state
    if moment != "artifact-upload":
        assert run_jobs(kfp_backend, run_id) == []  # nothing was created after the step ended
    reaper_log = (STATE / "kfp" / "reaper.log").read_text()
    # The real authorizer let it do all it did as its ServiceAccount (deploy/reaper.yaml's Role).
    assert "HTTP 403" not in reaper_log, reaper_log[-3000:]
    if job:
        by_reaper = f"deleted PyTorchJob kubeflow/{job}" in reaper_log
        print(f"{moment} #{attempt}: job {job} deleted by {'the reaper' if by_reaper else 'the step'}")


def test_a_failed_training_job_fails_the_run_with_the_operators_reason_in_the_step_log(
    kfp_backend: KfpBackend, tmp_path: Path
) -> None:
    package = users_pipeline(
        tmp_path,
        "failing",
        """
        @dsl.pipeline(name="failing-training")
        def pipeline() -> None:
            data = claim(download(source="builtin:digits"))
            task = claim(train(dataset=data.outputs["dataset"], **IDS,
                               command=["python", "-c", "import sys; print('exiting 3', flush=True); sys.exit(3)"],
                               backoff_limit=0))
    """,
    )
    run_id = kfp_backend.start(package, {}, f"failing-{uuid.uuid4().hex[:6]}")
    run = kfp_backend.wait(run_id)
    assert run.state == "FAILED", run.state
    log = "\n".join(kfp_backend.step_logs(run_id, "pytorch_train"))
    assert "Failed" in log and "exit" in log.lower(), log[-3000:]


def test_kubetrain_submit_uploads_and_starts_a_run_that_succeeds(kfp_backend: KfpBackend) -> None:
    name = f"submit-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [sys.executable, "-m", "kubetrain", "submit", "mnist_pytorch", "--host", kfp_runs.HOST, "--experiment",
         kfp_runs.EXPERIMENT, "--run-name", name, "--param", "epochs=5", "--json"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    submitted = json.loads(done.stdout.strip().splitlines()[-1])
    run = kfp_backend.wait(submitted["run_id"])
    assert run.state == "SUCCEEDED", f"{run.state} {run.error}\n{kfp_backend.workflow_tail(submitted['run_id'])}"
    assert run.display_name == name


GPU = "nvidia.com/gpu"


@contextlib.contextmanager
def _advertised_gpus(cluster: Cluster, count: int) -> Iterator[None]:
    """The real node advertises `count` GPUs (an extended resource, as a device plugin would) meanwhile.

    It has none: pods that ask for one are scheduled there, get no device, and train on the CPU
    (the programs' `--backend auto` is gloo without CUDA). What is checked is where the request lands.
    """
    path = "/status/{}/" + GPU.replace("/", "~1")
    ops = [{"op": "add", "path": path.format(field), "value": str(count)} for field in ("capacity", "allocatable")]
    cluster.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(ops))
    try:
        yield
    finally:
        ops = [{"op": "remove", "path": path.format(field)} for field in ("capacity", "allocatable")]
        cluster.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(ops))


def test_a_tasks_accelerator_node_selector_tolerations_and_resources_reach_the_training_pods_not_the_launcher_pod(
    kfp_backend: KfpBackend, tmp_path: Path
) -> None:
    # TaskConfig passthrough through the real driver: the settings a user makes on the training
    # task land on the job's pods. The selector and toleration match the real node, so it trains.
    package = users_pipeline(
        tmp_path,
        "placed",
        """
        @dsl.pipeline(name="placed-training")
        def pipeline() -> None:
            data = claim(download(source="builtin:digits"))
            task = claim(train(dataset=data.outputs["dataset"], **IDS,
                               epochs=2, delete_after="never"))
            task.set_cpu_request("150m").set_memory_limit("1536Mi")
            task.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
            kubernetes.add_node_selector(task, label_key="kubetrain.dev/node", label_value="real")
            kubernetes.add_toleration(task, key="kubetrain.dev/placed", operator="Exists", effect="NoSchedule")
    """,
    )
    with _advertised_gpus(kfp_backend.cluster, 8):
        run_id = kfp_backend.start(package, {}, f"placed-{uuid.uuid4().hex[:6]}")
        run = kfp_backend.wait(run_id)
    assert run.state == "SUCCEEDED", f"{run.state} {run.error}\n{kfp_backend.workflow_tail(run_id)}"
    (model,) = _by_type(kfp_backend.artifacts(run_id), "system.Model")
    job = model.properties["job_name"]
    pods = json.loads(kfp_backend.kubectl("get", "pods", "-l", f"training.kubeflow.org/job-name={job}", "-o", "json"))
    assert pods["items"], f"the pods of {job} are gone"
    for pod in pods["items"]:
        spec = pod["spec"]
        assert spec["nodeSelector"].get("kubetrain.dev/node") == "real"
        assert any(t.get("key") == "kubetrain.dev/placed" for t in spec.get("tolerations", []))
        resources = spec["containers"][0]["resources"]
        assert resources["requests"]["cpu"] == "150m" and resources["limits"]["memory"] == "1536Mi", resources
        assert resources["limits"].get(GPU) == "1", resources
    launchers = json.loads(kfp_backend.kubectl("get", "pods", "-l", f"pipeline/runid={run_id}", "-o", "json"))
    checked = 0
    for pod in launchers["items"]:
        main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
        if "pytorch_train" not in main.get("args", []):  # the step itself, not its driver
            continue
        checked += 1
        assert not any(t.get("key") == "kubetrain.dev/placed" for t in pod["spec"].get("tolerations", []))
        assert main.get("resources", {}).get("requests", {}).get("cpu") != "150m", main.get("resources")
        assert GPU not in main.get("resources", {}).get("limits", {}), main.get("resources")
    assert checked, "no launcher pod of the training task was found"
    kfp_backend.kubectl("delete", "pytorchjob", job, "--wait=true")
