"""An in-process stand-in for the Kubernetes API server, for the launcher's tests and benchmark.

This is NOT a cluster. It is a threaded HTTP server on 127.0.0.1 that speaks enough of the real
REST API for the official `kubernetes` client to run against it unchanged:

- custom resources at /apis/<group>/<version>/namespaces/<ns>/<plural>[/<name>[/status]] for the
  kinds kubetrain runs (create, get, list, watch, merge-patch, delete), core pods (get, list and
  watch by label selector), pod logs (container, previous, tailLines, follow) and events (field
  selectors);
- the watch protocol, for jobs and pods alike: chunked JSON lines of {type, object},
  ADDED/MODIFIED/DELETED, BOOKMARK, resourceVersion resumption, server-side timeoutSeconds, and
  410 Gone for compacted versions; a malformed resourceVersion or label selector is a 400;
- create validates the body against the upstream CRD schema (tests/crds.py: the pinned modules) and,
  with fieldValidation=Strict, rejects unknown fields with 400 and their paths like the real
  server's strict decoder; other schema violations are 422;
- faults on demand: 409/404/500/429 (with Retry-After), connections closed without a response,
  watches dropped mid-stream;
- what the scripts play is checked too: a pod must look like one the kubelet reports (name,
  namespace, labels, containers, a known phase, a status for each container it names);
- it records every request (verb and resource, as RBAC sees them).

The operator's part (conditions, pods, logs, events) is played by test scripts through methods on
:class:`FakeApiServer`; see tests/integration/test_k8s_*.py. The HTTP side is in
`fake_apiserver_http` (routing, verbs), `fake_apiserver_streams` (watches, followed logs) and
`fake_apiserver_proto` (requests, faults, selectors); pods as scripts make them in `fake_apiserver_pods`.
"""

from __future__ import annotations

import bisect
import copy
import http.server
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubetrain.manifests.kinds import JobKind
from tests.crd_schema import strict_errors
from tests.fake_apiserver_http import Fault, Handler, Request, status_body
from tests.fake_apiserver_pods import container_restarts, make_pod, now_rfc3339, pod_problems

# Re-exported: scripts and benchmarks import them from here.
__all__ = ["FakeApiServer", "Request", "container_restarts", "make_pod", "now_rfc3339"]

Obj = dict[str, Any]
_UNKNOWN = re.compile(r"Additional properties are not allowed \((.*) (?:was|were) unexpected\)")


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


