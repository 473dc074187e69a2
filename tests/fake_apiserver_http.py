"""The HTTP side of the fake API server (tests/fake_apiserver.py): routing and the REST verbs.

Stand-in, not a cluster: see tests/fake_apiserver.py. The protocol's pieces (request records,
faults, Status bodies, merge patch, selectors) are in `fake_apiserver_proto`, the streamed answers
(watches, followed logs) in `fake_apiserver_streams`; the state and the operator's part live in
FakeApiServer, reached as `self.api`.
"""

from __future__ import annotations

import copy
import http.server
import json
import re
import socket
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubetrain.manifests.kinds import KINDS, JobKind
from tests.fake_apiserver_proto import (
    TRUE,
    Fault,
    Obj,
    Request,
    flat_fields,
    labels_match,
    merge_patch,
    parse_label_selector,
    selector_matches,
    status_body,
)
from tests.fake_apiserver_streams import serve_log, serve_watch

# Re-exported: the server and the tests import them from here.
__all__ = ["NETWORK_POLICY", "TRUE", "Fault", "Handler", "Request", "status_body"]
# A built-in kind the launcher creates beside a parameter-server JobSet (backends.kubernetes.companions).
NETWORK_POLICY = JobKind("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies", None, (), None, ())
KIND_BY_PATH: dict[tuple[str, str, str], JobKind] = {
    (k.group, k.version, k.plural): k for k in (*KINDS, NETWORK_POLICY)
}
_CR_PATH = re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?(?:/(status))?$")
_CORE_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|events)(?:/([^/]+))?(?:/(log))?$")


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

    def send_json(self, code: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        """A whole JSON response."""
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self, content_type: str) -> None:
        """Start a chunked response (a watch, a followed log)."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        """One chunk of a streamed response, sent at once."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self) -> None:
        """End a streamed response properly (the last, empty chunk)."""
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def drop(self) -> None:
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
            self.send_json(400, status_body(400, "BadRequest", "the body is not JSON"))
            return
        route = self._route(method, url.path, query)
        if route is None:
            self.send_json(404, status_body(404, "NotFound", f"the server could not find the requested resource"
                                             f" ({method} {url.path})"))  # fmt: skip
            return
        verb, group, resource, action = route
        request = Request(method, url.path, query, verb, group, resource, body)
        self.api.record(request)
        fault = self.api._take_fault(request)
        try:
            if fault is not None:
                if fault.status is None:
                    self.drop()
                else:
                    headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                    self.send_json(fault.status, status_body(fault.status, "Injected", fault.message), headers)
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
                    return "create", group, plural, lambda b: self.send_json(*self.api.create(kind, ns, b, query))
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
            if what == "pods" and name is None and query.get("watch") in TRUE:
                return "watch", "", "pods", lambda _b: self._watch_pods(ns, query)
            if what == "pods" and name is None:
                return "list", "", "pods", lambda _b: self._list_pods(ns, query)
            if what == "pods" and log:
                return "get", "", "pods/log", lambda _b: serve_log(self, ns, name, query)
            if what == "pods":
                return "get", "", "pods", lambda _b: self._get_pod(ns, name)
        return None

    # -- custom resources -------------------------------------------------------------------------

    def _list_jobs(self, kind: JobKind, ns: str, query: Mapping[str, str]) -> None:
        selector = query.get("fieldSelector", "")
        with self.api.cv:
            items = [copy.deepcopy(o) for (p, n, _), o in self.api.objects.items() if p == kind.plural and n == ns
                     and selector_matches(selector, flat_fields(o))]  # fmt: skip
            version = str(self.api.rv)
        self.send_json(200, {"apiVersion": kind.api_version, "kind": f"{kind.kind}List",
                              "metadata": {"resourceVersion": version}, "items": items})  # fmt: skip

    def _job_item(self, method: str, kind: JobKind, ns: str, name: str, status_sub: bool, body: Any) -> None:
        key = (kind.plural, ns, name)
        if method == "DELETE":
            self.send_json(*self.api.delete(kind, ns, name, body or {}))
            return
        with self.api.cv:
            obj = self.api.objects.get(key)
            if obj is None:
                self.send_json(404, status_body(404, "NotFound", f'{kind.plural}.{kind.group} "{name}" not found'))
                return
            if method == "GET":
                self.send_json(200, copy.deepcopy(obj))
                return
            content_type = self.headers.get("Content-Type", "")
            if method == "PATCH" and "merge-patch" not in content_type:
                self.send_json(415, status_body(415, "UnsupportedMediaType", f"unsupported patch {content_type}"))
                return
            patch = {"status": (body or {}).get("status")} if status_sub else (body or {})
            wanted = ((patch.get("metadata") or {}) if isinstance(patch, dict) else {}).get("uid")
            if method == "PATCH" and wanted is not None and wanted != obj["metadata"]["uid"]:
                # metadata.uid in a patch is a precondition on the real API server.
                self.send_json(409, status_body(409, "Conflict", f"Precondition failed: UID in precondition: "
                                                f"{wanted}, UID in object meta: {obj['metadata']['uid']}"))  # fmt: skip
                return
            updated = (
                merge_patch(obj, patch) if method == "PATCH" else {**copy.deepcopy(body), "metadata": obj["metadata"]}
            )
            self.api.objects[key] = updated
            self.api._record("MODIFIED", key, updated)
            self.send_json(200, copy.deepcopy(updated))

    def _watch(self, kind: JobKind, ns: str, query: Mapping[str, str]) -> None:
        name = dict(t.split("=", 1) for t in filter(None, query.get("fieldSelector", "").split(","))).get(
            "metadata.name"
        )

        def initial() -> list[Obj]:
            return [copy.deepcopy(o) for (p, n, nm), o in self.api.objects.items()
                    if p == kind.plural and n == ns and (name is None or nm == name)]  # fmt: skip

        def events(since: int) -> list[tuple[int, str, Obj]]:
            return list(self.api.watch_events(kind.plural, ns, name, since))

        serve_watch(self, kind.plural, query, initial, events, (kind.kind, kind.api_version))

    def _watch_pods(self, ns: str, query: Mapping[str, str]) -> None:
        terms = parse_label_selector(query.get("labelSelector", ""))
        if terms is None:
            self.send_json(400, status_body(400, "BadRequest", f"unable to parse requirement: "
                                             f"{query.get('labelSelector')!r}"))  # fmt: skip
            return

        def initial() -> list[Obj]:
            return [copy.deepcopy(p) for (n, _), p in self.api.pods.items()
                    if n == ns and labels_match(terms, p["metadata"].get("labels") or {})]  # fmt: skip

        def events(since: int) -> list[tuple[int, str, Obj]]:
            return [(rv, etype, obj) for rv, etype, obj in self.api.watch_events("pods", ns, None, since)
                    if labels_match(terms, obj["metadata"].get("labels") or {})]  # fmt: skip

        serve_watch(self, "pods", query, initial, events, ("Pod", "v1"))

    # -- core -------------------------------------------------------------------------------------

    def _list_pods(self, ns: str, query: Mapping[str, str]) -> None:
        terms = parse_label_selector(query.get("labelSelector", ""))
        if terms is None:
            self.send_json(400, status_body(400, "BadRequest", f"unable to parse requirement: "
                                             f"{query.get('labelSelector')!r}"))  # fmt: skip
            return
        with self.api.cv:
            items = [copy.deepcopy(p) for (n, _), p in self.api.pods.items()
                     if n == ns and labels_match(terms, p["metadata"].get("labels") or {})]  # fmt: skip
            version = str(self.api.rv)
        self.send_json(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": version},
                              "items": items})  # fmt: skip

    def _get_pod(self, ns: str, name: str) -> None:
        with self.api.cv:
            pod = copy.deepcopy(self.api.pods.get((ns, name)))
        if pod is None:
            self.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found'))
        else:
            self.send_json(200, pod)

    def _list_events(self, ns: str, query: Mapping[str, str]) -> None:
        selector = query.get("fieldSelector", "")
        with self.api.cv:
            items = [copy.deepcopy(e) for e in self.api.events
                     if e["metadata"]["namespace"] == ns and selector_matches(selector, flat_fields(e))]  # fmt: skip
        self.send_json(200, {"apiVersion": "v1", "kind": "EventList", "metadata": {"resourceVersion": "1"},
                              "items": items})  # fmt: skip
