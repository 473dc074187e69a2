"""`kubetrain launch` against the real operators, as the non-admin launcher user.

The real training-operator (PyTorchJob), mpi-operator (MPIJob v2beta1) and JobSet controller
reconcile what `kubetrain render` prints; kube-scheduler binds the pods to kwok's fake node,
PodSecurity admission (namespace enforces `restricted`) admits them, kwok's stages run them
(tests/cluster/operators.py) and the real garbage collector removes them. The launcher runs
through its CLI with KUBECONFIG=.cluster/launcher.kubeconfig, as a KFP step would.
Where a test must play the kubelet exactly (a container that crashes past the backoff limit),
the pod carries `kubetrain.dev/sim: manual` and the test writes its status as the admin.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.errors import ExitCode
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from tests.cluster.controlplane import NAMESPACE, Cluster
from tests.cluster.operators import SIM_DURATION, SIM_LABEL

pytestmark = [pytest.mark.timeout(300)]

PLURAL = {
    "PyTorchJob": "pytorchjobs.kubeflow.org",
    "MPIJob": "mpijobs.kubeflow.org",
    "JobSet": "jobsets.jobset.x-k8s.io",
}


def render(kind: str, name: str, *args: str) -> dict[str, Any]:
    """What the components submit: `kubetrain render KIND ... -o yaml`."""
    done = subprocess.run(
        [sys.executable, "-m", "kubetrain", "render", kind, "--name", name, "--namespace", NAMESPACE, *args, "-o", "yaml"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    manifest: dict[str, Any] = yaml.safe_load(done.stdout)
    return manifest


def templates(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod templates by replica name."""
    spec = manifest["spec"]
    if manifest["kind"] == "PyTorchJob":
        return {k: r["template"] for k, r in spec["pytorchReplicaSpecs"].items()}
    if manifest["kind"] == "MPIJob":
        return {k: r["template"] for k, r in spec["mpiReplicaSpecs"].items()}
    return {r["name"]: r["template"]["spec"]["template"] for r in spec["replicatedJobs"]}


def simulate(manifest: dict[str, Any], seconds: float = 2, **per_replica: float | str) -> dict[str, Any]:
    """Set how long kwok keeps each pod Running (`kubetrain.dev/sim-duration`); "manual" hands it to the test."""
    for replica, template in templates(manifest).items():
        how = per_replica.get(replica, seconds)
        meta = template.setdefault("metadata", {})
        if how == "manual":
            meta.setdefault("labels", {})[SIM_LABEL] = "manual"
        else:
            meta.setdefault("annotations", {})[SIM_DURATION] = f"{how}s"
    return manifest


