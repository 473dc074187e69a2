"""Helpers of the real-control-plane scenarios: render what the components submit, drive kwok, launch.

Every job kind the launcher supports, as `kubetrain render` prints it, with where its pod templates
are, how its pods are labelled, and which replica a crash scenario fails. TrainJob pod templates
live in the runtime patch kubetrain owns (the Trainer merges it into the runtime's JobSet).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.cluster.controlplane import NAMESPACE, Cluster, ControlPlaneError
from tools.cluster.stages import SIM_DURATION, SIM_LABEL

Manifest = dict[str, Any]
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
TRAINING_JOB_LABEL = "training.kubeflow.org/job-name"


@dataclass(frozen=True)
class Kind:
    """One job kind as a scenario uses it."""

    render: tuple[str, ...]  # `kubetrain render` arguments after --name
    plural: str  # resource.group, for kubectl
    crash_replica: str  # the replica a crash scenario fails
    crash_label: tuple[str, str]  # the pod label that tells that replica's pods apart

    @property
    def kind(self) -> str:
        """The job object's kind."""
        return {"pytorchjob": "PyTorchJob", "mpijob": "MPIJob", "psjob": "JobSet", "trainjob": "TrainJob"}[
            self.render[0]
        ]


_REPLICA_TYPE = "training.kubeflow.org/replica-type"
_RJOB = "jobset.sigs.k8s.io/replicatedjob-name"
KINDS: dict[str, Kind] = {
    "pytorch": Kind(("pytorchjob", "--workers", "1"), "pytorchjobs.kubeflow.org", "Worker", (_REPLICA_TYPE, "worker")),
    "pytorch-elastic": Kind(
        ("pytorchjob", "--workers", "2", "--elastic", "1:3"),
        "pytorchjobs.kubeflow.org",
        "Worker",
        (_REPLICA_TYPE, "worker"),
    ),
    "mpijob": Kind(
        ("mpijob", "--workers", "2"), "mpijobs.kubeflow.org", "Launcher", ("training.kubeflow.org/job-role", "launcher")
    ),
    "psjob": Kind(("psjob", "--workers", "2", "--ps", "1"), "jobsets.jobset.x-k8s.io", "master", (_RJOB, "master")),
    "trainjob-torch": Kind(("trainjob", "--workers", "1"), "trainjobs.trainer.kubeflow.org", "node", (_RJOB, "node")),
    "trainjob-mpi": Kind(
        ("trainjob", "--framework", "chainermn", "--workers", "2"),
        "trainjobs.trainer.kubeflow.org",
        "launcher",
        (_RJOB, "launcher"),
    ),
}


