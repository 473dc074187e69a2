"""The HTTP side of the fake API server (tests/fake_apiserver.py): routing, REST verbs, streaming.

Stand-in, not a cluster: see tests/fake_apiserver.py. This module holds what the protocol needs
(request records, faults, Status bodies, merge patch, selectors, chunked watch and log streams);
the state and the operator's part live in FakeApiServer, reached as `self.api`.
"""

from __future__ import annotations

import copy
import http.server
import json
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubetrain.manifests.kinds import KINDS, JobKind

Obj = dict[str, Any]
KIND_BY_PATH: dict[tuple[str, str, str], JobKind] = {(k.group, k.version, k.plural): k for k in KINDS}
_CR_PATH = re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?(?:/(status))?$")
_CORE_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|events)(?:/([^/]+))?(?:/(log))?$")
TRUE = ("1", "t", "T", "TRUE", "true", "True")  # what Go's strconv.ParseBool accepts


@dataclass(frozen=True)
class Request:
    """One request as RBAC sees it (verb, API group, resource[/subresource]) plus its details."""

    method: str
    path: str
    query: Mapping[str, str]
    verb: str
    group: str
    resource: str
    body: Any = None
    time: float = field(default_factory=time.monotonic)


@dataclass
class Fault:
    """Answer the next `times` requests matching `match` with `status` (None: close the socket)."""

    match: Callable[[Request], bool]
    status: int | None
    times: int
    retry_after: float | None = None
    message: str = "injected fault"


