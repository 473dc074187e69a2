"""`kubetrain launch` against the real operators, as the non-admin launcher user.

The real training-operator (PyTorchJob), mpi-operator (MPIJob v2beta1), JobSet controller and
Kubeflow Trainer v2 controller (TrainJob, on Trainer's torch-distributed runtime and kubetrain's
MPI runtime) reconcile what `kubetrain render` prints; kube-scheduler binds the pods to kwok's
fake node, PodSecurity admission (the namespace enforces `restricted`) admits them, kwok's stages
run them (tools/cluster/operators.py) and the real garbage collector removes them. The launcher
runs through its CLI with KUBECONFIG=.cluster/launcher.kubeconfig, as a KFP step would. Where a
test must play the kubelet exactly (a container that crashes past the backoff limit), the pod
carries `kubetrain.dev/sim: manual` and the test writes its status as the admin.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kubetrain.errors import ExitCode
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from tests.cluster.jobs import KINDS, crash, finish, gone, job_pods, launch, render, simulate, until
from tools.cluster.controlplane import NAMESPACE, Cluster, ControlPlaneError

pytestmark = [pytest.mark.timeout(300)]


@pytest.mark.parametrize("case", sorted(KINDS))
def test_the_real_operator_runs_the_job_to_success(cluster: Cluster, tmp_path: Path, case: str) -> None:
    kind = KINDS[case]
    name = f"ok-{case}"
    manifest = simulate(render(kind, name))
    code, result, err = finish(launch(cluster, manifest, tmp_path, "--timeout", "150"))
    assert code == ExitCode.SUCCESS, err[-4000:]
    assert result.get("phase") == "Succeeded", result
    until(f"{name} and its pods deleted", lambda: gone(cluster, kind, name))


def _backoff_limit(cluster: Cluster, manifest: dict[str, Any], pod: dict[str, Any]) -> int | None:
    """The restarts after which the pod's controller gives up: its batch Job's, or the job's run policy.

    None when the pod's Job went since the listing (a JobSet recreating its jobs): so did the pod.
    """
    owner: dict[str, Any] = next(iter(pod["metadata"].get("ownerReferences") or ()), {})
    if owner.get("kind") == "Job":
        try:
            job = json.loads(cluster.kubectl("get", "job", owner["name"], "-n", NAMESPACE, "-o", "json"))
        except ControlPlaneError as e:
            if "(NotFound)" not in str(e):
                raise
            return None
        return int(job["spec"].get("backoffLimit", 6))
    return int(manifest["spec"]["runPolicy"]["backoffLimit"])


def _failed_condition(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    job = json.loads(cluster.kubectl("get", plural, name, "-n", NAMESPACE, "-o", "json"))
    return next(c for c in job["status"]["conditions"] if c["type"] == "Failed" and c["status"] == "True")


@pytest.mark.parametrize("case", ["mpijob", "psjob", "pytorch", "trainjob-mpi", "trainjob-torch"])
def test_a_crashing_pod_fails_the_job_with_the_operators_message(cluster: Cluster, tmp_path: Path, case: str) -> None:
    """A container crashes past its backoff limit under restartPolicy OnFailure (the test plays its kubelet).

    PyTorchJob: the training-operator counts the worker's restarts. MPIJob launcher, JobSet and
    TrainJob pods: their batch Job's controller counts them; a JobSet recreates its jobs up to its
    `maxRestarts`, so every new pod of the replica crashes too, as a broken program would.
    """
    kind = KINDS[case]
    name = f"fail-{case}"
    manifest = simulate(render(kind, name), seconds=600, **{kind.crash_replica: "manual"})
    proc = launch(cluster, manifest, tmp_path, "--timeout", "170", "--delete-after", "never")
    label, value = kind.crash_label
    crashed: list[str] = []
    end = time.monotonic() + 170
    while proc.poll() is None:
        assert time.monotonic() < end, "the launcher did not end"
        for pod in job_pods(cluster, kind.kind, name):
            meta = pod["metadata"]
            if (
                meta["labels"].get(label) == value
                and pod["spec"].get("nodeName")
                and meta["name"] not in crashed
                and ("deletionTimestamp" not in meta)
            ):
                limit = _backoff_limit(cluster, manifest, pod)
                if limit is not None and crash(cluster, pod, limit + 1):
                    crashed.append(meta["name"])
        time.sleep(1)  # each pass is a kubectl call: 0.12 CPU-seconds
    code, result, err = finish(proc)
    assert code == ExitCode.JOB_FAILED, err[-4000:]
    text = json.dumps(result) + err
    condition = _failed_condition(cluster, kind.plural, name)
    assert condition["message"] in text, f"the operator's message {condition['message']!r} is not reported"
    assert any(pod in text for pod in crashed), f"none of the failed pods {crashed} is named:\n{text[-4000:]}"
    cluster.kubectl("delete", kind.plural, name, "-n", NAMESPACE, "--wait=true")
    until(f"{name} and its pods deleted", lambda: gone(cluster, kind, name))


@pytest.mark.parametrize("case", sorted(KINDS))
def test_timeout_deletes_the_job_and_the_garbage_collector_its_pods(
    cluster: Cluster, tmp_path: Path, case: str
) -> None:
    kind = KINDS[case]
    name = f"timeout-{case}"
    manifest = simulate(render(kind, name), seconds=600)
    code, _, err = finish(launch(cluster, manifest, tmp_path, "--timeout", "8"))
    assert code == ExitCode.TIMEOUT, err[-4000:]
    until(f"{name} and its pods deleted", lambda: gone(cluster, kind, name))


@pytest.mark.parametrize("case", sorted(KINDS))
def test_sigterm_deletes_the_job_and_exits_5(cluster: Cluster, tmp_path: Path, case: str) -> None:
    kind = KINDS[case]
    name = f"sigterm-{case}"
    manifest = simulate(render(kind, name), seconds=600)
    proc = launch(cluster, manifest, tmp_path, "--timeout", "150")
    until(f"a pod of {name} Running", lambda: any(
        p["status"].get("phase") == "Running" for p in job_pods(cluster, kind.kind, name)))  # fmt: skip
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc, timeout=60)
    assert code == ExitCode.CANCELLED, err[-4000:]
    until(f"{name} and its pods deleted", lambda: gone(cluster, kind, name))


@pytest.mark.parametrize("case", sorted(KINDS))
def test_a_rerun_adopts_the_running_job(cluster: Cluster, tmp_path: Path, case: str) -> None:
    kind = KINDS[case]
    name = f"adopt-{case}"
    manifest = simulate(render(kind, name), seconds=8)
    # The KFP run and task labels the components set: they make the existing job this task's.
    # (`kubetrain render` sets them from --run-id and --task-id; here one run and task for this test.)
    manifest["metadata"]["labels"].update({LABEL_RUN_ID: "run-1", LABEL_TASK_ID: "task-1"})
    first = launch(cluster, manifest, tmp_path, "--timeout", "150")
    uid = until("the job created", lambda: [
        j["metadata"]["uid"] for j in json.loads(cluster.kubectl(
            "get", kind.plural, "-n", NAMESPACE, "--field-selector", f"metadata.name={name}", "-o", "json"))["items"]
    ])[0]  # fmt: skip
    second = launch(cluster, manifest, tmp_path, "--timeout", "150")
    code2, result2, err2 = finish(second)
    code1, _, err1 = finish(first)
    assert code1 == ExitCode.SUCCESS, err1[-4000:]
    assert code2 == ExitCode.SUCCESS, err2[-4000:]
    assert "adopted existing" in err2, err2[-4000:]
    assert result2["uid"] == uid
    until(f"{name} and its pods deleted", lambda: gone(cluster, kind, name))


@pytest.mark.parametrize("case", ["psjob", "pytorch", "trainjob-torch"])
def test_timeout_can_suspend_instead(cluster: Cluster, tmp_path: Path, case: str) -> None:
    """`--on-timeout suspend`: the job stays, suspended, and its controllers remove the pods."""
    kind = KINDS[case]
    name = f"suspend-{case}"
    manifest = simulate(render(kind, name), seconds=600)
    code, _, err = finish(launch(cluster, manifest, tmp_path, "--timeout", "8", "--on-timeout", "suspend"))
    assert code == ExitCode.TIMEOUT, err[-4000:]
    job = json.loads(cluster.kubectl("get", kind.plural, name, "-n", NAMESPACE, "-o", "json"))
    spec = job["spec"]
    suspended = spec["runPolicy"].get("suspend") if kind.kind == "PyTorchJob" else spec.get("suspend")
    assert suspended is True, spec
    until(f"{name}'s pods deleted", lambda: not job_pods(cluster, kind.kind, name))
    cluster.kubectl("delete", kind.plural, name, "-n", NAMESPACE, "--wait=true")
