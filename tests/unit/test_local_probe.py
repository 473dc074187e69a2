"""Readiness probes of the local backend against real servers: tcpSocket, httpGet, exec, grpc."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from kubetrain.backends.local.probe import ProbeLoop, build_check

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check(probe: dict[str, object], ports: dict[str, int] | None = None) -> bool:
    check = build_check(probe, address="127.0.0.1", ports=ports or {}, exec_argv=list, env={"PATH": "/usr/bin:/bin"})
    return check()


def test_tcp_probe_by_number_and_by_port_name(listening: int) -> None:
    assert _check({"tcpSocket": {"port": listening}})
    assert _check({"tcpSocket": {"port": "grpc"}}, ports={"grpc": listening})
    assert not _check({"tcpSocket": {"port": _free_port()}})
    with pytest.raises(ValueError, match="named container port"):
        _check({"tcpSocket": {"port": "missing"}})


def test_exec_probe_passes_on_exit_zero() -> None:
    assert _check({"exec": {"command": ["true"]}})
    assert not _check({"exec": {"command": ["false"]}})
    assert not _check({"exec": {"command": ["/no/such/probe"]}})


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/ready" else 503)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


def test_http_probe_wants_a_2xx_or_3xx() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert _check({"httpGet": {"path": "/ready", "port": port}})
        assert not _check({"httpGet": {"path": "/starting", "port": port}})
    finally:
        server.shutdown()
        server.server_close()


def test_grpc_probe_asks_the_health_service() -> None:
    grpc = pytest.importorskip("grpc")
    health = pytest.importorskip("grpc_health.v1.health")
    from concurrent import futures

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert not _check({"grpc": {"port": port}})  # listening is not enough: it must be SERVING
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        assert _check({"grpc": {"port": port}})
    finally:
        server.stop(0)
    assert not _check({"grpc": {"port": _free_port()}})


def test_probe_loop_turns_ready_after_success_and_unready_after_failures() -> None:
    results = iter([False, True, False, False, True] + [True] * 1000)
    changed = threading.Event()
    loop = ProbeLoop(
        lambda: next(results),
        {"periodSeconds": 1, "failureThreshold": 2},
        max_period=0.01,
        on_change=changed.set,
    )
    try:
        states = []
        for _ in range(3):
            assert changed.wait(10)
            changed.clear()
            states.append(loop.ready)
        assert states == [True, False, True]
    finally:
        loop.stop()
