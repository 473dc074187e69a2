"""gRPC plumbing shared by the master, the parameter servers and the workers.

Servers answer the standard `grpc.health.v1.Health/Check` and turn SERVING only once ready,
so Kubernetes readiness probes (`grpc:` probes or grpc_health_probe) mean "serving". Clients
retry calls that fail because the peer is down or restarting (UNAVAILABLE, DEADLINE_EXCEEDED)
with capped exponential backoff up to a deadline; gRPC itself never retries them (the same
stance as torch RPC, pytorch#73601), so the application must.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kubetrain.ps.common.errors import PSCallError, PSConfigError, PSUnavailableError
from kubetrain.ps.common.jobtoken import RequireTokenInterceptor, TokenClientInterceptor

__all__ = [
    "RETRYABLE",
    "Backoff",
    "HealthReporter",
    "bind",
    "call_with_retry",
    "make_channel",
    "make_server",
    "parse_addr",
    "parse_addrs",
    "wait_serving",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
HEALTH_SERVICE = "grpc.health.v1.Health"

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
# gRPC turns SO_REUSEPORT on by default: two servers on one port would then both bind and share
# connections at random. Each replica must own its address:port, so a clash has to fail loudly.
_SERVER_OPTIONS = [*_OPTIONS, ("grpc.so_reuseport", 0)]
# Codes that mean "the peer is not there right now", not "the request is wrong".
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})
_ADDR_RE = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def parse_addr(addr: str, *, what: str = "address") -> str:
    """Validate one `host:port` address (host name, IPv4 or [IPv6]); returns it stripped."""
    addr = addr.strip()
    m = _ADDR_RE.match(addr)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise PSConfigError(f"{what}: got {addr!r}; expected host:port, e.g. 127.0.0.2:50051")
    return addr


def parse_addrs(addrs: str | Iterable[str], *, what: str = "--ps-addrs") -> list[str]:
    """Validate a comma-separated list (or an iterable) of `host:port` addresses."""
    items = addrs.split(",") if isinstance(addrs, str) else list(addrs)
    out = [parse_addr(a, what=what) for a in items if a.strip()]
    if not out:
        raise PSConfigError(f"{what}: got {addrs!r}; expected at least one host:port")
    return out


def make_server(max_workers: int = 16, *, token: str | None) -> grpc.Server:
    """A thread-pool gRPC server with large message limits and no port sharing.

    With `token`, every call but a health check must carry it (ps.common.jobtoken); None only for
    servers that are not a job's (test stand-ins).
    """
    interceptors = [] if token is None else [RequireTokenInterceptor(token)]
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers), options=_SERVER_OPTIONS, interceptors=interceptors
    )


# A peer that restarts must be found again within a second: gRPC's default reconnect backoff
# grows to 120 s, so a client whose first attempts hit the restart could miss the peer's return
# (and a job that finished meanwhile) for minutes. A master restarts as a new pod with a new
# address (restartPolicy Never, manifests.jobset): its name must be resolved again as soon, not
# after gRPC's default 30 s between DNS resolutions.
_CHANNEL_OPTIONS = [
    *_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.dns_min_time_between_resolutions_ms", 1000),
]


def make_channel(addr: str, *, token: str | None) -> grpc.Channel:
    """An insecure channel to `addr`: the servers' message limits, reconnect backoff capped at 1 s.

    With `token`, every call on it carries the job's token (ps.common.jobtoken).
    """
    channel = grpc.insecure_channel(addr, options=_CHANNEL_OPTIONS)
    return channel if token is None else grpc.intercept_channel(channel, TokenClientInterceptor(token))


class HealthReporter:
    """The server's grpc.health.v1 `Check`: NOT_SERVING until `serving()` is called.

    Every service of a PS server is ready at the same moment, so `Check` answers the server's one
    status without reading the request (the service it names): the method is open to callers
    without the job's token (the kubelet's probes), and a handler that read its request would let
    any pod hold a server thread with a call it never sends, or make it read a huge one
    (ps.common.jobtoken). `Watch` is not served (UNIMPLEMENTED); the kubelet only calls `Check`.
    """

    def __init__(self, server: grpc.Server) -> None:
        self._status: int = health_pb2.HealthCheckResponse.NOT_SERVING
        check = grpc.stream_unary_rpc_method_handler(
            self._check, response_serializer=health_pb2.HealthCheckResponse.SerializeToString
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(HEALTH_SERVICE, {"Check": check}),))

    def _check(self, request_iterator: Iterable[bytes], context: grpc.ServicerContext) -> Any:
        del request_iterator, context  # never read: see the class docstring
        return health_pb2.HealthCheckResponse(status=self._status)

    def serving(self) -> None:
        """Report SERVING."""
        self._status = health_pb2.HealthCheckResponse.SERVING

    def not_serving(self) -> None:
        """Report NOT_SERVING (shutting down)."""
        self._status = health_pb2.HealthCheckResponse.NOT_SERVING


class Backoff:
    """Capped exponential backoff with jitter, bounded by an overall deadline."""

    def __init__(self, *, deadline_s: float, first_s: float = 0.05, cap_s: float = 2.0) -> None:
        self._deadline = time.monotonic() + deadline_s
        self._delay = first_s
        self._cap = cap_s

    def expired(self) -> bool:
        """True once the deadline has passed."""
        return time.monotonic() >= self._deadline

    def wait(self, stop: threading.Event | None = None) -> bool:
        """Sleep the next delay (less if the deadline is nearer); False if past the deadline."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return False
        delay = min(self._delay * (0.5 + random.random()), left)
        self._delay = min(self._delay * 2, self._cap)
        if stop is not None:
            return not stop.wait(delay)
        time.sleep(delay)
        return True


