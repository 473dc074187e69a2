"""An in-process stand-in for the Kubeflow Pipelines v2beta1 REST API, for testing `kubetrain submit`.

A real HTTP server on a loopback port, so `kfp.Client` runs unmodified against it. It implements
the calls `submit` makes (healthz, list/upload pipelines and versions, list/create experiments,
create runs, read a run's state), checks what a real API server would reject (a missing or wrong bearer token, an
uploaded file that is not a compiled pipeline, a run naming an unknown pipeline version, run
parameters the pipeline does not declare), and records every request for the tests to inspect.
It is not KFP: nothing is scheduled, and only these endpoints exist (others answer 404).
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

API = "/apis/v2beta1"


@dataclass
class Recorded:
    """One request the stand-in received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeKfpState:
    """What the stand-in holds: pipelines (with versions and their specs), experiments, runs."""

    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # version id -> pipeline spec
    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_id(self, prefix: str) -> str:
        """A fresh id such as `pipeline-3`."""
        return f"{prefix}-{next(self.ids)}"


class _ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _equals_filter(raw: str | None) -> str | None:
    """The string value of a `display_name EQUALS` filter, as kfp.Client sends it."""
    if not raw:
        return None
    predicates = json.loads(raw).get("predicates", [])
    for p in predicates:
        if p.get("key") == "display_name":
            return str(p.get("stringValue") or p.get("string_value"))
    return None


def _multipart_file(content_type: str, body: bytes) -> bytes:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "uploadfile":
            payload = part.get_payload(decode=True)
            return payload if isinstance(payload, bytes) else b""
    raise _ApiError(400, "multipart body has no 'uploadfile' part")


def _pipeline_spec(data: bytes) -> dict[str, Any]:
    try:
        docs = [d for d in yaml.safe_load_all(data) if d is not None]
    except yaml.YAMLError as e:
        raise _ApiError(400, f"uploaded file is not YAML: {e}") from e
    spec = docs[0] if docs else None
    if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
        raise _ApiError(400, "uploaded file is not a compiled KFP pipeline (no pipelineInfo/root)")
    return spec


