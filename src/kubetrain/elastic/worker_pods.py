"""What changed among a PS job's worker pods between two looks, as the master needs to hear it.

Pure: two snapshots of the job's pods in, a list of changes out. A worker is known to the master
by the id it registers with, its pod's host name (`ps.common.procs.worker_id_default`), so that
is the id a change carries; the pod name (host name plus a random suffix) is kept for the log line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from kubetrain.backends.base import PodInfo

__all__ = ["WORKER_REPLICA", "Change", "WorkerChange", "worker_changes", "worker_id"]

WORKER_REPLICA = "worker"

# DisruptionTarget reasons (k8s.io/api/core/v1 PodReason*): who takes the pod away.
PREEMPTION = "PreemptionByScheduler"


class Change(StrEnum):
    """The kinds of change the master acts on."""

    PREEMPTED = "preempted"  # the scheduler takes the node's room for a higher-priority pod
    DISRUPTED = "disrupted"  # evicted, drained, tainted away, or killed by the kubelet
    DELETED = "deleted"  # gone, or being deleted, with no disruption recorded (kubectl delete, a scale-down)
    FAILED = "failed"  # its container ended in failure (the Job makes a new pod)
    PLACED = "placed"  # a pod that waited Pending now runs


@dataclass(frozen=True)
class WorkerChange:
    """One worker pod's change: the worker's id, the pod's name, what happened and why."""

    worker_id: str
    pod: str
    change: Change
    reason: str = ""
    message: str = ""
    pod_uid: str = ""

    def line(self) -> str:
        """The change as one log line, e.g. `worker ps-w-2 preempted (PreemptionByScheduler: ...)`."""
        why = (
            f" ({self.reason}: {self.message})"
            if self.reason and self.message
            else f" ({self.reason})"
            if self.reason
            else ""
        )
        return f"worker {self.worker_id} {self.change.value}{why}"


def worker_id(pod: PodInfo) -> str:
    """The id the worker in `pod` registers with: its host name (an Indexed Job's pod's own name for itself)."""
    return pod.host_name or pod.name


def _leaving(pod: PodInfo) -> WorkerChange | None:
    if pod.disruption:
        change = Change.PREEMPTED if pod.disruption == PREEMPTION else Change.DISRUPTED
        return WorkerChange(worker_id(pod), pod.name, change, pod.disruption, pod.disruption_message, pod.uid)
    if pod.deleting:
        return WorkerChange(worker_id(pod), pod.name, Change.DELETED, "deleted", pod_uid=pod.uid)
    if pod.phase == "Failed":
        why = pod.reason or (f"exit code {pod.exit_code}" if pod.exit_code is not None else "")
        return WorkerChange(worker_id(pod), pod.name, Change.FAILED, why, pod.message, pod.uid)
    return None


def worker_changes(before: Mapping[str, PodInfo], after: Iterable[PodInfo]) -> list[WorkerChange]:
    """The changes from `before` (worker pods by pod name) to `after` (the job's pods now, any role).

    A pod reports leaving once: the first look that shows its disruption, deletion or failure (a
    pod that vanished between two looks with none of these seen counts as deleted). A pod reports
    being placed once: the first look that shows it Running after a look that showed it Pending,
    or a first look that shows it Running at all.
    """
    now = {p.name: p for p in after if p.replica_type == WORKER_REPLICA}
    changes: list[WorkerChange] = []
    for name, pod in now.items():
        old = before.get(name)
        leaving = _leaving(pod)
        if leaving is not None:
            if old is None or _leaving(old) is None:
                changes.append(leaving)
        elif pod.phase == "Running" and (old is None or old.phase == "Pending"):
            changes.append(WorkerChange(worker_id(pod), pod.name, Change.PLACED, pod_uid=pod.uid))
    for name, old in before.items():
        if name not in now and _leaving(old) is None:
            changes.append(WorkerChange(worker_id(old), name, Change.DELETED, "deleted", pod_uid=old.uid))
    return changes