def render(kind: Kind, name: str, namespace: str = NAMESPACE) -> Manifest:
    """What the components submit: `kubetrain render KIND ... -o yaml`, in the e2e namespace by default."""
    done = subprocess.run(
        [sys.executable, "-m", "kubetrain", "render", kind.render[0], "--name", name, "--namespace", namespace,
         *kind.render[1:], "-o", "yaml"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    manifest: Manifest = yaml.safe_load(done.stdout)
    return manifest


def templates(manifest: Manifest) -> dict[str, Manifest]:
    """The pod templates by replica name (for a TrainJob: those of its runtime patch)."""
    spec = manifest["spec"]
    if manifest["kind"] == "PyTorchJob":
        return {k: r["template"] for k, r in spec["pytorchReplicaSpecs"].items()}
    if manifest["kind"] == "MPIJob":
        return {k: r["template"] for k, r in spec["mpiReplicaSpecs"].items()}
    if manifest["kind"] == "TrainJob":
        found: dict[str, Manifest] = {}
        for patch in spec.get("runtimePatches") or ():
            for rjob in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                found[rjob["name"]] = rjob["template"]["spec"]["template"]
        return found
    return {r["name"]: r["template"]["spec"]["template"] for r in spec["replicatedJobs"]}


def simulate(manifest: Manifest, seconds: float = 2, **per_replica: float | str) -> Manifest:
    """Set how long kwok keeps each pod Running (`kubetrain.dev/sim-duration`); "manual" hands it to the test.

    MPI TrainJob nodes run sshd until the job ends, as MPIJob workers do: they stay Running.
    """
    if manifest["kind"] == "TrainJob" and "launcher" in templates(manifest):
        per_replica.setdefault("node", 3600)
    for replica, template in templates(manifest).items():
        how = per_replica.get(replica, seconds)
        meta = template.setdefault("metadata", {})
        if how == "manual":
            meta.setdefault("labels", {})[SIM_LABEL] = "manual"
        else:
            meta.setdefault("annotations", {})[SIM_DURATION] = f"{how}s"
    return manifest


def launch(cluster: Cluster, manifest: Manifest, tmp: Path, *args: str) -> subprocess.Popen[str]:
    """`kubetrain launch -f MANIFEST --json ARGS` as the non-admin launcher user."""
    path = tmp / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return subprocess.Popen(
        [sys.executable, "-m", "kubetrain", "launch", "-f", str(path), "--json", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "KUBECONFIG": str(cluster.launcher_kubeconfig)},
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> tuple[int, Manifest, str]:
    """The launcher's exit code, its closing JSON object and its stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in out.strip().splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), err


POLL_CAP_S = 2.0


def until(what: str, check: Callable[[], Any], deadline_s: float = 90) -> Any:
    """Wait for `check()` to return something truthy, at most `deadline_s`."""
    end = time.monotonic() + deadline_s
    pause = 0.25
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < end, f"timed out after {deadline_s:.0f}s waiting for {what}"
        time.sleep(pause)
        # A check is a kubectl call or two, about 0.12 CPU-seconds each: polled every 0.25 s, one
        # waiting scenario took a third of a core from the node it waits on. Quick at first, for
        # what is there at once; then at most every POLL_CAP_S.
        pause = min(pause * 2, POLL_CAP_S)


def get(cluster: Cluster, resource: str, name: str | None = None, selector: str | None = None) -> Any:
    """The items of `kubectl get RESOURCE -n NAMESPACE` (by name or label selector), as the admin."""
    args = ["get", resource, "-n", NAMESPACE, "-o", "json"]
    if name is not None:
        args += ["--field-selector", f"metadata.name={name}"]
    if selector is not None:
        args += ["-l", selector]
    return json.loads(cluster.kubectl(*args))["items"]


def job_pods(cluster: Cluster, kind: str, name: str) -> list[Manifest]:
    """The pods of a job: operator-labelled (v1, MPIJob) or labelled by the JobSet (JobSet, TrainJob)."""
    label = JOBSET_NAME_LABEL if kind in ("JobSet", "TrainJob") else TRAINING_JOB_LABEL
    pods: list[Manifest] = get(cluster, "pods", selector=f"{label}={name}")
    return pods


def gone(cluster: Cluster, kind: Kind, name: str) -> bool:
    """The job and every pod of it are deleted."""
    return not get(cluster, kind.plural, name) and not job_pods(cluster, kind.kind, name)


def crash(cluster: Cluster, pod: Manifest, restarts: int) -> bool:
    """Play the kubelet: every container of `pod` crashed `restarts` times and is in CrashLoopBackOff.

    False when the pod is already gone: its controller may delete it between the listing that
    found it and this patch (a JobSet recreating its jobs, a loaded machine), and a replacement
    is then for the caller's next listing.
    """
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    last = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}}
    if pod["spec"].get("restartPolicy") == "Never":
        # No restart in place (the PS master's pods, for their podFailurePolicy): the pod fails, and
        # its Job counts it and makes the next one, which the caller crashes in turn.
        status = {"status": {"phase": "Failed", "containerStatuses": [{
            "name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
            "started": False, "state": last,
        } for c in pod["spec"]["containers"]]}}  # fmt: skip
    else:
        status = {"status": {"phase": "Running", "containerStatuses": [{
            "name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": restarts,
            "started": False, "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": last,
        } for c in pod["spec"]["containers"]]}}  # fmt: skip
    try:
        cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--subresource=status",
                        "--type=merge", "-p", json.dumps(status))  # fmt: skip
    except ControlPlaneError as e:
        if "(NotFound)" in str(e):
            return False
        raise
    return True
