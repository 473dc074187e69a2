"""An in-process stand-in for the Kubernetes API server, for the launcher's tests and benchmark.

This is NOT a cluster. It is a threaded HTTP server on 127.0.0.1 that speaks enough of the real
REST API for the official `kubernetes` client to run against it unchanged:

- custom resources at /apis/<group>/<version>/namespaces/<ns>/<plural>[/<name>[/status]] for the
  three kinds kubetrain runs (create, get, list, watch, merge-patch, delete), core pods, pod logs
  (container, previous, tailLines, follow) and events (field selectors);
- the watch protocol: chunked JSON lines of {type, object}, ADDED/MODIFIED/DELETED, BOOKMARK,
  resourceVersion resumption, server-side timeoutSeconds, and 410 Gone for compacted versions;
- create validates the body against the upstream CRD schema (tests/crds.py: the pinned modules) and,
  with fieldValidation=Strict, rejects unknown fields with 400 and their paths like the real
  server's strict decoder; other schema violations are 422;
- faults on demand: 409/404/500/429 (with Retry-After), connections closed without a response,
  watches dropped mid-stream;
- it records every request (verb and resource, as RBAC sees them).

The operator's part (conditions, pods, logs, events) is played by test scripts through methods on
:class:`FakeApiServer`; see tests/integration/test_k8s_*.py.
"""

from __future__ import annotations

import copy
import http.server
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubetrain.manifests.kinds import JobKind
from tests.crd_schema import strict_errors
from tests.fake_apiserver_http import Fault, Handler, Request, status_body

Obj = dict[str, Any]
_UNKNOWN = re.compile(r"Additional properties are not allowed \((.*) (?:was|were) unexpected\)")


