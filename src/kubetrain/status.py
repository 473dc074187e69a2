"""One status model for every job kind and both backends.

The operators (and the local backend, which imitates them) write `status.conditions`; this module
turns them into a :class:`JobStatus`. Only conditions whose `status` is the string "True" count:
the old launchers read `conditions[-1]` whatever its status and reported jobs that had merely
stopped Running as finished.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from kubetrain.manifests.kinds import JOBSET, TRAINJOB, kind_of


class JobPhase(StrEnum):
    """Where a job stands. SUCCEEDED and FAILED are terminal."""

    PENDING = "Pending"  # no condition yet (the operator has not seen the job)
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        """True for SUCCEEDED and FAILED."""
        return self in (JobPhase.SUCCEEDED, JobPhase.FAILED)


@dataclass(frozen=True)
class Condition:
    """One `status.conditions[]` entry."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None

    @property
    def is_true(self) -> bool:
        """Whether the condition holds (its status is exactly "True")."""
        return self.status == "True"


@dataclass(frozen=True)
class ReplicaCounts:
    """Pods (or child Jobs' pods) of one replica type by state."""

    active: int = 0
    succeeded: int = 0
    failed: int = 0
    ready: int = 0


@dataclass(frozen=True)
class JobStatus:
    """A job's status, the same shape for PyTorchJob, MPIJob and JobSet."""

    phase: JobPhase
    reason: str = ""
    message: str = ""
    replicas: Mapping[str, ReplicaCounts] = field(default_factory=dict)
    restarts: int = 0
    start_time: datetime | None = None
    completion_time: datetime | None = None
    conditions: tuple[Condition, ...] = ()
    # Every replica type the job has, whether or not it has pods yet: from its spec (replica specs,
    # replicated jobs) and from its status (a TrainJob's runtime decides them; the Trainer lists
    # them in `jobsStatus` from its first status on). Empty until the job says.
    replica_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobResult:
    """What a finished job hands back to its caller (the launcher, a component, the CLI)."""

    name: str
    namespace: str
    kind: str
    uid: str
    phase: JobPhase
    reason: str
    message: str
    start_time: datetime | None
    completion_time: datetime | None
    restarts: int
    backend: str

    @property
    def duration_seconds(self) -> float | None:
        """Wall time from the job's start to its end, when both are known."""
        if self.start_time is None or self.completion_time is None:
            return None
        return (self.completion_time - self.start_time).total_seconds()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times in RFC 3339)."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "kind": self.kind,
            "uid": self.uid,
            "phase": self.phase.value,
            "reason": self.reason,
            "message": self.message,
            "start_time": format_time(self.start_time),
            "completion_time": format_time(self.completion_time),
            "duration_seconds": self.duration_seconds,
            "restarts": self.restarts,
            "backend": self.backend,
        }


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it, or None."""
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(value: datetime | None) -> str | None:
    """The RFC 3339 form the API server uses (UTC, seconds, 'Z')."""
    if value is None:
        return None
    return (
        value.astimezone().strftime("%Y-%m-%dT%H:%M:%SZ")
        if value.tzinfo is None
        else (value.isoformat().replace("+00:00", "Z"))
    )


def _conditions(status: Mapping[str, Any]) -> tuple[Condition, ...]:
    out = []
    for raw in status.get("conditions") or ():
        out.append(
            Condition(
                type=str(raw.get("type", "")),
                status=str(raw.get("status", "")),
                reason=str(raw.get("reason") or ""),
                message=str(raw.get("message") or ""),
                last_transition_time=parse_time(raw.get("lastTransitionTime")),
            )
        )
    return tuple(out)


# Which true condition decides the phase, most decisive first.
_KUBEFLOW_ORDER = (
    ("Failed", JobPhase.FAILED),
    ("Succeeded", JobPhase.SUCCEEDED),
    ("Suspended", JobPhase.SUSPENDED),
    ("Restarting", JobPhase.RESTARTING),
    ("Running", JobPhase.RUNNING),
    ("Created", JobPhase.CREATED),
)
_JOBSET_ORDER = (
    ("Failed", JobPhase.FAILED),
    ("Completed", JobPhase.SUCCEEDED),
    ("Suspended", JobPhase.SUSPENDED),
    ("RestartingJobSet", JobPhase.RESTARTING),
)
# A TrainJob copies its JobSet's end as Complete/Failed (metav1 conditions, Trainer v2.3).
_TRAINJOB_ORDER = (
    ("Failed", JobPhase.FAILED),
    ("Complete", JobPhase.SUCCEEDED),
    ("Suspended", JobPhase.SUSPENDED),
)


def _decide(
    conditions: tuple[Condition, ...], order: tuple[tuple[str, JobPhase], ...]
) -> tuple[JobPhase, Condition] | None:
    true = {c.type: c for c in conditions if c.is_true}
    for ctype, phase in order:
        if ctype in true:
            return phase, true[ctype]
    return None


def spec_replica_names(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The replica types a job's spec declares (none for a TrainJob: its runtime declares them)."""
    kind = kind_of(obj)
    spec: Mapping[str, Any] = obj.get("spec") or {}
    if kind.replica_specs_key is not None:
        return tuple(str(name) for name in spec.get(kind.replica_specs_key) or {})
    if kind is JOBSET:
        return tuple(str(r.get("name")) for r in spec.get("replicatedJobs") or () if r.get("name"))
    return ()