HANG_GUARD_S = 90.0


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
        self.watch_drops: list[tuple[str | None, int]] = []  # (resource or any, events before the drop)
        self.cut_epoch = 0  # open watches started in an older epoch are cut
        self.deletions: list[tuple[str, str, str, Obj]] = []  # (plural, ns, name, delete options)
        self.stopping = False
        # kwok's kubelet keeps a followed log open after the container ended (a real kubelet ends
        # it): the launcher must not depend on the server ending the stream.
        self.log_streams_outlive_pods = False
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
    # The waits are hang guards: what they wait for comes within a second on an idle machine, and in
    # 20 s did not once while a cold Go build shared the two cores with the tests (issue 44).

    def wait_until(self, predicate: Callable[[], bool], what: str, timeout: float = HANG_GUARD_S) -> None:
        """Block until `predicate()` holds (checked on every state change), or fail after `timeout`."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"fake API server: timed out waiting for {what}")
                self.cv.wait(min(remaining, 0.5))

    def wait_request(self, match: Callable[[Request], bool], what: str, timeout: float = HANG_GUARD_S) -> Request:
        """The first recorded request matching `match` (waiting for it)."""
        self.wait_until(lambda: any(match(r) for r in self.requests), what, timeout)
        with self.cv:
            return next(r for r in self.requests if match(r))

    def wait_job(self, kind: JobKind, namespace: str, name: str, timeout: float = HANG_GUARD_S) -> Obj:
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
        """Create or replace a pod (as the kubelet's and the controllers' writes do) → a pod watch event."""
        problems = pod_problems(pod)
        if problems:
            raise AssertionError(f"fake API server: the script's pod is not one the API server would hold: {problems}")
        with self.cv:
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            old = self.pods.get(key)
            if old is not None:
                meta.setdefault("uid", old["metadata"]["uid"])
                meta.setdefault("creationTimestamp", old["metadata"]["creationTimestamp"])
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            stored = self.pods[key] = copy.deepcopy(pod)
            self._record("ADDED" if old is None else "MODIFIED", ("pods", *key), stored)
            meta["resourceVersion"] = stored["metadata"]["resourceVersion"]

    def delete_pod(self, namespace: str, name: str, *, graceful: bool = True) -> None:
        """A controller deletes a pod (a Job past its backoffLimit deletes its pods): marked with a
        deletionTimestamp first when `graceful`, as the kubelet then stops it, then gone."""
        with self.cv:
            key = (namespace, name)
            pod = self.pods[key]
            if graceful:
                pod["metadata"]["deletionTimestamp"] = now_rfc3339()
                pod["metadata"]["deletionGracePeriodSeconds"] = 30
                self._record("MODIFIED", ("pods", *key), pod)
            del self.pods[key]
            self._record("DELETED", ("pods", *key), copy.deepcopy(pod))

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

    def drop_watches(self, *after_events: int, resource: str | None = None) -> None:
        """Cut the next watches' connections (of `resource`, e.g. "pods"; None: any) mid-stream
        after this many events each."""
        with self.cv:
            self.watch_drops.extend((resource, n) for n in after_events)

    def take_watch_drop(self, resource: str) -> int | None:
        """After how many events to drop a new watch of `resource` (None: never)."""
        with self.cv:
            for i, (wanted, after) in enumerate(self.watch_drops):
                if wanted in (None, resource):
                    del self.watch_drops[i]
                    return after
        return None

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
            wanted = (options.get("preconditions") or {}).get("uid")
            actual = self.objects[key]["metadata"]["uid"]
            if wanted is not None and wanted != actual:
                # As the real API server answers a failed precondition: 409 Conflict, nothing deleted.
                return 409, status_body(409, "Conflict", f"Precondition failed: UID in precondition: {wanted}, "
                                        f"UID in object meta: {actual}")  # fmt: skip
            self.deletions.append((kind.plural, namespace, name, dict(options)))
            obj = self.objects[key]
            # Foreground: the object is marked, its dependents (pods) go, then the object goes.
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            self._record("MODIFIED", key, obj)
            job_label = (  # a TrainJob's pods are its JobSet's, labelled with its name
                "jobset.sigs.k8s.io/jobset-name"
                if kind.plural in ("jobsets", "trainjobs")
                else "training.kubeflow.org/job-name"
            )
            for pkey, pod in list(self.pods.items()):
                if pkey[0] == namespace and (pod["metadata"].get("labels") or {}).get(job_label) == name:
                    del self.pods[pkey]
                    self._record("DELETED", ("pods", *pkey), copy.deepcopy(pod))
            if obj["metadata"].get("finalizers"):
                # A finalizer holds the object, marked, until its owner lets go (release_finalizers).
                return 200, copy.deepcopy(obj)
            del self.objects[key]
            self._record("DELETED", key, copy.deepcopy(obj))
            return 200, status_body(200, "", "deleted") | {"status": "Success"}

    def release_finalizers(self, kind: JobKind, namespace: str, name: str) -> None:
        """Drop a held object's finalizers; one being deleted is then gone (a DELETED event)."""
        with self.cv:
            key = (kind.plural, namespace, name)
            obj = self.objects[key]
            obj["metadata"].pop("finalizers", None)
            if obj["metadata"].get("deletionTimestamp"):
                del self.objects[key]
                self._record("DELETED", key, copy.deepcopy(obj))
            else:
                self._record("MODIFIED", key, obj)

    def watch_events(self, plural: str, namespace: str, name: str | None, since: int) -> list[tuple[int, str, Obj]]:
        """Events of `plural` ("pods" for pods) in `namespace` after resourceVersion `since`."""
        with self.cv:
            # History is in resourceVersion order: skip what the watcher has seen without scanning it.
            start = bisect.bisect_right(self.history, since, key=lambda h: h[0])
            return [
                (rv, etype, obj)
                for rv, etype, key, obj in self.history[start:]
                if key[0] == plural and key[1] == namespace and (name is None or key[2] == name)
            ]
