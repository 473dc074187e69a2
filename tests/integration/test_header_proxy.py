"""hdrproxy, the multi-user tier's pod-facing entry, as the binary the tier runs: a real gRPC client and
server (grpcio, the health service) and a REST upstream on loopback, the command line from
tools/cluster/header_proxy.py. A pod that forges `kubeflow-userid` reaches the API server without it;
its token, calls, streams and the server's answers pass. The Go tests (tools/hdrproxy/main_test.go)
check the same against Go's own HTTP/2; this checks it against the C-core gRPC stack Python uses.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tools.cluster import header_proxy

pytestmark = pytest.mark.timeout(180)  # a cold Go build cache: the standard library first, ~20 s alone
if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
    pytest.skip("Go is not installed (tools/hdrproxy is built with it)", allow_module_level=True)

FORGED = [("kubeflow-userid", "bob@example.com"), ("x-ui-user", "bob@example.com")]
TOKEN = "Bearer pod-token"


@dataclass
class Seen:
    """What the upstreams received, per call."""

    rest: list[dict[str, str]] = field(default_factory=list)
    grpc: list[dict[str, str]] = field(default_factory=list)


class _Recorder(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        self.seen.grpc.append(dict(details.invocation_metadata))
        return continuation(details)


@dataclass
class Proxied:
    seen: Seen
    rest: str
    grpc: str
    health: health.HealthServicer


@pytest.fixture(scope="module")
def proxied() -> Iterator[Proxied]:
    seen = Seen()

    class Upstream(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.rest.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(403)  # the API server's answer to a SAR it denies
            self.send_header("Content-Length", str(len(body) + 5))
            self.end_headers()
            self.wfile.write(b"echo:" + body)

        def log_message(self, *args: object) -> None:
            pass

    rest = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=rest.serve_forever, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[_Recorder(seen)])
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    argv = header_proxy.argv(
        header_proxy.build(),
        listen_http="127.0.0.1:0", upstream_http=f"127.0.0.1:{rest.server_address[1]}",
        listen_grpc="127.0.0.1:0", upstream_grpc=f"127.0.0.1:{grpc_port}",
        strip_headers=["x-ui-user"],
    )  # fmt: skip
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        listening: dict[str, str] = {}
        assert proc.stderr is not None
        while len(listening) < 2:  # each listener logs its address once it accepts
            line = proc.stderr.readline()
            assert line, f"hdrproxy exited ({proc.wait()}) before both listeners were up"
            if m := re.search(r"hdrproxy: (http|grpc) (\S+) -> ", line):
                listening[m[1]] = m[2]
        yield Proxied(seen, listening["http"], listening["grpc"], servicer)
    finally:
        proc.terminate()
        proc.wait()
        server.stop(None)
        rest.shutdown()


def test_rest_call_loses_the_forged_header_and_keeps_token_body_and_status(proxied: Proxied) -> None:
    req = urllib.request.Request(f"http://{proxied.rest}/apis/v2beta1/runs", data=b"{}", method="POST")
    for name, value in [*FORGED, ("KUBEFLOW-USERID", "bob@example.com"), ("Authorization", TOKEN)]:
        req.add_header(name, value)
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(req, timeout=30)
    assert denied.value.code == 403 and denied.value.read() == b"echo:{}"
    got = proxied.seen.rest[-1]
    assert "kubeflow-userid" not in got and "x-ui-user" not in got
    assert got["authorization"] == TOKEN


def test_grpc_call_and_stream_lose_the_forged_metadata_and_keep_the_token(proxied: Proxied) -> None:
    metadata = [*FORGED, ("authorization", TOKEN)]
    with grpc.insecure_channel(proxied.grpc) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(), metadata=metadata, timeout=30)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        # A server stream: the second message is sent only after the first arrived here.
        proxied.health.set("kfp", health_pb2.HealthCheckResponse.SERVING)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="kfp"), metadata=metadata, timeout=30)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        proxied.health.set("kfp", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()
        with pytest.raises(grpc.RpcError) as missing:  # the server's status comes back through trailers
            stub.Check(health_pb2.HealthCheckRequest(service="nope"), metadata=metadata, timeout=30)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert len(proxied.seen.grpc) == 3
    for got in proxied.seen.grpc:
        assert "kubeflow-userid" not in got and "x-ui-user" not in got
        assert got["authorization"] == TOKEN