def launch(cluster: Cluster, manifest: dict[str, Any], tmp: Path, *args: str) -> subprocess.Popen[str]:
    path = tmp / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return subprocess.Popen(
        [sys.executable, "-m", "kubetrain", "launch", "-f", str(path), "--json", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "KUBECONFIG": str(cluster.launcher_kubeconfig)},
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> tuple[int, dict[str, Any], str]:
    """The launcher's exit code, its closing JSON object and its stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in out.strip().splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), err


def until(what: str, check: Callable[[], Any], deadline_s: float = 90) -> Any:
    """Wait for `check()` to return something truthy, at most `deadline_s`."""
    end = time.monotonic() + deadline_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < end, f"timed out after {deadline_s:.0f}s waiting for {what}"
        time.sleep(0.25)


def get(cluster: Cluster, resource: str, name: str | None = None, selector: str | None = None) -> Any:
    args = ["get", resource, "-n", NAMESPACE, "-o", "json"]
    if name is not None:
        args += ["--field-selector", f"metadata.name={name}"]
    if selector is not None:
        args += ["-l", selector]
    return json.loads(cluster.kubectl(*args))["items"]


def job_pods(cluster: Cluster, kind: str, name: str) -> list[dict[str, Any]]:
    label = "jobset.sigs.k8s.io/jobset-name" if kind == "JobSet" else "training.kubeflow.org/job-name"
    pods: list[dict[str, Any]] = get(cluster, "pods", selector=f"{label}={name}")
    return pods


def gone(cluster: Cluster, kind: str, name: str) -> bool:
    return not get(cluster, PLURAL[kind], name) and not job_pods(cluster, kind, name)


CASES = {
    "pytorch-master-workers": ("pytorchjob", ("--workers", "2")),
    "pytorch-elastic": ("pytorchjob", ("--workers", "2", "--elastic", "1:3")),
    "mpijob": ("mpijob", ("--workers", "2")),
    "ps-jobset": ("psjob", ("--workers", "2", "--ps", "1")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_real_operator_runs_the_job_to_success(cluster: Cluster, tmp_path: Path, case: str) -> None:
    kind, args = CASES[case]
    name = f"ok-{case}"[:40]
    manifest = simulate(render(kind, name, *args))
    code, result, err = finish(launch(cluster, manifest, tmp_path, "--timeout", "150"))
    assert code == ExitCode.SUCCESS, err[-4000:]
    assert result.get("phase") == "Succeeded", result
    until(f"{name} and its pods deleted", lambda: gone(cluster, manifest["kind"], name))


# Which replica crashes, and the label its pods carry.
CRASHES = {
    "pytorchjob": ("Worker", "training.kubeflow.org/replica-type", "worker"),
    "mpijob": ("Launcher", "training.kubeflow.org/job-role", "launcher"),
}


@pytest.mark.parametrize("kind", sorted(CRASHES))
def test_a_crashing_pod_fails_the_job_with_the_operators_message(cluster: Cluster, tmp_path: Path, kind: str) -> None:
    """A container crashes past the backoff limit under restartPolicy OnFailure (the test plays its kubelet).

    PyTorchJob: the training-operator counts the worker's restarts. MPIJob: the launcher is a
    batch Job, whose controller counts them; the mpi-operator reports the Job's failure.
    """
    replica, label, value = CRASHES[kind]
    name = f"fail-{kind}"
    manifest = simulate(render(kind, name, "--workers", "1"), seconds=600, **{replica: "manual"})
    limit = int(manifest["spec"]["runPolicy"]["backoffLimit"])
    proc = launch(cluster, manifest, tmp_path, "--timeout", "150", "--delete-after", "always")
    pod = until(f"the {replica} pod scheduled", lambda: [
        p for p in job_pods(cluster, manifest["kind"], name)
        if p["metadata"]["labels"].get(label) == value and p["spec"].get("nodeName")
    ])[0]  # fmt: skip
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    crash = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}}
    status = {"status": {"phase": "Running", "containerStatuses": [{
        "name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": limit + 1,
        "started": False, "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": crash,
    } for c in pod["spec"]["containers"]]}}  # fmt: skip
    cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--subresource=status",
                    "--type=merge", "-p", json.dumps(status))  # fmt: skip
    code, result, err = finish(proc)
    assert code == ExitCode.JOB_FAILED, err[-4000:]
    text = json.dumps(result) + err
    assert "backoff limit" in text.lower(), text[-4000:]  # the operator's (or Job controller's) message
    assert pod["metadata"]["name"] in text, f"the failed pod is not named:\n{text[-4000:]}"
    until(f"{name} and its pods deleted", lambda: gone(cluster, manifest["kind"], name))


def test_timeout_deletes_the_job_and_the_garbage_collector_its_pods(cluster: Cluster, tmp_path: Path) -> None:
    name = "timeout-mpijob"
    manifest = simulate(render("mpijob", name, "--workers", "2"), seconds=600)
    code, _, err = finish(launch(cluster, manifest, tmp_path, "--timeout", "8"))
    assert code == ExitCode.TIMEOUT, err[-4000:]
    until(f"{name} and its pods deleted", lambda: gone(cluster, "MPIJob", name))


def test_sigterm_deletes_the_job_and_exits_5(cluster: Cluster, tmp_path: Path) -> None:
    name = "sigterm-jobset"
    manifest = simulate(render("psjob", name, "--workers", "1", "--ps", "1"), seconds=600)
    proc = launch(cluster, manifest, tmp_path, "--timeout", "150")
    until("the JobSet's pods Running", lambda: any(
        p["status"].get("phase") == "Running" for p in job_pods(cluster, "JobSet", name)))  # fmt: skip
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc, timeout=60)
    assert code == ExitCode.CANCELLED, err[-4000:]
    until(f"{name} and its pods deleted", lambda: gone(cluster, "JobSet", name))


@pytest.mark.parametrize("kind", ["pytorchjob", "psjob"])
def test_a_rerun_adopts_the_running_job(cluster: Cluster, tmp_path: Path, kind: str) -> None:
    name = f"adopt-{kind}"
    manifest = simulate(render(kind, name, "--workers", "1", *(("--ps", "1") if kind == "psjob" else ())), seconds=8)
    # The KFP run and task labels the components set: they make the existing job this task's.
    # (`kubetrain render` prints none, and without them a re-run is refused with exit 2.)
    manifest["metadata"]["labels"].update({LABEL_RUN_ID: "run-1", LABEL_TASK_ID: "task-1"})
    plural = PLURAL[manifest["kind"]]
    first = launch(cluster, manifest, tmp_path, "--timeout", "150")
    uid = until("the job created", lambda: [j["metadata"]["uid"] for j in get(cluster, plural, name)])[0]
    second = launch(cluster, manifest, tmp_path, "--timeout", "150")
    code2, result2, err2 = finish(second)
    code1, _, err1 = finish(first)
    assert code1 == ExitCode.SUCCESS, err1[-4000:]
    assert code2 == ExitCode.SUCCESS, err2[-4000:]
    assert "adopted existing" in err2, err2[-4000:]
    assert result2["uid"] == uid
    until(f"{name} and its pods deleted", lambda: gone(cluster, manifest["kind"], name))


@pytest.mark.parametrize("kind", ["pytorchjob", "psjob"])
def test_timeout_can_suspend_instead(cluster: Cluster, tmp_path: Path, kind: str) -> None:
    """`--on-timeout suspend`: the job stays, suspended, and its controllers remove the pods."""
    name = f"suspend-{kind}"
    manifest = simulate(render(kind, name, "--workers", "1", *(("--ps", "1") if kind == "psjob" else ())), seconds=600)
    code, _, err = finish(launch(cluster, manifest, tmp_path, "--timeout", "8", "--on-timeout", "suspend"))
    assert code == ExitCode.TIMEOUT, err[-4000:]
    plural = PLURAL[manifest["kind"]]
    job = get(cluster, plural, name)[0]
    suspended = job["spec"]["runPolicy"].get("suspend") if kind == "pytorchjob" else job["spec"].get("suspend")
    assert suspended is True, job["spec"]
    until(f"{name}'s pods deleted", lambda: not job_pods(cluster, manifest["kind"], name))
    cluster.kubectl("delete", plural, name, "-n", NAMESPACE, "--wait=true")
