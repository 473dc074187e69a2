"""Pods in the fake API server (tests/fake_apiserver.py; a stand-in, not a cluster).

`make_pod` builds a pod as an operator and the kubelet leave it, for the scripts that play them;
`pod_problems` is what the stand-in refuses to hold (a pod no API server would serve).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubetrain.manifests.kinds import JobKind

Obj = dict[str, Any]


def now_rfc3339() -> str:
    """The current time as the API server writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def container_restarts(pod: Obj | None, container: str) -> int:
    """The restart count of a pod's container (0 when unknown)."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == container:
            return int(cs.get("restartCount") or 0)
    return 0


POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def pod_problems(pod: Obj) -> list[str]:
    """What makes `pod` unlike a pod the API server holds (empty: nothing)."""
    problems = []
    meta = pod.get("metadata") or {}
    if pod.get("apiVersion") != "v1" or pod.get("kind") != "Pod":
        problems.append(f"apiVersion/kind {pod.get('apiVersion')}/{pod.get('kind')}, not v1/Pod")
    if not meta.get("name") or not meta.get("namespace"):
        problems.append("metadata.name and metadata.namespace are required")
    if not isinstance(meta.get("labels") or {}, dict):
        problems.append("metadata.labels must be a map")
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or ()]
    if not names or not all(names) or len(set(names)) != len(names):
        problems.append(f"spec.containers need unique names, got {names}")
    status = pod.get("status") or {}
    if status.get("phase") not in POD_PHASES:
        problems.append(f"status.phase {status.get('phase')!r} is not one of {', '.join(POD_PHASES)}")
    for cs in status.get("containerStatuses") or ():
        if cs.get("name") not in names:
            problems.append(f"a status for container {cs.get('name')!r}, which the pod does not have")
        if int(cs.get("restartCount") or 0) < 0:
            problems.append("restartCount < 0")
    return problems


def make_pod(job: str, namespace: str, *, kind: JobKind, replica_type: str, index: int = 0, phase: str = "Pending",
             container: str = "pytorch", waiting: str | None = None, waiting_message: str = "",
             exit_code: int | None = None, restarts: int = 0, last_exit_code: int | None = None,
             sidecar: bool = False, unschedulable: str | None = None, pod_name: str | None = None) -> Obj:  # fmt: skip
    """A pod as an operator (and the kubelet) would leave it, labelled for `kind`."""
    if kind.plural in ("jobsets", "trainjobs"):  # a TrainJob's pods are its JobSet's
        labels = {"jobset.sigs.k8s.io/jobset-name": job, "jobset.sigs.k8s.io/replicatedjob-name": replica_type,
                  "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(index)}  # fmt: skip
        name = pod_name or f"{job}-{replica_type}-0-{index}-abcde"
    else:
        labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": replica_type.lower(),
                  "training.kubeflow.org/replica-index": str(index),
                  "training.kubeflow.org/job-role": replica_type.lower()}  # fmt: skip
        name = pod_name or f"{job}-{replica_type.lower()}-{index}"
    containers = [{"name": container, "image": "example.com/train:1"}]
    if sidecar:
        containers.append({"name": "istio-proxy", "image": "istio/proxyv2"})
    state: Obj
    if waiting:
        state = {"waiting": {"reason": waiting, "message": waiting_message}}
    elif phase in ("Succeeded", "Failed"):
        code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
        state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
    elif phase == "Running":
        state = {"running": {"startedAt": now_rfc3339()}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    cstatus: Obj = {"name": container, "state": state, "restartCount": restarts, "ready": phase == "Running",
                    "image": "example.com/train:1", "imageID": ""}  # fmt: skip
    if last_exit_code is not None:
        cstatus["lastState"] = {"terminated": {"exitCode": last_exit_code, "reason": "Error"}}
    status: Obj = {"phase": phase, "containerStatuses": [cstatus]}
    if unschedulable:
        status = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                      "reason": "Unschedulable", "message": unschedulable}]}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": containers}, "status": status}  # fmt: skip
