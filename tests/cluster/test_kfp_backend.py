"""The compiled pipelines on the real Kubeflow Pipelines 2.17 backend, through `kfp.Client` as a user would.

The backend (tools/cluster/kfp/backend.py) runs on the e2e cluster's real node: KFP's API server,
persistence agent, driver and launcher, Argo's workflow-controller and executor, ML Metadata, an S3
store. A run's steps are pods in namespace `kubeflow` (kubetrain's launcher image, as the
committed YAML names it); the training jobs they create are run by the real operators in real pods.
What a run produced is read as the Kubeflow UI reads it: the run's artifacts in ML Metadata, their
objects in the store (tests/cluster/kfp_runs.py). The runs go side by side (tests/cluster/concurrent.py).

The shipped pipelines' runs and a user's pipeline of loaded components are started and read in
the browser scenarios (test_kfp_ui.py), which check what these checked through `kfp.Client` and
what the page shows; terminating a run is test_kfp_terminate.py, retries test_kfp_retry.py.
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubetrain.names import LABEL_RUN_ID
from kubetrain.presets import image_ref
from tests.cluster import kfp_runs, preemption
from tests.cluster.concurrent import Scenarios, scenarios
from tests.cluster.kfp_pipelines import (
    by_name_pipeline,
    run_jobs,
    users_pipeline,
    wait_for,
)
from tests.cluster.kfp_runs import Artifact, KfpBackend
from tools.cluster.controlplane import STATE, Cluster
from tools.cluster.node_config import NODE_NAME

pytestmark = pytest.mark.timeout(2400)


@pytest.fixture(scope="module")
def kfp_backend(cluster: Cluster) -> KfpBackend:
    """The backend, with every kubetrain image built and pushed."""
    return kfp_runs.prepare(cluster, ["launcher", "pytorch", "chainermn", "ps"])


@pytest.fixture(scope="module")
def started(kfp_backend: KfpBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenarios]:
    """Every run of this module, side by side from its start (tests/cluster/concurrent.py)."""
    with scenarios() as running:
        for name, scenario in SCENARIOS.items():
            running.start(name, functools.partial(scenario, kfp_backend, tmp_path_factory.mktemp(name)))
        yield running


def _by_type(artifacts: list[Artifact], kind: str) -> list[Artifact]:
    return [a for a in artifacts if a.type == kind]


@pytest.mark.parametrize("package", kfp_runs.compiled_pipelines() + kfp_runs.compiled_components(),
                         ids=kfp_runs.package_name)  # fmt: skip
def test_every_compiled_pipeline_and_component_uploads(kfp_backend: KfpBackend, package: Path) -> None:
    # The call the UI's upload makes; a refused YAML raises with the server's own message.
    name = f"{kfp_runs.package_name(package)}-{uuid.uuid4().hex[:8]}"
    uploaded = kfp_backend.client.upload_pipeline(str(package), pipeline_name=name)
    versions = kfp_backend.client.list_pipeline_versions(uploaded.pipeline_id).pipeline_versions
    assert [v.display_name for v in versions] == [name]
    spec = versions[0].pipeline_spec
    spec = spec.get("pipeline_spec", spec)  # with a platform spec beside it, the server nests both
    assert spec["pipelineInfo"]["name"] == kfp_runs.pipeline_name(package)
    kfp_backend.client.delete_pipeline_version(uploaded.pipeline_id, versions[0].pipeline_version_id)
    kfp_backend.client.delete_pipeline(uploaded.pipeline_id)


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


def _placeholder_free_pipeline_by_name(kfp_backend: KfpBackend, tmp_path: Path) -> None:
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


def _parallel_for_over_pytorch_train(kfp_backend: KfpBackend, tmp_path: Path) -> None:
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


def _failed_training_job(kfp_backend: KfpBackend, tmp_path: Path) -> None:
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


def _kubetrain_submit(kfp_backend: KfpBackend, tmp_path: Path) -> None:
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
def _advertised(cluster: Cluster, resource: str, count: int) -> Iterator[None]:
    """The real node advertises `count` of an extended `resource` (as a device plugin would) meanwhile."""
    path = "/status/{}/" + resource.replace("/", "~1")
    ops = [{"op": "add", "path": path.format(field), "value": str(count)} for field in ("capacity", "allocatable")]
    cluster.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(ops))
    try:
        yield
    finally:
        ops = [{"op": "remove", "path": path.format(field)} for field in ("capacity", "allocatable")]
        cluster.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(ops))


def _advertised_gpus(cluster: Cluster, count: int) -> contextlib.AbstractContextManager[None]:
    """The real node advertises `count` GPUs meanwhile.

    It has none: pods that ask for one are scheduled there, get no device, and train on the CPU
    (the programs' `--backend auto` is gloo without CUDA). What is checked is where the request lands.
    """
    return _advertised(cluster, GPU, count)


def _accelerator_and_placement(kfp_backend: KfpBackend, tmp_path: Path) -> None:
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


GROW_SLOT = "kubetrain.io/e2e-grow-slot"


def _elastic_ps_train_grows(kfp_backend: KfpBackend, tmp_path: Path) -> None:
    # The node has 3 of a resource only this run's workers ask for (one each, as the task's
    # accelerator: ps_train gives it to the workers only), and a higher-priority pod holds 2: one
    # worker is placed, two wait Pending. Once the first trains, the blocker goes; the two are
    # placed, join, and their work counts.
    package = by_name_pipeline(
        tmp_path,
        "elastic",
        f"""
        from kubetrain.components import ps_train

        @dsl.pipeline(name="elastic-ps")
        def pipeline() -> None:
            data = claim(download_dataset(source="builtin:digits"))
            task = claim(ps_train(dataset=data.outputs["dataset"], min_workers=1, max_workers=3, epochs=30,
                                  delete_after="never"))
            task.set_accelerator_type("{GROW_SLOT}").set_accelerator_limit(1)
    """,
    )
    with _advertised(kfp_backend.cluster, GROW_SLOT, 3):
        blocker = preemption.online_pod_manifest("grow-blocker", image=image_ref("launcher"), resource=GROW_SLOT,
                                                 count=2)  # fmt: skip
        preemption.ensure_online_class(kfp_backend.cluster)
        kfp_backend.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(blocker))
        run_id = kfp_backend.start(package, {}, f"elastic-{uuid.uuid4().hex[:6]}")

        def run_jobset() -> str:
            # The launcher labels every job with its run (run_jobs lists the PyTorchJobs only).
            found = kfp_backend.kubectl("get", "jobsets", "-l", f"{LABEL_RUN_ID}={run_id}", "-o", "name").split()
            return found[0].split("/")[-1] if found else ""

        def one_placed_two_waiting() -> bool:
            name = run_jobset()
            if not name:
                return False
            label = f"jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name=worker"
            pods = json.loads(kfp_backend.kubectl("get", "pods", "-l", label, "-o", "json"))["items"]
            phases = sorted(p["status"].get("phase", "") for p in pods)
            state = STATE / "node" / "workspace-kubeflow" / "runs" / name / "output" / "ps-state" / "master_state.json"
            try:
                done = json.loads(state.read_text())["book"]["counters"].get("tasks_done", 0)
            except (OSError, ValueError, KeyError):
                done = 0
            return phases == ["Pending", "Pending", "Running"] and done >= 5

        wait_for("one worker training, two Pending", one_placed_two_waiting, 600)
        name = run_jobset()
        kfp_backend.kubectl("delete", "pod", "grow-blocker", "--wait=false")
        run = kfp_backend.wait(run_id)
    assert run.state == "SUCCEEDED", f"{run.state} {run.error}\n{kfp_backend.workflow_tail(run_id)}"
    (metrics,) = _by_type(kfp_backend.artifacts(run_id), "system.Metrics")
    assert metrics.properties["max_workers_seen"] == 3, metrics.properties
    log = "\n".join(kfp_backend.step_logs(run_id, "ps_train"))
    assert "grew to 3 workers" in log, log[-3000:]
    kfp_backend.kubectl("delete", "jobset", name, "--wait=true")


SCENARIOS = {
    "by-name": _placeholder_free_pipeline_by_name,
    "parallel-for": _parallel_for_over_pytorch_train,
    "failed-job": _failed_training_job,
    "submit": _kubetrain_submit,
    "placement": _accelerator_and_placement,
    "elastic-grow": _elastic_ps_train_grows,
}


def test_a_placeholder_free_pipeline_of_components_imported_by_name_runs_two_distinct_jobs(
    started: Scenarios,
) -> None:
    started.result("by-name")


def test_a_parallel_for_over_pytorch_train_gives_each_iteration_its_own_job(started: Scenarios) -> None:
    started.result("parallel-for")


def test_a_failed_training_job_fails_the_run_with_the_operators_reason_in_the_step_log(started: Scenarios) -> None:
    started.result("failed-job")


def test_kubetrain_submit_uploads_and_starts_a_run_that_succeeds(started: Scenarios) -> None:
    started.result("submit")


def test_a_tasks_accelerator_node_selector_tolerations_and_resources_reach_the_training_pods_not_the_launcher_pod(
    started: Scenarios,
) -> None:
    started.result("placement")


def test_an_elastic_ps_train_step_grows_from_one_to_three_workers_when_room_appears(started: Scenarios) -> None:
    started.result("elastic-grow")
