"""Reading pods and events of a job from raw API objects (JSON dicts).

Pods are found by the label the operator puts on them (`training.kubeflow.org/job-name` for
PyTorchJob and MPIJob, `jobset.sigs.k8s.io/jobset-name` for JobSet). A pod's "reason" is what a
person needs to see: why it is pending (Unschedulable, ImagePullBackOff, ContainerCreating), why
its container is waiting (CrashLoopBackOff) or why it ended (OOMKilled, Error, Evicted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubetrain.backends.base import EventInfo, JobRef, PodInfo
from kubetrain.manifests.kinds import JOBSET, MPI_CONTAINER, PS_CONTAINER, PYTORCH_CONTAINER, TRAINJOB, JobKind
from kubetrain.status import parse_time

KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_JOB_ROLE = "training.kubeflow.org/job-role"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# Containers that are never the replica's own (service-mesh sidecars).
SIDECARS = frozenset({"istio-proxy", "linkerd-proxy"})


def pod_selector(ref: JobRef) -> str:
    """The label selector of the job's pods."""
    # A TrainJob's pods are its JobSet's, and the JobSet carries the TrainJob's name.
    key = JOBSET_NAME if ref.kind in (JOBSET, TRAINJOB) else KUBEFLOW_JOB_NAME
    return f"{key}={ref.name}"


def _int(value: object, default: int = 0) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _replica(kind: JobKind, pod: Mapping[str, Any]) -> tuple[str, int]:
    meta = pod.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    if kind in (JOBSET, TRAINJOB):
        rtype = labels.get(JOBSET_REPLICATED_JOB, "")
        job_index = _int(labels.get(JOBSET_JOB_INDEX))
        pod_index = _int(labels.get(COMPLETION_INDEX, annotations.get(COMPLETION_INDEX)))
        # One of the two is 0 in the PS layout (single-pod servers, one Indexed worker Job).
        index = pod_index if job_index == 0 else job_index if pod_index == 0 else job_index * 10000 + pod_index
        return rtype, index
    raw = labels.get(KUBEFLOW_REPLICA_TYPE) or labels.get(KUBEFLOW_JOB_ROLE) or ""
    # Operators lower-case the replica type in labels; report it as the manifest spells it.
    rtype = next((t for t in kind.replica_types if t.lower() == raw.lower()), raw)
    return rtype, _int(labels.get(KUBEFLOW_REPLICA_INDEX))


def _container_name(kind: JobKind, pod: Mapping[str, Any]) -> str:
    containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or ()]
    preferred = [n for n in (kind.default_container, PYTORCH_CONTAINER, MPI_CONTAINER, PS_CONTAINER) if n]
    for name in preferred:
        if name in containers:
            return name
    own = [n for n in containers if n not in SIDECARS]
    return own[0] if own else (containers[0] if containers else "")


def _waiting_reason(status: Mapping[str, Any], container: str) -> tuple[str, str]:
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or ():
            if key == "containerStatuses" and cs.get("name") != container:
                continue
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") and waiting.get("reason") != "PodInitializing":
                return str(waiting["reason"]), str(waiting.get("message") or "")
    return "", ""


def pod_info(kind: JobKind, pod: Mapping[str, Any]) -> PodInfo:
    """The PodInfo of one raw pod object."""
    meta = pod.get("metadata") or {}
    status: Mapping[str, Any] = pod.get("status") or {}
    container = _container_name(kind, pod)
    rtype, index = _replica(kind, pod)
    phase = str(status.get("phase") or "Pending")
    cstatus: Mapping[str, Any] = next(
        (cs for cs in status.get("containerStatuses") or () if cs.get("name") == container), {}
    )
    state = cstatus.get("state") or {}
    last = cstatus.get("lastState") or {}
    terminated = state.get("terminated") or last.get("terminated") or {}
    reason, message = _waiting_reason(status, container)
    if not reason and phase == "Pending":
        for cond in status.get("conditions") or ():
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason, message = str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or "")
    if not reason and status.get("reason"):  # Evicted, DeadlineExceeded, ...
        reason, message = str(status["reason"]), str(status.get("message") or "")
    if not reason and phase in ("Succeeded", "Failed") and state.get("terminated"):
        reason = str(state["terminated"].get("reason") or "")
        message = message or str(state["terminated"].get("message") or "")
    exit_code = terminated.get("exitCode")
    disruption: Mapping[str, Any] = next(
        (
            c
            for c in status.get("conditions") or ()
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        {},
    )
    return PodInfo(
        name=str(meta.get("name", "")),
        replica_type=rtype,
        index=index,
        phase=phase,
        container=container,
        reason=reason,
        message=message.strip(),
        restart_count=_int(cstatus.get("restartCount")),
        exit_code=int(exit_code) if exit_code is not None else None,
        created=parse_time(meta.get("creationTimestamp")),
        disruption=str(disruption.get("reason") or ("DisruptionTarget" if disruption else "")),
        disruption_message=str(disruption.get("message") or "").strip(),
        deleting=bool(meta.get("deletionTimestamp")),
        host_name=str((pod.get("spec") or {}).get("hostname") or ""),
        uid=str(meta.get("uid") or ""),
    )


def event_info(event: Mapping[str, Any]) -> EventInfo:
    """The EventInfo of one raw core/v1 Event (`Kind/name` as its object)."""
    involved = event.get("involvedObject") or {}
    when = (
        event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get("creationTimestamp")
    )
    return EventInfo(
        type=str(event.get("type") or "Normal"),
        reason=str(event.get("reason") or ""),
        message=str(event.get("message") or "").strip(),
        involved_object=f"{involved.get('kind', '')}/{involved.get('name', '')}",
        count=_int(event.get("count"), 1) or 1,
        last_timestamp=parse_time(when),
    )


def belongs_to(ref: JobRef, event: EventInfo) -> bool:
    """Whether an event is about the job object, one of its pods or child Jobs (all named `<job>-...`)."""
    kind, _, name = event.involved_object.partition("/")
    if kind == ref.kind.kind and name == ref.name:
        return True
    # A JobSet's (and a TrainJob's) child Jobs are `<name>-<replicated job>-<index>`.
    child_job = kind == "Job" and ref.kind in (JOBSET, TRAINJOB)
    return (kind == "Pod" or child_job) and name.startswith(f"{ref.name}-")
