"""What the reaper (kubetrain.reaper) asks the API server: kubetrain's jobs that answer to a KFP step
pod, and whether that pod has ended.

A job submitted from a KFP step carries the step pod's name and uid (annotations set at submission,
re-set when a retried step adopts the job). The step's own clean-up on SIGTERM races the container's
end (Argo's emissary kills every process of the container within a second of its child's exit), so
what guarantees the delete is a process outside the step that sees the pod end. These are its
reads; it deletes through :meth:`KubernetesBackend.delete`, which carries the job's uid.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.base import JobRef
from kubetrain.backends.kubernetes.errors import api_error
from kubetrain.backends.kubernetes.retry import REQUEST_TIMEOUT, Retrier
from kubetrain.manifests.kinds import KINDS, JobKind
from kubetrain.status import JobPhase, parse_job_status

STEP_POD_NAME_ANNOTATION = "kubetrain.io/step-pod-name"
STEP_POD_UID_ANNOTATION = "kubetrain.io/step-pod-uid"
STEP_POD_ANNOTATIONS = (STEP_POD_NAME_ANNOTATION, STEP_POD_UID_ANNOTATION)
# Argo runs a step's own command in the container named `main`; the wait (and init) containers are
# Argo's. Argo keeps a terminated step's pod, so the pod existing says nothing: this container does.
STEP_CONTAINER = "main"


@dataclass(frozen=True)
class StepJob:
    """A job that answers to a KFP step pod, and whether it could still run pods."""

    ref: JobRef
    step_pod: str
    step_pod_uid: str
    # Finished (Succeeded/Failed) or suspended: nothing of it runs, and a kept job stays kept (a
    # failed job kept for debugging, a job suspended at its timeout, --delete-after never).
    settled: bool


def _suspended(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    return bool(spec.get("suspend") or (spec.get("runPolicy") or {}).get("suspend"))


def step_job(kind: JobKind, obj: Mapping[str, Any], namespace: str) -> StepJob | None:
    """The job as a StepJob, or None when it names no step pod (launched from a shell: never reaped)."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    pod, uid = annotations.get(STEP_POD_NAME_ANNOTATION), annotations.get(STEP_POD_UID_ANNOTATION)
    if not pod or not uid or not meta.get("uid"):
        return None
    phase = parse_job_status({**obj, "kind": kind.kind, "apiVersion": kind.api_version}).phase
    settled = phase.terminal or phase == JobPhase.SUSPENDED or _suspended(obj)
    return StepJob(JobRef.from_object({**obj, "kind": kind.kind, "apiVersion": kind.api_version}, namespace),
                   step_pod=str(pod), step_pod_uid=str(uid), settled=settled)  # fmt: skip


def pod_end(pod: Mapping[str, Any] | None, uid: str) -> str | None:
    """Why the step pod `uid` has ended (for the reaper's log line), or None while its step still runs."""
    if pod is None:
        return "the step pod is gone"
    meta = pod.get("metadata") or {}
    if meta.get("uid") != uid:
        return f"the step pod was replaced (uid {meta.get('uid')}, not {uid})"
    if meta.get("deletionTimestamp"):
        return "the step pod is being deleted"
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return f"the step pod has ended ({status.get('phase')})"
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if container.get("name") == STEP_CONTAINER and terminated:
            return f"the step's {STEP_CONTAINER} container has ended (exit {terminated.get('exitCode')})"
    return None


class StepJobs:
    """The reaper's reads: jobs of every kind in one namespace, and step pods by name."""

    def __init__(self, custom: client.CustomObjectsApi, core: client.CoreV1Api, retry: Retrier, namespace: str) -> None:
        self._custom = custom
        self._core = core
        self._retry = retry
        self.namespace = namespace

    def jobs(self) -> list[StepJob]:
        """Every job of the four kinds in the namespace that names a step pod; a kind whose CRD is not
        installed has none."""
        found: list[StepJob] = []
        for kind in KINDS:
            what = f"list {kind.plural} in {self.namespace}"
            try:
                listed = self._retry.call(
                    what, self._custom.list_namespaced_custom_object,
                    kind.group, kind.version, self.namespace, kind.plural, _request_timeout=REQUEST_TIMEOUT,
                )  # fmt: skip
            except ApiException as e:
                if e.status == 404:
                    continue  # the CRD is not served here: no job of this kind can exist
                raise api_error(what, e) from e
            for obj in listed.get("items") or []:
                job = step_job(kind, obj, self.namespace)
                if job is not None:
                    found.append(job)
        return found

    def step_pod_end(self, job: StepJob) -> str | None:
        """Why `job`'s step pod has ended, or None while its step still runs."""
        what = f"get pod {self.namespace}/{job.step_pod}"
        try:
            response = self._retry.call(
                what, self._core.read_namespaced_pod, job.step_pod, self.namespace,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
        except ApiException as e:
            if e.status == 404:
                return pod_end(None, job.step_pod_uid)
            raise api_error(what, e) from e
        return pod_end(json.loads(response.data), job.step_pod_uid)
