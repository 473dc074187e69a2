"""The per-job token that every call to a PS master or server must carry.

Any pod that can reach the master's or a shard's port could otherwise report tasks done, push
gradients or stop a shard. The job's NetworkPolicy (manifests.jobset) keeps them out only where
the network plugin enforces it, which the plain bridge plugin does not: this token is what
keeps other pods out everywhere. It is not in the manifest (any
reader of the JobSet would see it) but drawn at random by the first of the job's processes to
start and kept in a file on the job's own volume (next to the master's state), mode 0600: only
pods that mount that claim can read it, and those can already change the checkpoints.
Clients send it as call metadata on every call (`TokenClientInterceptor`); servers check it in
one interceptor (`RequireTokenInterceptor`), in constant time, before any handler runs, and a
call without it is refused before its request is read (`_refusal`): calls held half-open or
hundreds of megabytes sent without the token cost the server neither a thread nor the memory.
The health service stays open: the kubelet's gRPC probes send no metadata, and it tells nothing
but SERVING (it reads no request either, `ps.common.rpc.HealthReporter`).
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from kubetrain.ps.common.errors import CheckpointError

__all__ = [
    "OPEN_METHODS",
    "TOKEN_METADATA",
    "RequireTokenInterceptor",
    "TokenClientInterceptor",
    "ensure_token",
    "token_metadata",
]

TOKEN_METADATA = "kubetrain-job-token"
# The kubelet's readiness probes and wait_serving call it without metadata. Only Check: a Watch
# would hold a server thread for as long as its caller likes.
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check"})


def ensure_token(path: Path) -> str:
    """The job's token at `path`, drawn and written there first if there is none (first one wins)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            try:
                os.link(tmp, path)  # atomic and never overwrites: a racing process's token wins
            except FileExistsError:
                pass
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        token = path.read_text().strip()
    except OSError as e:
        raise CheckpointError(f"job token {path}: {e.strerror or e}") from e
    if len(token) < 32:
        raise CheckpointError(f"job token {path}: holds {len(token)} characters; expected a random token (delete it)")
    return token


def token_metadata(token: str) -> tuple[tuple[str, str]]:
    """The call metadata carrying `token`."""
    return ((TOKEN_METADATA, token),)


def _refusal(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """A handler that answers UNAUTHENTICATED the moment the call arrives, its request unread.

    It is request-streaming whatever the method's shape: gRPC's sync server hands a unary handler
    its request only after reading all of it on one of the server's threads, so a caller that
    opens calls and never sends (half-open) would hold every thread, and one that sends hundreds
    of megabytes would have them read into memory, all before the refusal. A streaming handler
    runs at once and never asks for the request: no thread waits on it, and none of its bytes
    are taken in beyond HTTP/2's flow-control window.
    """
    # The message names the method only: nothing the caller sent is echoed back or logged.
    message = f"{method}: missing or wrong job token; only the job's own pods may call it"

    def refuse(request_iterator: Any, context: grpc.ServicerContext) -> Any:
        del request_iterator  # never read
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    return grpc.stream_unary_rpc_method_handler(refuse)


class RequireTokenInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Refuses (UNAUTHENTICATED) every call but the health service's that lacks the job's token."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        """Pass the call on when it carries the token (or is a health check), else refuse it."""
        method: str = handler_call_details.method
        handler = continuation(handler_call_details)
        if handler is None or method in OPEN_METHODS:
            return handler
        given = dict(handler_call_details.invocation_metadata or ()).get(TOKEN_METADATA)
        if isinstance(given, str) and hmac.compare_digest(given.encode("utf-8", "replace"), self._token):
            return handler
        return _refusal(handler, method)


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,  # type: ignore[misc]
):
    pass


class TokenClientInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds the job's token to the metadata of every call made on the channel."""

    def __init__(self, token: str) -> None:
        self._metadata = token_metadata(token)

    def _with_token(self, details: grpc.ClientCallDetails) -> _CallDetails:
        metadata = [m for m in (details.metadata or ()) if m[0] != TOKEN_METADATA]
        return _CallDetails(
            details.method,
            details.timeout,
            [*metadata, *self._metadata],
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Call on with the token added."""
        return continuation(self._with_token(client_call_details), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Call on with the token added."""
        return continuation(self._with_token(client_call_details), request)

    def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        """Call on with the token added."""
        return continuation(self._with_token(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        """Call on with the token added."""
        return continuation(self._with_token(client_call_details), request_iterator)