def call_with_retry(
    fn: Callable[[], T],
    *,
    what: str,
    deadline_s: float,
    stop: threading.Event | None = None,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """Call `fn` until it succeeds, retrying RETRYABLE gRPC errors until `deadline_s` passes.

    `on_retry` runs after every retryable failure and may raise to end the retries early, e.g.
    when the peer is not restarting but gone because the job already ended.
    """
    backoff = Backoff(deadline_s=deadline_s)
    attempts = 0
    while True:
        attempts += 1
        try:
            return fn()
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            if code not in RETRYABLE:
                details = e.details() if isinstance(e, grpc.Call) else repr(e)
                raise PSCallError(f"{what}: {code}: {details}") from e
            if on_retry is not None:
                on_retry()
            if attempts == 1 or attempts % 20 == 0:
                log.info("%s: %s (attempt %d); retrying", what, code, attempts)
            if not backoff.wait(stop):
                raise PSUnavailableError(
                    f"{what}: peer unreachable for {deadline_s:.0f}s after {attempts} attempts "
                    f"(last: {code}); is it running, and is the address right?"
                ) from e


def wait_serving(addr: str, *, deadline_s: float, service: str = "") -> None:
    """Block until the server at `addr` reports SERVING on its health service."""
    backoff = Backoff(deadline_s=deadline_s, cap_s=0.5)
    last = "no answer"
    with make_channel(addr, token=None) as ch:  # the health service needs no token
        stub = health_pb2_grpc.HealthStub(ch)
        while True:
            try:
                resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
            except grpc.RpcError as e:
                last = str(e.code()) if isinstance(e, grpc.Call) else repr(e)
            if not backoff.wait():
                raise PSUnavailableError(f"{addr}: not SERVING after {deadline_s:.0f}s (last: {last})")


def bind(server: grpc.Server, host: str, port: int) -> int:
    """Listen on host:port (insecure); PSConfigError naming the address if it is taken."""
    target = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(target)
    except RuntimeError as e:
        raise PSConfigError(f"cannot listen on {target}: {e}; is another process using it?") from e
    if bound == 0:
        raise PSConfigError(f"cannot listen on {target}; is another process using it?")
    return int(bound)