class FakeKfpApi:
    """Start with `with FakeKfpApi(token=...) as api:`; `api.url` is the host for kfp.Client."""

    def __init__(self, *, token: str | None = None) -> None:
        self.token = token
        self.state = FakeKfpState()
        # What GET /runs/ID answers on its 1st, 2nd, ... read (the last one from then on).
        self.run_states: list[str] = ["RUNNING", "SUCCEEDED"]
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-kfp-api", daemon=True)

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeKfpApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def requests_to(self, method: str, path: str) -> list[Recorded]:
        """Recorded requests with this method and path."""
        return [r for r in self.state.requests if r.method == method and r.path == path]

    # -- request handling ----------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self, method: str) -> None:
                split = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(split.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                record = Recorded(method, split.path, query, {k.lower(): v for k, v in self.headers.items()}, body)
                try:
                    with api._lock:
                        api.state.requests.append(record)
                        api._check_auth(record)
                        status, payload = api._route(record)
                except _ApiError as e:
                    status, payload = e.status, {"error": str(e), "code": 3, "message": str(e)}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        return Handler

    def _check_auth(self, r: Recorded) -> None:
        if self.token is None:
            return
        if r.headers.get("authorization") != f"Bearer {self.token}":
            raise _ApiError(401, "missing or wrong bearer token")

    def _route(self, r: Recorded) -> tuple[int, dict[str, Any]]:
        s = self.state
        if r.method == "GET" and r.path == f"{API}/healthz":
            return 200, {"multi_user": False, "pipeline_store": "database"}
        if r.method == "GET" and r.path == f"{API}/pipelines":
            wanted = _equals_filter(r.query.get("filter"))
            found = [p for p in s.pipelines.values() if wanted is None or p["display_name"] == wanted]
            return 200, ({"pipelines": found, "total_size": len(found)} if found else {})
        if r.method == "POST" and r.path == f"{API}/pipelines/upload":
            return 200, self._upload(r)
        if r.method == "POST" and r.path == f"{API}/pipelines/upload_version":
            return 200, self._upload_version(r)
        if r.method == "GET" and r.path.startswith(f"{API}/pipelines/") and r.path.endswith("/versions"):
            pipeline_id = r.path[len(f"{API}/pipelines/") : -len("/versions")]
            if pipeline_id not in s.pipelines:
                raise _ApiError(404, f"pipeline {pipeline_id} not found")
            versions = sorted(s.versions[pipeline_id], key=lambda v: v["created_at"], reverse=True)
            size = int(r.query.get("page_size") or len(versions))
            return 200, {"pipeline_versions": versions[:size], "total_size": len(versions)}
        if r.method == "GET" and r.path == f"{API}/experiments":
            wanted = _equals_filter(r.query.get("filter"))
            found = [e for e in s.experiments.values() if wanted is None or e["display_name"] == wanted]
            return 200, ({"experiments": found, "total_size": len(found)} if found else {})
        if r.method == "POST" and r.path == f"{API}/experiments":
            body = json.loads(r.body)
            if not body.get("display_name"):
                raise _ApiError(400, "experiment needs a display_name")
            exp = {"experiment_id": s.new_id("experiment"), "display_name": body["display_name"]}
            s.experiments[exp["experiment_id"]] = exp
            return 200, exp
        if r.method == "POST" and r.path == f"{API}/runs":
            return 200, self._create_run(json.loads(r.body))
        if r.method == "GET" and r.path.startswith(f"{API}/runs/"):
            run_id = r.path[len(f"{API}/runs/") :]
            if run_id not in s.runs:
                raise _ApiError(404, f"run {run_id} not found")
            run = s.runs[run_id]
            # A run moves one state further on each read, along `run_states` (the tests' script).
            states = self.run_states
            seen = run.setdefault("_reads", 0)
            run["_reads"] = seen + 1
            run["state"] = states[min(seen, len(states) - 1)]
            return 200, {k: v for k, v in run.items() if not k.startswith("_")}
        raise _ApiError(404, f"no such endpoint in the stand-in: {r.method} {r.path}")

    def _add_version(self, pipeline_id: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        s = self.state
        version = {
            "pipeline_id": pipeline_id,
            "pipeline_version_id": s.new_id("version"),
            "display_name": name,
            "created_at": f"2026-01-01T00:00:{next(s.ids):02d}Z",
        }
        s.versions.setdefault(pipeline_id, []).append(version)
        s.specs[version["pipeline_version_id"]] = spec
        return version

    def _upload(self, r: Recorded) -> dict[str, Any]:
        s = self.state
        spec = _pipeline_spec(_multipart_file(r.headers.get("content-type", ""), r.body))
        name = r.query.get("name") or spec["pipelineInfo"]["name"]
        if any(p["display_name"] == name for p in s.pipelines.values()):
            raise _ApiError(409, f"a pipeline named {name} exists")
        pipeline = {"pipeline_id": s.new_id("pipeline"), "display_name": name, "created_at": "2026-01-01T00:00:00Z"}
        s.pipelines[pipeline["pipeline_id"]] = pipeline
        self._add_version(pipeline["pipeline_id"], name, spec)
        return pipeline

    def _upload_version(self, r: Recorded) -> dict[str, Any]:
        pipeline_id = r.query.get("pipelineid", "")
        if pipeline_id not in self.state.pipelines:
            raise _ApiError(404, f"pipeline {pipeline_id!r} not found")
        if not r.query.get("name"):
            raise _ApiError(400, "a version needs a name")
        spec = _pipeline_spec(_multipart_file(r.headers.get("content-type", ""), r.body))
        return self._add_version(pipeline_id, r.query["name"], spec)

    def _create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        s = self.state
        if body.get("experiment_id") not in s.experiments:
            raise _ApiError(404, f"experiment {body.get('experiment_id')!r} not found")
        ref = body.get("pipeline_version_reference") or {}
        version_id = ref.get("pipeline_version_id")
        if version_id not in s.specs or ref.get("pipeline_id") not in s.pipelines:
            raise _ApiError(404, f"pipeline version {ref!r} not found")
        declared = s.specs[version_id]["root"].get("inputDefinitions", {}).get("parameters", {})
        params = (body.get("runtime_config") or {}).get("parameters") or {}
        unknown = sorted(set(params) - set(declared))
        if unknown:
            raise _ApiError(400, f"parameters {unknown} are not inputs of the pipeline")
        run = {**body, "run_id": s.new_id("run"), "state": "PENDING"}
        s.runs[run["run_id"]] = run
        return run
