"""The multi-user tier's pod-facing entry to the KFP API server: hdrproxy (tools/hdrproxy).

KFP's API server with `MULTIUSER=true` takes the caller from a `kubeflow-userid` header, which only
the user-facing entry may set; pods reach the API through hdrproxy, which deletes that header (and
any other named) from every request, so a pod authenticates with a service-account token
(audience `pipelines.kubeflow.org`) or not at all. docs/design/multi-user.md, "Identity flows".

`build()` builds the binary if missing (one Go package over the standard library: a second or
so); `argv()` is the pure command line that serves one REST and one gRPC listener.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tools.cluster import build_script

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tools" / "hdrproxy" / "build.sh"
# What hdrproxy always deletes: the API server's KUBEFLOW_USERID_HEADER as the tier sets it.
USERID_HEADER = "kubeflow-userid"
# An HTTP header name is a token (RFC 9110, section 5.6.2).
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class HeaderProxyError(RuntimeError):
    """hdrproxy could not be built, or its command line was given a bad value; the message says which."""


def build() -> Path:
    """The hdrproxy binary, built first if missing (tools/hdrproxy/build.sh)."""
    try:
        return build_script.build(BUILD_SCRIPT) / "hdrproxy"
    except build_script.BuildScriptError as e:
        raise HeaderProxyError(str(e)) from e


def _address(flag: str, value: str, *, lowest: int = 1) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not lowest <= int(port) < 65536:
        raise HeaderProxyError(
            f"hdrproxy {flag}={value!r}: expected HOST:PORT, port {lowest}-65535 (e.g. 10.244.0.1:18880)"
        )
    return value


def argv(
    binary: Path,
    *,
    listen_http: str,
    upstream_http: str,
    listen_grpc: str,
    upstream_grpc: str,
    strip_headers: Sequence[str] = (),
) -> list[str]:
    """The command that serves REST on `listen_http` (to `upstream_http` over HTTP/1.1) and gRPC on
    `listen_grpc` (to `upstream_grpc` over cleartext HTTP/2), each HOST:PORT, deleting
    `kubeflow-userid` and every name in `strip_headers` (e.g. the UI's KUBEFLOW_USERID_HEADER if it
    differs) in any letter case. A listen port 0 takes a free port; the binary logs each listener
    as `hdrproxy: http|grpc ADDRESS -> UPSTREAM` once it accepts connections.
    """
    out = [
        str(binary),
        f"--listen-http={_address('--listen-http', listen_http, lowest=0)}",
        f"--upstream-http={_address('--upstream-http', upstream_http)}",
        f"--listen-grpc={_address('--listen-grpc', listen_grpc, lowest=0)}",
        f"--upstream-grpc={_address('--upstream-grpc', upstream_grpc)}",
    ]
    for name in strip_headers:
        if not _TOKEN.fullmatch(name):
            raise HeaderProxyError(f"hdrproxy --strip-header={name!r}: not an HTTP header name (letters, digits, '-')")
        out.append(f"--strip-header={name}")
    return out
