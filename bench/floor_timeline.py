"""One training step's timeline from the API server's objects: the step pod, its job, the job's pods.

Pure arithmetic over pod and job JSON as `kubectl get -o json` returns them (times at the API
server's one-second resolution), so it is unit-tested from fixtures. The spans, in order:

- step pod start → job created: the launcher's start-up, imports, spec and manifest, submit;
- job created → all training pods Running: the operator making pods, scheduling, image, start;
- the training itself: all training pods Running → the last training container ended;
- training pods end → job Succeeded: the operator noticing and writing the condition;
- job Succeeded → step pod Completed: the launcher noticing, artifacts and report, exit;

and kubetrain's share of the step, as the issue defines it: the step's wall time minus its
training pods' Running time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Obj = Mapping[str, Any]

# A job's end: PyTorchJob/MPIJob/TrainJob say Succeeded (TrainJob: Complete), a JobSet Completed.
DONE_CONDITIONS = ("Succeeded", "Completed", "Complete")
JOB_LINE = re.compile(r"job (\S+) on the kubernetes backend")


def stamp(text: str) -> float:
    """An RFC 3339 time from the API server as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _container_states(pod: Obj, container: str | None) -> list[Obj]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return [s.get("state") or {} for s in statuses if container is None or s.get("name") == container]


def container_started(pod: Obj, container: str | None = None) -> float | None:
    """When the pod's (named) container started, running or ended; the earliest if several."""
    starts = [
        stamp(str(inner["startedAt"]))
        for state in _container_states(pod, container)
        for inner in (state.get("running") or {}, state.get("terminated") or {})
        if inner.get("startedAt")
    ]
    return min(starts) if starts else None


def container_finished(pod: Obj, container: str | None = None) -> float | None:
    """When the pod's (named) container ended; the latest if several; None while any still runs."""
    states = _container_states(pod, container)
    ends = [stamp(str(s["terminated"]["finishedAt"])) for s in states if (s.get("terminated") or {}).get("finishedAt")]
    return max(ends) if ends and len(ends) == len(states) else None


def job_created(job: Obj) -> float:
    """The job object's creation time."""
    return stamp(str(job["metadata"]["creationTimestamp"]))


def job_done(job: Obj) -> float | None:
    """When the job's success condition turned True, or None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in DONE_CONDITIONS and condition.get("status") == "True":
            return stamp(str(condition["lastTransitionTime"]))
    return None


def pods_of_job(pods: Iterable[Obj], job_name: str) -> list[Obj]:
    """The training pods of `job_name`: named after it (every operator names its pods `<job>-...`)."""
    return [p for p in pods if str(p["metadata"]["name"]).startswith(f"{job_name}-")]


@dataclass(frozen=True)
class StepTimeline:
    """A training step's spans in seconds (see the module's docstring)."""

    step_wall: float
    start_to_job_created: float
    job_created_to_all_running: float
    training: float
    pods_end_to_job_succeeded: float
    job_succeeded_to_step_completed: float

    @property
    def kubetrain_share(self) -> float:
        """The step's wall time minus its training pods' Running time."""
        return self.step_wall - self.training

    def __post_init__(self) -> None:
        if self.step_wall < 0:
            raise ValueError(f"StepTimeline.step_wall: got {self.step_wall}; the step pod ended before it started")


def step_timeline(step_pod: Obj, job: Obj, training_pods: Sequence[Obj], *, container: str = "main") -> StepTimeline:
    """The spans of one kubetrain training step; ValueError when an object lacks the time it needs."""
    start, end = container_started(step_pod, container), container_finished(step_pod, container)
    done = job_done(job)
    running = [container_started(p) for p in training_pods]
    ended = [container_finished(p) for p in training_pods]
    missing = [
        what
        for what, value in (("step pod start", start), ("step pod end", end), ("job Succeeded", done))
        if value is None
    ]
    if not training_pods or None in running or None in ended:
        missing.append("training pods' start and end")
    if missing or start is None or end is None or done is None:
        raise ValueError(f"{job.get('metadata', {}).get('name')}: no {', '.join(missing)} in the objects given")
    all_running = max(r for r in running if r is not None)
    pods_end = max(e for e in ended if e is not None)
    created = job_created(job)
    return StepTimeline(
        step_wall=end - start,
        start_to_job_created=created - start,
        job_created_to_all_running=all_running - created,
        training=pods_end - all_running,
        pods_end_to_job_succeeded=done - pods_end,
        job_succeeded_to_step_completed=end - done,
    )


def job_of_step_log(log: str) -> str | None:
    """The job a kubetrain training step ran, from its log ("pytorch: job NAME on the kubernetes backend")."""
    found = JOB_LINE.search(log)
    return found.group(1) if found else None


def take_objects(buffer: str) -> tuple[list[dict[str, Any]], str]:
    """The whole JSON objects at the start of `buffer` (`kubectl get --watch -o json` writes one
    pretty-printed object after another) and the incomplete rest, kept for the next read."""
    decoder, found = json.JSONDecoder(), []
    rest = buffer.lstrip()
    while rest:
        try:
            obj, end = decoder.raw_decode(rest)
        except json.JSONDecodeError:
            break  # not complete yet
        found.append(obj)
        rest = rest[end:].lstrip()
    return found, rest