def status_body(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    """A metav1.Status object."""
    out: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": reason, "code": code}  # fmt: skip
    if details:
        out["details"] = details
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _selector_matches(selector: str, flat: Mapping[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if flat.get(key.rstrip("=!")) != value.lstrip("="):
            return False
    return True


def flat_fields(obj: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`a.b.c` → value for every scalar in an object (what field selectors address)."""
    out: dict[str, str] = {}
    for key, value in obj.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_fields(value, f"{path}."))
        elif not isinstance(value, list):
            out[path] = str(value)
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    """Routes one connection's requests to the FakeApiServer bound as `api`."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the body waits for the client's
    # delayed ACK (~40 ms a response), a latency no real API server has.
    disable_nagle_algorithm = True
    api: Any

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read `api.requests` instead."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- plumbing ---------------------------------------------------------------------------------

    def _send_json(self, code: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        """Close the connection without finishing the response (a load balancer cutting it)."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._send_json(400, status_body(400, "BadRequest", "the body is not JSON"))
            return
        route = self._route(method, url.path, query)
        if route is None:
            self._send_json(404, status_body(404, "NotFound", f"the server could not find the requested resource"
                                             f" ({method} {url.path})"))  # fmt: skip
            return
        verb, group, resource, action = route
        request = Request(method, url.path, query, verb, group, resource, body)
        self.api.record(request)
        fault = self.api._take_fault(request)
        try:
            if fault is not None:
                if fault.status is None:
                    self._drop()
                else:
                    headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                    self._send_json(fault.status, status_body(fault.status, "Injected", fault.message), headers)
                return
            action(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (a closed watch or log stream)

    def _route(
        self, method: str, path: str, query: Mapping[str, str]
    ) -> tuple[str, str, str, Callable[[Any], None]] | None:
        match = _CR_PATH.match(path)
        if match:
            group, version, ns, plural, name, sub = match.groups()
            kind = KIND_BY_PATH.get((group, version, plural))
            if kind is None:
                return None
            if name is None:
                if method == "GET" and query.get("watch") in TRUE:
                    return "watch", group, plural, lambda _b: self._watch(kind, ns, query)
                if method == "GET":
                    return "list", group, plural, lambda _b: self._list_jobs(kind, ns, query)
                if method == "POST":
                    return "create", group, plural, lambda b: self._send_json(*self.api.create(kind, ns, b, query))
                return None
            resource = f"{plural}/status" if sub else plural
            verbs = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
            if method not in verbs or (sub and method == "DELETE"):
                return None
            return verbs[method], group, resource, lambda b: self._job_item(method, kind, ns, name, bool(sub), b)
        match = _CORE_PATH.match(path)
        if match and method == "GET":
            ns, what, name, log = match.groups()
            if what == "events" and name is None:
                return "list", "", "events", lambda _b: self._list_events(ns, query)
            if what == "pods" and name is None:
                return "list", "", "pods", lambda _b: self._list_pods(ns, query)
            if what == "pods" and log:
                return "get", "", "pods/log", lambda _b: self._log(ns, name, query)
            if what == "pods":
                return "get", "", "pods", lambda _b: self._get_pod(ns, name)
        return None

    # -- custom resources -------------------------------------------------------------------------

    def _list_jobs(self, kind: JobKind, ns: str, query: Mapping[str, str]) -> None:
        selector = query.get("fieldSelector", "")
        with self.api.cv:
            items = [copy.deepcopy(o) for (p, n, _), o in self.api.objects.items() if p == kind.plural and n == ns
                     and _selector_matches(selector, flat_fields(o))]  # fmt: skip
            version = str(self.api.rv)
        self._send_json(200, {"apiVersion": kind.api_version, "kind": f"{kind.kind}List",
                              "metadata": {"resourceVersion": version}, "items": items})  # fmt: skip

    def _job_item(self, method: str, kind: JobKind, ns: str, name: str, status_sub: bool, body: Any) -> None:
        key = (kind.plural, ns, name)
        if method == "DELETE":
            self._send_json(*self.api.delete(kind, ns, name, body or {}))
            return
        with self.api.cv:
            obj = self.api.objects.get(key)
            if obj is None:
                self._send_json(404, status_body(404, "NotFound", f'{kind.plural}.{kind.group} "{name}" not found'))
                return
            if method == "GET":
                self._send_json(200, copy.deepcopy(obj))
                return
            content_type = self.headers.get("Content-Type", "")
            if method == "PATCH" and "merge-patch" not in content_type:
                self._send_json(415, status_body(415, "UnsupportedMediaType", f"unsupported patch {content_type}"))
                return
            patch = {"status": (body or {}).get("status")} if status_sub else (body or {})
            updated = (
                merge_patch(obj, patch) if method == "PATCH" else {**copy.deepcopy(body), "metadata": obj["metadata"]}
            )
            self.api.objects[key] = updated
            self.api._record("MODIFIED", key, updated)
            self._send_json(200, copy.deepcopy(updated))

    def _watch(self, kind: JobKind, ns: str, query: Mapping[str, str]) -> None:
        api = self.api
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in TRUE
        name = dict(t.split("=", 1) for t in filter(None, query.get("fieldSelector", "").split(","))).get(
            "metadata.name"
        )
        since_param = query.get("resourceVersion") or "0"
        with api.cv:
            epoch = api.cut_epoch
            drop_after = api.watch_drops.pop(0) if api.watch_drops else None
            expired = since_param != "0" and int(since_param) < api.compacted_rv
            since = api.rv if since_param == "0" else int(since_param)
            initial = [] if since_param != "0" else [
                copy.deepcopy(o) for (p, n, nm), o in api.objects.items()
                if p == kind.plural and n == ns and (name is None or nm == name)
            ]  # fmt: skip
        gone = status_body(410, "Expired", f"too old resource version: {since_param} ({api.compacted_rv})")
        if expired and api.gone_as_http:
            self._send_json(410, gone)
            return
        self._start_stream("application/json")
        if expired:
            self._chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            self._end_stream()
            return
        sent = 0
        last_bookmark = time.monotonic()
        pending = [(since, "ADDED", o) for o in initial]
        while True:
            for rv, etype, obj in pending:
                self._chunk(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
                since = max(since, rv)
                sent += 1
                if drop_after is not None and sent >= drop_after:
                    self._drop()
                    return
            if drop_after == 0:
                self._drop()
                return
            with api.cv:
                pending = api.watch_events(kind.plural, ns, name, since)
                while not pending and not api.stopping and api.cut_epoch == epoch:
                    now = time.monotonic()
                    if now >= deadline or (bookmarks and now - last_bookmark >= api.bookmark_seconds):
                        break
                    wake = deadline if not bookmarks else min(deadline, last_bookmark + api.bookmark_seconds)
                    api.cv.wait(max(0.001, wake - now))
                    pending = api.watch_events(kind.plural, ns, name, since)
                current = api.rv
                cut = api.cut_epoch != epoch
            if cut:
                self._drop()
                return
            if pending:
                continue
            if api.stopping or time.monotonic() >= deadline:
                self._end_stream()
                return
            # Nothing of ours changed up to `current`: tell the client it may resume from there.
            since = current
            last_bookmark = time.monotonic()
            mark = {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": {"resourceVersion": str(current)}}
            self._chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")

    # -- core -------------------------------------------------------------------------------------

    def _list_pods(self, ns: str, query: Mapping[str, str]) -> None:
        selector = query.get("labelSelector", "")
        with self.api.cv:
            items = [copy.deepcopy(p) for (n, _), p in self.api.pods.items()
                     if n == ns and _selector_matches(selector, p["metadata"].get("labels") or {})]  # fmt: skip
            version = str(self.api.rv)
        self._send_json(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": version},
                              "items": items})  # fmt: skip

    def _get_pod(self, ns: str, name: str) -> None:
        with self.api.cv:
            pod = copy.deepcopy(self.api.pods.get((ns, name)))
        if pod is None:
            self._send_json(404, status_body(404, "NotFound", f'pods "{name}" not found'))
        else:
            self._send_json(200, pod)

    def _list_events(self, ns: str, query: Mapping[str, str]) -> None:
        selector = query.get("fieldSelector", "")
        with self.api.cv:
            items = [copy.deepcopy(e) for e in self.api.events
                     if e["metadata"]["namespace"] == ns and _selector_matches(selector, flat_fields(e))]  # fmt: skip
        self._send_json(200, {"apiVersion": "v1", "kind": "EventList", "metadata": {"resourceVersion": "1"},
                              "items": items})  # fmt: skip

    def _log(self, ns: str, name: str, query: Mapping[str, str]) -> None:
        from tests.fake_apiserver import container_restarts

        api = self.api
        with api.cv:
            pod = copy.deepcopy(api.pods.get((ns, name)))
        if pod is None:
            self._send_json(404, status_body(404, "NotFound", f'pods "{name}" not found'))
            return
        names = [c["name"] for c in pod["spec"]["containers"]]
        container = query.get("container")
        if not container and len(names) != 1:
            self._send_json(400, status_body(400, "BadRequest", f"a container name must be specified for pod {name}, "
                                             f"choose one of: [{' '.join(names)}]"))  # fmt: skip
            return
        container = container or names[0]
        if container not in names:
            self._send_json(400, status_body(400, "BadRequest", f"container {container} is not valid for pod {name}"))
            return
        restarts = container_restarts(pod, container)
        previous = query.get("previous") in TRUE
        cstatus = next((c for c in pod["status"].get("containerStatuses") or () if c["name"] == container), {})
        waiting = (cstatus.get("state") or {}).get("waiting")
        if previous and restarts == 0:
            self._send_json(400, status_body(400, "BadRequest",
                                             f'previous terminated container "{container}" in pod "{name}" not found'))  # fmt: skip
            return
        if not previous and restarts == 0 and (waiting or not cstatus):
            reason = (waiting or {}).get("reason", "ContainerCreating")
            self._send_json(400, status_body(400, "BadRequest",
                                             f'container "{container}" in pod "{name}" is waiting to start: {reason}'))  # fmt: skip
            return
        instance = restarts - 1 if previous else restarts
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        key = (ns, name, container, instance)
        with api.cv:
            lines = list(api.logs.get(key, []))
        sent = len(lines)  # follow continues after everything that exists now
        if tail is not None:
            lines = lines[-tail:] if tail else []
        if previous or query.get("follow") not in TRUE:
            data = "".join(f"{line}\n" for line in lines).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._start_stream("text/plain")
        if lines:
            self._chunk("".join(f"{line}\n" for line in lines).encode())
        while True:
            with api.cv:
                current = api.pods.get((ns, name))
                ended = (api.stopping or current is None or current["status"].get("phase") in ("Succeeded", "Failed")
                         or container_restarts(current, container) != instance)  # fmt: skip
                new = list(api.logs.get(key, []))[sent:]
                if not new and not ended:
                    api.cv.wait(0.5)
                    continue
            if new:
                self._chunk("".join(f"{line}\n" for line in new).encode())
                sent += len(new)
            if ended:
                self._end_stream()
                return