def now_rfc3339() -> str:
    """The current time as the API server writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def strict_decoding_errors(manifest: Mapping[str, Any], crd_dir: Path | None = None) -> tuple[list[str], list[str]]:
    """(unknown field paths, other schema violations) of a manifest against its upstream CRD."""
    del crd_dir  # the pinned CRDs (tests.conftest.CRD_DIR)
    unknown: list[str] = []
    other: list[str] = []
    for error in strict_errors(manifest):
        path, _, message = error.partition(": ")
        dotted = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)
        match = _UNKNOWN.search(message)
        if match:
            names = re.findall(r"'([^']*)'", match.group(1))
            unknown.extend(f"{dotted}.{n}" if dotted != "<root>" else n for n in names)
        elif message.startswith("not an ObjectMeta field"):
            unknown.append(dotted)
        else:
            other.append(error)
    return unknown, other


class FakeApiServer:
    """The stand-in: state, scripting methods for the operator's part, fault injection, recording."""

    def __init__(self, *, bookmark_seconds: float = 1.0) -> None:
        self.cv = threading.Condition(threading.RLock())
        self.bookmark_seconds = bookmark_seconds
        self.rv = 1000
        self.compacted_rv = 0
        self.gone_as_http = False  # 410 as an HTTP status instead of an ERROR event in the stream
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (plural, ns, name)
        self.history: list[tuple[int, str, tuple[str, str, str], Obj]] = []
        self.pods: dict[tuple[str, str], Obj] = {}
        self.logs: dict[tuple[str, str, str, int], list[str]] = {}  # (ns, pod, container, restart) → lines
        self.events: list[Obj] = []
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.watch_drops: list[int] = []  # drop the next watches after this many events each
        self.cut_epoch = 0  # open watches started in an older epoch are cut
        self.deletions: list[tuple[str, str, str, Obj]] = []  # (plural, ns, name, delete options)
        self.stopping = False
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        handler = type("BoundHandler", (Handler,), {"api": self})
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig that points the official client at this server."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
        }))  # fmt: skip
        return path

    # -- waiting (for scripts and tests) ----------------------------------------------------------

    def wait_until(self, predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        """Block until `predicate()` holds (checked on every state change), or fail after `timeout`."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"fake API server: timed out waiting for {what}")
                self.cv.wait(min(remaining, 0.5))

    def wait_request(self, match: Callable[[Request], bool], what: str, timeout: float = 20.0) -> Request:
        """The first recorded request matching `match` (waiting for it)."""
        self.wait_until(lambda: any(match(r) for r in self.requests), what, timeout)
        with self.cv:
            return next(r for r in self.requests if match(r))

    def wait_job(self, kind: JobKind, namespace: str, name: str, timeout: float = 20.0) -> Obj:
        """The job object once it exists."""
        key = (kind.plural, namespace, name)
        self.wait_until(lambda: key in self.objects, f"{kind.kind} {namespace}/{name}", timeout)
        with self.cv:
            return copy.deepcopy(self.objects[key])

    def api_calls(self) -> set[tuple[str, str, str]]:
        """Every (verb, group, resource) requested so far."""
        with self.cv:
            return {(r.verb, r.group, r.resource) for r in self.requests}

    # -- the operator's part ----------------------------------------------------------------------

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _record(self, etype: str, key: tuple[str, str, str], obj: Obj) -> None:
        obj.setdefault("metadata", {})["resourceVersion"] = self._bump()
        self.history.append((self.rv, etype, key, copy.deepcopy(obj)))
        self.cv.notify_all()

    def set_status(self, kind: JobKind, namespace: str, name: str, status: Obj) -> None:
        """Replace the job's status (as the operator's status writer does) → a MODIFIED event."""
        with self.cv:
            key = (kind.plural, namespace, name)
            obj = self.objects[key]
            obj["status"] = copy.deepcopy(status)
            self._record("MODIFIED", key, obj)

    def set_conditions(self, kind: JobKind, namespace: str, name: str, *conditions: tuple[str, str, str, str],
                       **extra: Any) -> None:  # fmt: skip
        """Conditions as (type, status, reason, message); extra status fields by keyword."""
        now = now_rfc3339()
        conds = [{"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": now,
                  "lastUpdateTime": now} for t, s, r, m in conditions]  # fmt: skip
        self.set_status(kind, namespace, name, {"conditions": conds, **extra})

    def put_pod(self, pod: Obj) -> None:
        """Create or replace a pod."""
        with self.cv:
            meta = pod["metadata"]
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta["resourceVersion"] = self._bump()
            self.pods[(meta["namespace"], meta["name"])] = copy.deepcopy(pod)
            self.cv.notify_all()

    def append_log(self, namespace: str, pod: str, container: str, *lines: str, restart: int | None = None) -> None:
        """Lines written by the container instance `restart` (default: the current one)."""
        with self.cv:
            if restart is None:
                restart = container_restarts(self.pods.get((namespace, pod)), container)
            self.logs.setdefault((namespace, pod, container, restart), []).extend(lines)
            self.cv.notify_all()

    def add_event(self, namespace: str, involved_kind: str, involved_name: str, reason: str, message: str,
                  etype: str = "Warning") -> None:  # fmt: skip
        """A core/v1 Event about an object."""
        with self.cv:
            self.events.append({
                "metadata": {"name": f"{involved_name}.{uuid.uuid4().hex[:8]}", "namespace": namespace,
                             "uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339()},
                "involvedObject": {"kind": involved_kind, "name": involved_name, "namespace": namespace},
                "reason": reason, "message": message, "type": etype, "count": 1,
                "lastTimestamp": now_rfc3339(),
            })  # fmt: skip
            self.cv.notify_all()

    # -- faults -----------------------------------------------------------------------------------

    def fail_next(self, times: int, status: int | None, *, match: Callable[[Request], bool] = lambda r: True,
                  retry_after: float | None = None, message: str = "injected fault") -> None:  # fmt: skip
        """Answer the next `times` matching requests with `status`; None closes the connection unanswered."""
        with self.cv:
            self.faults.append(Fault(match, status, times, retry_after, message))

    def drop_watches(self, *after_events: int) -> None:
        """Cut the next watches' connections mid-stream after this many events each."""
        with self.cv:
            self.watch_drops.extend(after_events)

    def cut_watches(self, *, expire: bool = False) -> None:
        """Cut every open watch now (as an API server restart would); `expire` also compacts
        history first, so resuming from any resourceVersion seen so far answers 410 Gone."""
        with self.cv:
            if expire:
                self._bump()
                self.compacted_rv = self.rv
                self.history.clear()
            self.cut_epoch += 1
            self.cv.notify_all()

    def compact(self) -> None:
        """Forget history: every resourceVersion older than now answers 410 Gone."""
        with self.cv:
            self.compacted_rv = self.rv
            self.history.clear()

    def _take_fault(self, request: Request) -> Fault | None:
        with self.cv:
            for fault in self.faults:
                if fault.times > 0 and fault.match(request):
                    fault.times -= 1
                    return fault
        return None

    # -- request handling (called by the HTTP handler) ---------------------------------------------

    def record(self, request: Request) -> None:
        with self.cv:
            self.requests.append(request)
            self.cv.notify_all()

    def create(self, kind: JobKind, namespace: str, body: Any, query: Mapping[str, str]) -> tuple[int, Obj]:
        if not isinstance(body, dict):
            return 400, status_body(400, "BadRequest", "the body is not a JSON object")
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if body.get("kind") != kind.kind or body.get("apiVersion") != kind.api_version:
            return 400, status_body(400, "BadRequest", f"the body is a {body.get('kind')} {body.get('apiVersion')}, "
                                    f"not {kind.kind} {kind.api_version}")  # fmt: skip
        if meta.get("namespace", namespace) != namespace:
            return 400, status_body(400, "BadRequest", "the namespace of the provided object does not match "
                                    "the namespace sent on the request")  # fmt: skip
        if not name:
            return 422, status_body(
                422, "Invalid", f"{kind.kind}.{kind.group} is invalid: metadata.name: Required value"
            )
        unknown, other = strict_decoding_errors(body)
        if unknown and query.get("fieldValidation") == "Strict":
            return 400, status_body(400, "BadRequest", "strict decoding error: "
                                    + ", ".join(f'unknown field "{p}"' for p in unknown))  # fmt: skip
        if other:
            return 422, status_body(422, "Invalid", f'{kind.kind}.{kind.group} "{name}" is invalid: '
                                    + "; ".join(other), {"name": name, "kind": kind.kind})  # fmt: skip
        with self.cv:
            key = (kind.plural, namespace, name)
            if key in self.objects:
                return 409, status_body(409, "AlreadyExists", f'{kind.plural}.{kind.group} "{name}" already exists',
                                        {"name": name, "group": kind.group, "kind": kind.plural})  # fmt: skip
            obj = copy.deepcopy(body)
            obj["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), generation=1,
                                   creationTimestamp=now_rfc3339())  # fmt: skip
            if query.get("dryRun") == "All":
                return 201, obj  # validated, admitted, not stored
            self.objects[key] = obj
            self._record("ADDED", key, obj)
            return 201, copy.deepcopy(obj)

    def delete(self, kind: JobKind, namespace: str, name: str, options: Obj) -> tuple[int, Obj]:
        with self.cv:
            key = (kind.plural, namespace, name)
            if key not in self.objects:
                return 404, status_body(404, "NotFound", f'{kind.plural}.{kind.group} "{name}" not found')
            self.deletions.append((kind.plural, namespace, name, dict(options)))
            obj = self.objects[key]
            # Foreground: the object is marked, its dependents (pods) go, then the object goes.
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            self._record("MODIFIED", key, obj)
            job_label = (
                "jobset.sigs.k8s.io/jobset-name" if kind.plural == "jobsets" else "training.kubeflow.org/job-name"
            )
            for pkey, pod in list(self.pods.items()):
                if pkey[0] == namespace and (pod["metadata"].get("labels") or {}).get(job_label) == name:
                    del self.pods[pkey]
            del self.objects[key]
            self._record("DELETED", key, copy.deepcopy(obj))
            return 200, status_body(200, "", "deleted") | {"status": "Success"}

    def watch_events(self, plural: str, namespace: str, name: str | None, since: int) -> list[tuple[int, str, Obj]]:
        with self.cv:
            return [
                (rv, etype, obj)
                for rv, etype, key, obj in self.history
                if rv > since and key[0] == plural and key[1] == namespace and (name is None or key[2] == name)
            ]


def container_restarts(pod: Obj | None, container: str) -> int:
    """The restart count of a pod's container (0 when unknown)."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == container:
            return int(cs.get("restartCount") or 0)
    return 0


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
