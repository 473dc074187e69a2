"""Readiness probes, run against a local replica the way the kubelet runs them against a pod.

- `tcpSocket`: a TCP connection to the replica's address (or `host`) and port is accepted;
- `grpc`: `grpc.health.v1.Health/Check` answers SERVING (with grpcio and grpcio-health-checking
  installed; without them, a TCP connection to the port);
- `httpGet`: an HTTP status in 200..399;
- `exec`: the command exits 0 (run with the replica's environment);
- no probe: ready once the process has started.

Probes run every `periodSeconds` capped by the backend's probe period (locally there is no
reason to wait 10 s between probes), after `initialDelaySeconds`; a replica becomes ready after
`successThreshold` consecutive successes and unready after `failureThreshold` failures.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ProbeCheck = Callable[[], bool]


def _port(value: object, ports: Mapping[str, int]) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, str) and value in ports:
        return ports[value]
    raise ValueError(f"probe port {value!r} is neither a number nor a named container port ({sorted(ports)})")


def tcp_check(host: str, port: int, timeout: float) -> bool:
    """Whether a TCP connection to host:port is accepted."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def grpc_check(host: str, port: int, service: str, timeout: float) -> bool:
    """grpc.health.v1 Check == SERVING, or a TCP connect when grpc health checking is not installed."""
    try:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError:
        return tcp_check(host, port, timeout)
    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.RpcError:
        return False
    finally:
        channel.close()


def http_check(url: str, timeout: float) -> bool:
    """Whether GET url answers with a status in 200..399."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return 200 <= int(reply.status) < 400
    except urllib.error.HTTPError as e:
        return 200 <= e.code < 400
    except (urllib.error.URLError, OSError):
        return False


def exec_check(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> bool:
    """Whether the command exits 0 within the timeout."""
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def build_check(
    probe: Mapping[str, Any],
    *,
    address: str,
    ports: Mapping[str, int],
    exec_argv: Callable[[Sequence[str]], Sequence[str] | None],
    env: Mapping[str, str],
) -> ProbeCheck:
    """The check function for one probe spec (`exec_argv` translates an exec command locally)."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    if "tcpSocket" in probe:
        spec = probe["tcpSocket"] or {}
        host, port = str(spec.get("host") or address), _port(spec.get("port"), ports)
        return lambda: tcp_check(host, port, timeout)
    if "grpc" in probe:
        spec = probe["grpc"] or {}
        gport, service = _port(spec.get("port"), ports), str(spec.get("service") or "")
        return lambda: grpc_check(address, gport, service, timeout)
    if "httpGet" in probe:
        spec = probe["httpGet"] or {}
        scheme = str(spec.get("scheme") or "HTTP").lower()
        path = str(spec.get("path") or "/")
        url = f"{scheme}://{spec.get('host') or address}:{_port(spec.get('port'), ports)}{path}"
        return lambda: http_check(url, timeout)
    if "exec" in probe:
        argv = exec_argv(list((probe["exec"] or {}).get("command") or []))
        if argv is None:
            return lambda: False
        resolved = list(argv)
        return lambda: exec_check(resolved, env, timeout)
    raise ValueError(f"probe {dict(probe)!r} has none of tcpSocket, grpc, httpGet, exec")


class ProbeLoop:
    """Runs one readiness probe in a thread and keeps the replica's Ready state."""

    def __init__(
        self, check: ProbeCheck, probe: Mapping[str, Any], *, max_period: float, on_change: Callable[[], None]
    ):
        self._check = check
        self._period = min(float(probe.get("periodSeconds") or 10), max_period)
        self._delay = min(float(probe.get("initialDelaySeconds") or 0), max_period * 4)
        self._success_threshold = int(probe.get("successThreshold") or 1)
        self._failure_threshold = int(probe.get("failureThreshold") or 3)
        self._on_change = on_change
        self._stop = threading.Event()
        self.ready = False
        self._thread = threading.Thread(target=self._run, name="kubetrain-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._stop.wait(self._delay):
            return
        successes = failures = 0
        while not self._stop.is_set():
            ok = self._check()
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if not self.ready and successes >= self._success_threshold:
                self.ready = True
                self._on_change()
            elif self.ready and failures >= self._failure_threshold:
                self.ready = False
                self._on_change()
            if self._stop.wait(self._period):
                return

    def stop(self) -> None:
        """Stop probing (the replica's process is gone)."""
        self._stop.set()
        self.ready = False
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
