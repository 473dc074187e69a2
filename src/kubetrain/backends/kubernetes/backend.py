"""The Kubernetes backend: the only module that talks to the API server about jobs.

- create with `fieldValidation=Strict`, so a misplaced field is rejected, never silently pruned
  (the old launchers' `spec.cleanPodPolicy`, `activeDeadlineSecond`), and beside a JobSet that asks
  for it, its NetworkPolicy, owned by the JobSet (`companions`);
- a 409 on create adopts the existing job only when this submission made it or it carries this KFP
  run and task's labels (a retried or restarted launcher re-attaches), and fails clearly otherwise;
- watch a single job, and its pods, in reconnect loops that resume from the last resourceVersion
  (`watch`, `watch_pods`);
- connection errors, 5xx and 429 are retried with backoff and jitter (Retry-After honoured);
- pods by the operator's label, logs with an explicit container, `previous` and `tail_lines`;
- delete with foreground propagation (pods go with the job; TrainJobs in the background, see
  `delete`) and suspend (or annotate) by merge patch, always with the job's uid as precondition;
- a job submitted from a KFP step names the step pod (`steps`), for the reaper.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.base import Backend, EventInfo, JobObject, JobRef, JobWatch, LogStream, PodInfo, PodWatch
from kubetrain.backends.kubernetes.access import require_create_access
from kubetrain.backends.kubernetes.companions import ensure_network_policy, wants_network_policy
from kubetrain.backends.kubernetes.config import (
    Connection,
    connect,
    job_name_for_task,
    launcher_pod_from_env,
    step_pod_from_env,
)
from kubetrain.backends.kubernetes.errors import api_error, create_error
from kubetrain.backends.kubernetes.events import EVENT_PODS, list_job_events
from kubetrain.backends.kubernetes.objects import pod_info
from kubetrain.backends.kubernetes.retry import REQUEST_TIMEOUT, TRANSPORT_ERRORS, Retrier, RetryPolicy
from kubetrain.backends.kubernetes.steps import (
    STEP_POD_ANNOTATIONS,
    STEP_POD_NAME_ANNOTATION,
    STEP_POD_UID_ANNOTATION,
    StepJobs,
)
from kubetrain.backends.kubernetes.stream import FollowedLog, close_response, stream_lines
from kubetrain.backends.kubernetes.watch import JobWatches, PodWatches, list_job_pods
from kubetrain.errors import BackendError, InvalidInputError, JobConflictError, JobFailedError, ManifestError
from kubetrain.manifests.kinds import JOBSET, TRAINJOB, JobKind, kind_of
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from kubetrain.status import JobPhase, parse_job_status

logger = logging.getLogger(__name__)

SUBMISSION_ANNOTATION = "kubetrain.io/submission-id"

__all__ = [
    "EVENT_PODS",
    "STEP_POD_NAME_ANNOTATION",
    "STEP_POD_UID_ANNOTATION",
    "KubernetesBackend",
    "RetryPolicy",
    "job_name_for_task",
]


class KubernetesBackend(Backend):
    """Runs job manifests on a cluster through the official `kubernetes` client."""

    name = "kubernetes"

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        owner_pod: bool = False,
        retry: RetryPolicy | None = None,
        server_watch_seconds: int = 300,
        resubmit_failed: bool = True,
        gone_wait_seconds: float = 120.0,
        connection: Connection | None = None,
    ) -> None:
        conn = connection or connect(namespace=namespace, kubeconfig=kubeconfig, context=context)
        # Where a manifest naming no namespace goes (the connection's: kubeconfig context or pod).
        self._namespace = conn.namespace
        # Set only when the caller named one: a manifest in another namespace is then refused.
        self._requested_namespace = namespace
        # Where this identity belongs (its pod's namespace): a job elsewhere is asked about first.
        self._home_namespace = conn.home_namespace
        self._api = conn.api_client
        self._custom = client.CustomObjectsApi(self._api)
        self._core = client.CoreV1Api(self._api)
        self._retry = Retrier(retry or RetryPolicy())
        self._owner = launcher_pod_from_env() if owner_pod else None
        self._step_pod = step_pod_from_env()
        self._resubmit_failed = resubmit_failed
        self._gone_wait_seconds = gone_wait_seconds
        self._watches = JobWatches(self._custom, self._retry, server_watch_seconds=server_watch_seconds)
        self._pod_watches = PodWatches(self._core, self._retry, server_watch_seconds=server_watch_seconds)

    # -- create ----------------------------------------------------------------------------------

    def submit(self, manifest: Mapping[str, Any]) -> JobRef:
        """Create the job (Strict field validation), adopting this task's existing job on 409."""
        kind, body = self._prepare(manifest)
        require_create_access(self._api, self._retry, kind, body["metadata"]["namespace"], self._home_namespace)
        try:
            created = self._create(kind, body)
        except ApiException as e:
            if e.status != 409:
                raise create_error(kind, body, e) from e
            ref = self._adopt(kind, body)
        else:
            ref = self._created(created, body["metadata"]["namespace"])
        if wants_network_policy(body):
            ensure_network_policy(client.NetworkingV1Api(self._api), self._retry, body, ref)
        return ref

    def _created(self, created: JobObject, namespace: str) -> JobRef:
        """The new job's ref; its watches begin where its creation left the API server's history,
        which saves the launcher a list of the job and one of its pods (a thousand launchers
        starting together otherwise list two thousand times at once)."""
        ref = JobRef.from_object(created, namespace=namespace)
        self._watches.start_from(ref, created)
        self._pod_watches.start_from(ref, str((created.get("metadata") or {}).get("resourceVersion") or ""))
        return ref

    def dry_run(self, manifest: Mapping[str, Any]) -> JobObject:
        """What the API server would store (defaults and webhooks applied), creating nothing.

        Server-side dry run with Strict field validation: the same checks as `submit`, against the
        CRDs actually installed in the cluster.
        """
        kind, body = self._prepare(manifest)
        try:
            return self._create(kind, body, dry_run=True)
        except ApiException as e:
            if e.status == 409:
                meta = body["metadata"]
                raise JobConflictError(
                    f"{kind.kind} {meta['namespace']}/{meta['name']} already exists (a launch would adopt it "
                    "if it carries this task's labels)"
                ) from e
            raise create_error(kind, body, e) from e

    def _prepare(self, manifest: Mapping[str, Any]) -> tuple[JobKind, JobObject]:
        """The body to create: namespace resolved, name required, submission id, owner reference."""
        kind = kind_of(manifest)
        body: JobObject = copy.deepcopy(dict(manifest))
        meta = body.setdefault("metadata", {})
        namespace = meta.get("namespace") or self._namespace
        requested = self._requested_namespace
        if requested and namespace != requested:
            raise ManifestError(
                "metadata.namespace", f"{namespace!r} differs from the requested namespace {requested!r}"
            )
        if not meta.get("name"):
            raise ManifestError(
                "metadata.name",
                "required: derive it at run time from the KFP run and task ids (job_name_for_task); "
                "generateName would launch a second job on every retry",
            )
        meta["namespace"] = namespace
        annotations = meta.setdefault("annotations", {})
        annotations[SUBMISSION_ANNOTATION] = uuid.uuid4().hex
        step = self._step_pod
        # The reaper looks for the step pod in the job's namespace: a job elsewhere names none (a
        # pod of that name there would be another pod), and is deleted only by the step itself.
        if step is not None and step.namespace in (None, namespace):
            annotations[STEP_POD_NAME_ANNOTATION], annotations[STEP_POD_UID_ANNOTATION] = step.name, step.uid
        if self._owner is not None:
            if self._owner.namespace != namespace:
                # Kubernetes treats a cross-namespace owner as absent and garbage-collects the job.
                raise InvalidInputError(
                    f"the launcher pod in namespace {self._owner.namespace!r} cannot own a job in {namespace!r} "
                    "(the garbage collector would delete it at once); launch into the pod's namespace or drop "
                    "--owner-pod"
                )
            meta["ownerReferences"] = [*(meta.get("ownerReferences") or []), self._owner.owner_reference()]
        return kind, body

    def _create(self, kind: JobKind, body: JobObject, *, dry_run: bool = False) -> JobObject:
        meta = body["metadata"]
        extra = {"dry_run": "All"} if dry_run else {}
        result = self._retry.call(
            f"create {kind.kind} {meta['namespace']}/{meta['name']}",
            self._custom.create_namespaced_custom_object,
            kind.group, kind.version, meta["namespace"], kind.plural, body,
            field_validation="Strict", _request_timeout=REQUEST_TIMEOUT, **extra,
        )  # fmt: skip
        return dict(result)

    def _adopt(self, kind: JobKind, body: JobObject) -> JobRef:
        meta = body["metadata"]
        ref = JobRef(kind=kind, name=meta["name"], namespace=meta["namespace"])
        existing = self.get(ref)
        emeta = existing.get("metadata") or {}
        labels, existing_labels = meta.get("labels") or {}, emeta.get("labels") or {}
        ours = (emeta.get("annotations") or {}).get(SUBMISSION_ANNOTATION) == meta["annotations"][SUBMISSION_ANNOTATION]
        run, task = labels.get(LABEL_RUN_ID), labels.get(LABEL_TASK_ID)
        theirs = (existing_labels.get(LABEL_RUN_ID), existing_labels.get(LABEL_TASK_ID))
        same_task = bool(run and task) and theirs == (run, task)
        if not (ours or same_task):
            raise JobConflictError(
                f"{kind.kind} {ref.namespace}/{ref.name} already exists and does not belong to this task "
                f"(its run/task labels: {theirs[0]!r}/{theirs[1]!r}; "
                f"this manifest's: {run!r}/{task!r}); delete it or choose another name"
            )
        phase = parse_job_status(existing).phase
        adopted = JobRef.from_object(existing, namespace=ref.namespace)
        if emeta.get("deletionTimestamp") or (phase == JobPhase.FAILED and self._resubmit_failed and not ours):
            # A retry of a failed task must run again, not re-read the old failure.
            logger.info("%s %s/%s exists (%s); replacing it", kind.kind, ref.namespace, ref.name, phase.value)
            self.delete(adopted)
            self._wait_gone(adopted)
            return self._created(self._create(kind, body), ref.namespace)
        logger.info("adopted existing %s %s/%s (%s)", kind.kind, ref.namespace, ref.name, phase.value)
        existing = self._record_step(adopted, existing, meta.get("annotations") or {})
        self._watches.start_from(adopted, existing)  # its pods may exist already: those are listed
        return adopted

    def _record_step(self, ref: JobRef, existing: JobObject, annotations: Mapping[str, str]) -> JobObject:
        """A retried step adopts its task's job: the job now answers to this step's pod, so that the
        reaper (kubetrain.reaper) deletes it when this step ends, not when the previous one did."""
        step = {key: annotations[key] for key in STEP_POD_ANNOTATIONS if key in annotations}
        current = (existing.get("metadata") or {}).get("annotations") or {}
        if not step or all(current.get(key) == value for key, value in step.items()):
            return existing
        kind = ref.kind
        what = f"record the step pod on {kind.kind} {ref.namespace}/{ref.name}"
        return self._patch(ref, {"metadata": {"annotations": step}}, what)

    def _patch(self, ref: JobRef, patch: Mapping[str, Any], what: str) -> JobObject:
        """A merge patch of the job of `ref.uid` (see :meth:`_send_patch`); BackendError when it fails."""
        try:
            return self._send_patch(ref, patch, what)
        except ApiException as e:
            raise api_error(what, e) from e

    def _send_patch(self, ref: JobRef, patch: Mapping[str, Any], what: str) -> JobObject:
        """A merge patch of the job of `ref.uid`, with the API's retries; the patched object.

        `metadata.uid` in a merge patch is a precondition: the API server answers 409 and changes
        nothing when the object of that name now is another one (ours deleted, someone's new job
        under the same name), so a patch never lands on a job this backend did not submit or adopt.
        """
        kind = ref.kind
        if not ref.uid:
            raise InvalidInputError(f"{what}: the reference has no uid; patch only a job this backend "
                                    "submitted or adopted (submit returns its reference with the uid)")  # fmt: skip
        guarded = {**patch, "metadata": {**(patch.get("metadata") or {}), "uid": ref.uid}}
        result = self._retry.call(
            what, self._custom.patch_namespaced_custom_object,
            kind.group, kind.version, ref.namespace, kind.plural, ref.name, guarded,
            _request_timeout=REQUEST_TIMEOUT,
        )  # fmt: skip
        return dict(result)

    def _wait_gone(self, ref: JobRef) -> None:
        """Return once the job is gone: its DELETED event on a watch (or a listing without it) ends
        the wait the moment the garbage collector and finalizers let go, with no polling interval."""
        try:
            for _ in self._watches.watch(ref, timeout_seconds=self._gone_wait_seconds):
                pass  # its updates while it is being deleted (finalizers, status) change nothing here
        except JobFailedError:
            return  # the watch's "deleted" ending: the name is free
        raise BackendError(f"{ref.kind.kind} {ref.namespace}/{ref.name} was still being deleted after "
                           f"{self._gone_wait_seconds:g}s; its pods may be stuck terminating")  # fmt: skip

    # -- read ------------------------------------------------------------------------------------

    def _get_raw(self, ref: JobRef) -> JobObject:
        # Through the status subresource: it returns the whole object (metadata, spec, status), and
        # so the Role needs only `get` on <plural>/status, next to the list/watch the loop uses.
        kind = ref.kind
        result = self._retry.call(
            f"get {kind.kind} {ref.namespace}/{ref.name}",
            self._custom.get_namespaced_custom_object_status,
            kind.group, kind.version, ref.namespace, kind.plural, ref.name, _request_timeout=REQUEST_TIMEOUT,
        )  # fmt: skip
        return dict(result)

    def get(self, ref: JobRef) -> JobObject:
        """The job object now; BackendError if it is gone."""
        try:
            return self._get_raw(ref)
        except ApiException as e:
            raise api_error(f"get {ref.kind.kind} {ref.namespace}/{ref.name}", e) from e

    def watch(self, ref: JobRef, *, timeout_seconds: float) -> JobWatch:
        """The job's current state, then every change, for about `timeout_seconds`; see JobWatches."""
        return self._watches.watch(ref, timeout_seconds=timeout_seconds)

    def pods(self, ref: JobRef) -> list[PodInfo]:
        """The job's pods, found by the operator's job-name label."""
        items = list_job_pods(self._core, self._retry, ref).get("items") or []
        return sorted((pod_info(ref.kind, p) for p in items), key=lambda p: (p.replica_type, p.index, p.name))

    def watch_pods(self, ref: JobRef, *, timeout_seconds: float) -> PodWatch:
        """The job's pods (by the operator's job-name label) now, then at every change; see PodWatches."""
        return self._pod_watches.watch(ref, timeout_seconds=timeout_seconds)

    def pod_log(
        self, ref: JobRef, pod: PodInfo, *, follow: bool, tail_lines: int | None = None, previous: bool = False
    ) -> Iterator[str]:
        """Lines of the pod's replica container; `previous` reads the container before the last restart."""
        what = f"log of pod {ref.namespace}/{pod.name} container {pod.container}"
        response = self._log_response(ref, pod, follow=follow, tail_lines=tail_lines, previous=previous)
        try:
            for raw in stream_lines(response):
                yield raw.decode("utf-8", "replace")
        except TRANSPORT_ERRORS as e:
            raise BackendError(f"{what}: stream broken: {e}") from e
        finally:
            close_response(response)

    def _log_response(self, ref: JobRef, pod: PodInfo, *, follow: bool, tail_lines: int | None, previous: bool) -> Any:
        what = f"log of pod {ref.namespace}/{pod.name} container {pod.container}"
        kwargs: dict[str, Any] = {"container": pod.container, "follow": follow, "previous": previous}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        # A followed log may be quiet for hours: no read timeout then (the thread is a daemon).
        timeout = (REQUEST_TIMEOUT[0], None) if follow else REQUEST_TIMEOUT
        try:
            return self._retry.call(
                what, self._core.read_namespaced_pod_log, pod.name, ref.namespace,
                _preload_content=False, _request_timeout=timeout, **kwargs,
            )  # fmt: skip
        except ApiException as e:
            raise api_error(what, e) from e

    def follow_log(self, ref: JobRef, pod: PodInfo) -> LogStream:
        """The pod's log followed; :meth:`LogStream.close` from another thread ends a blocked read at once."""
        return FollowedLog(lambda: self._log_response(ref, pod, follow=True, tail_lines=None, previous=False),
                            what=f"log of pod {ref.namespace}/{pod.name} container {pod.container}")  # fmt: skip

    def events(self, ref: JobRef, *, pods: Sequence[str] = ()) -> list[EventInfo]:
        """Events about the job object and Warnings about the named pods (a few), oldest first."""
        return list_job_events(self._core, self._retry, ref, pods=pods)

    # -- change ----------------------------------------------------------------------------------

    def debug_hint(self, ref: JobRef) -> str:
        """The kubectl command that shows the job."""
        return f"kubectl -n {ref.namespace} describe {ref.kind.plural} {ref.name}"

    def delete(self, ref: JobRef) -> None:
        """Delete the job of `ref.uid` and, through the garbage collector, its pods. A job already gone
        is fine, and so is another object of the same name, which is left alone (uid precondition).

        Foreground (the job stays until its pods are gone), except for a TrainJob: Trainer v2.3
        re-creates a TrainJob's JobSet (and an MPI job's SSH Secret and hostfile ConfigMap) while
        the TrainJob waits in foreground deletion, so that deletion never ends (seen against the
        real controller in tests/cluster). Deleted in the background, the TrainJob is gone at once
        and the garbage collector removes the JobSet, its Jobs and pods after it.
        """
        kind = ref.kind
        what = f"delete {kind.kind} {ref.namespace}/{ref.name}"
        if not ref.uid:
            # Without the uid the delete would remove whatever object has this name at that moment.
            raise InvalidInputError(f"{what}: the reference has no uid; delete only a job this backend "
                                    "submitted or adopted (submit returns its reference with the uid)")  # fmt: skip
        self._watches.forget(ref)
        self._pod_watches.forget(ref)
        propagation = "Background" if kind == TRAINJOB else "Foreground"
        try:
            self._retry.call(
                what, self._custom.delete_namespaced_custom_object,
                kind.group, kind.version, ref.namespace, kind.plural, ref.name,
                body={"propagationPolicy": propagation, "preconditions": {"uid": ref.uid}},
                _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
        except ApiException as e:
            if e.status == 409:
                # The uid precondition failed: this job is gone, and another object took its name.
                logger.info("%s: uid %s is gone; the object of that name now is another one, left alone", what,
                            ref.uid)  # fmt: skip
                return
            if e.status != 404:
                raise api_error(what, e) from e

    def suspend(self, ref: JobRef) -> None:
        """Suspend the job of `ref.uid` by merge patch: the operator deletes its pods and keeps the
        object. Another object of the same name is left alone (uid precondition), as by :meth:`delete`."""
        kind = ref.kind
        top_level = kind in (JOBSET, TRAINJOB)
        patch = {"spec": {"suspend": True}} if top_level else {"spec": {"runPolicy": {"suspend": True}}}
        what = f"suspend {kind.kind} {ref.namespace}/{ref.name}"
        try:
            self._send_patch(ref, patch, what)
        except ApiException as e:
            if e.status != 409:
                raise api_error(what, e) from e
            # The uid precondition failed: this job is gone, and another object took its name.
            logger.warning("%s: uid %s is gone; the object of that name now is another one, left alone", what,
                           ref.uid)  # fmt: skip

    def step_jobs(self) -> StepJobs:
        """The reaper's reads in this backend's namespace (kubetrain.reaper): jobs that answer to a
        KFP step pod, and whether that pod has ended. Deletes go through :meth:`delete`."""
        return StepJobs(self._custom, self._core, self._retry, self._requested_namespace or self._namespace)

    def close(self) -> None:
        """Close the connection pool. Idempotent."""
        self._api.close()