def parse_job_status(obj: Mapping[str, Any]) -> JobStatus:
    """The JobStatus of a PyTorchJob, MPIJob, JobSet or TrainJob object as read from a backend."""
    parsed = _parse_status(obj)
    names = dict.fromkeys((*spec_replica_names(obj), *parsed.replicas))
    return replace(parsed, replica_names=tuple(names))


def _parse_status(obj: Mapping[str, Any]) -> JobStatus:
    kind = kind_of(obj)
    status: Mapping[str, Any] = obj.get("status") or {}
    conditions = _conditions(status)
    if kind is JOBSET:
        created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
        return _parse_jobset(status, conditions, created=created)
    if kind is TRAINJOB:
        created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
        return _parse_jobset(status, conditions, created=created, order=_TRAINJOB_ORDER, replicas_key="jobsStatus")
    replicas = {
        rtype: ReplicaCounts(
            active=int(counts.get("active") or 0),
            succeeded=int(counts.get("succeeded") or 0),
            failed=int(counts.get("failed") or 0),
        )
        for rtype, counts in (status.get("replicaStatuses") or {}).items()
    }
    decided = _decide(conditions, _KUBEFLOW_ORDER)
    phase, cond = decided if decided else (JobPhase.PENDING, None)
    return JobStatus(
        phase=phase,
        reason=cond.reason if cond else "",
        message=cond.message if cond else "",
        replicas=replicas,
        restarts=sum(1 for c in conditions if c.type == "Restarting" and c.is_true),
        start_time=parse_time(status.get("startTime")),
        completion_time=parse_time(status.get("completionTime")),
        conditions=conditions,
    )


def _parse_jobset(
    status: Mapping[str, Any],
    conditions: tuple[Condition, ...],
    *,
    created: datetime | None,
    order: tuple[tuple[str, JobPhase], ...] = _JOBSET_ORDER,
    replicas_key: str = "replicatedJobsStatus",
) -> JobStatus:
    """A JobSet's status, or a TrainJob's (the same shape: conditions and per-replicated-job counts)."""
    replicas = {
        str(item.get("name")): ReplicaCounts(
            active=int(item.get("active") or 0),
            succeeded=int(item.get("succeeded") or 0),
            failed=int(item.get("failed") or 0),
            ready=int(item.get("ready") or 0),
        )
        for item in status.get(replicas_key) or ()
    }
    decided = _decide(conditions, order)
    if decided:
        phase, cond = decided
        reason, message = cond.reason, cond.message
    else:
        # JobSet has no Running/Created conditions: activity of its child jobs is the signal.
        busy = any(r.active or r.ready or r.succeeded for r in replicas.values())
        phase = JobPhase.RUNNING if busy else (JobPhase.CREATED if status else JobPhase.PENDING)
        reason = message = ""
    times = [c.last_transition_time for c in conditions if c.last_transition_time]
    completion = None
    if phase.terminal and decided:
        completion = decided[1].last_transition_time
    return JobStatus(
        phase=phase,
        reason=reason,
        message=message,
        replicas=replicas,
        restarts=int(status.get("restarts") or 0),
        # A JobSet has no startTime and only its terminal condition: it started when it was created.
        start_time=parse_time(status.get("startTime")) or created or (min(times) if times else None),
        completion_time=completion,
        conditions=conditions,
    )
