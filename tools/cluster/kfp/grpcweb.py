"""gRPC-web for the MLMD server's handlers: what Envoy's grpc_web filter does in front of MLMD in a cluster.

The KFP UI's browser code calls MLMD with gRPC-web (`POST /ml_metadata.MetadataStoreService/<Method>`,
`application/grpc-web+proto` or `-text`) on its own origin; the UI's Node server forwards those
requests, as HTTP/1.1, to METADATA_ENVOY_SERVICE_SERVICE_HOST:PORT. Debian has no Envoy, so the MLMD
server (mlmd_server.py) answers them itself on a second listener, with the same raw-bytes handlers
its gRPC port uses: no extra process and no extra hop. Every MLMD method is unary. Standard library
only, so the framing is tested in the project's venv.
"""

from __future__ import annotations

import base64
import struct
import sys
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DATA = 0x00
TRAILER = 0x80
UNIMPLEMENTED = 12
INTERNAL = 13
Handler = Callable[[bytes, Any], bytes]


def unframe(body: bytes) -> list[tuple[int, bytes]]:
    """The (flag, payload) frames of a gRPC-web body: 1 flag byte, a 4-byte big-endian length, the payload.

    Raises ValueError for a body that ends inside a frame (a truncated request).
    """
    out, i = [], 0
    while i < len(body):
        if i + 5 > len(body):
            raise ValueError(f"gRPC-web body truncated in a frame header at byte {i} of {len(body)}")
        flag, length = struct.unpack(">BI", body[i : i + 5])
        if i + 5 + length > len(body):
            raise ValueError(f"gRPC-web frame at byte {i} says {length} bytes; only {len(body) - i - 5} follow")
        out.append((flag, body[i + 5 : i + 5 + length]))
        i += 5 + length
    return out


def frame(flag: int, payload: bytes) -> bytes:
    """One gRPC-web frame."""
    return struct.pack(">BI", flag, len(payload)) + payload


class CallContext:
    """The part of grpc.ServicerContext the MLMD handlers use: a status code and its details."""

    def __init__(self) -> None:
        self.code = 0
        self.details = ""

    def set_code(self, code: Any) -> None:
        """Take a grpc.StatusCode (its number is value[0]) or a plain number."""
        self.code = int(code.value[0]) if hasattr(code, "value") else int(code)

    def set_details(self, details: str) -> None:
        """The status message sent in the trailer."""
        self.details = details


def answer(service: str, handlers: Mapping[str, Handler], path: str, body: bytes, *, text: bool) -> bytes:
    """The gRPC-web response body to a request `body` on `path`: a data frame (on success) and the trailer."""
    raw = base64.b64decode(body) if text else body
    prefix = f"/{service}/"
    handler = handlers.get(path[len(prefix) :]) if path.startswith(prefix) else None
    context = CallContext()
    reply: bytes | None = None
    if handler is None:
        context.set_code(UNIMPLEMENTED)
        context.set_details(f"no method {path} here (this server serves {service})")
    else:
        try:
            messages = [payload for flag, payload in unframe(raw) if not flag & TRAILER]
        except ValueError as e:
            context.set_code(INTERNAL)
            context.set_details(str(e))
        else:
            reply = handler(messages[0] if messages else b"", context)
    out = frame(DATA, reply) if reply is not None and context.code == 0 else b""
    trailer = f"grpc-status:{context.code}\r\ngrpc-message:{urllib.parse.quote(context.details)}\r\n"
    out += frame(TRAILER, trailer.encode())
    return base64.b64encode(out) if text else out


def server(host: str, port: int, service: str, handlers: Mapping[str, Handler]) -> ThreadingHTTPServer:
    """An HTTP/1.1 server answering gRPC-web POSTs for `service` with `handlers` (not yet serving)."""

    class _Request(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per UI poll would drown the MLMD log; failures are logged by the handlers

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data = b""
            while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data

        def do_POST(self) -> None:
            kind = self.headers.get("Content-Type", "application/grpc-web+proto")
            text = kind.startswith("application/grpc-web-text")
            out = answer(service, handlers, self.path, self._body(), text=text)
            self.send_response(200)
            reply_type = "application/grpc-web-text+proto" if text else "application/grpc-web+proto"
            self.send_header("Content-Type", reply_type)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    httpd = ThreadingHTTPServer((host, port), _Request)
    httpd.daemon_threads = True
    return httpd


def serve_in_background(httpd: ThreadingHTTPServer, name: str) -> threading.Thread:
    """Serve `httpd` on a daemon thread; say where on stderr."""
    host, port = httpd.server_address[:2]
    thread = threading.Thread(target=httpd.serve_forever, name=name, daemon=True)
    thread.start()
    print(f"{name}: serving gRPC-web on {host!s}:{port}", file=sys.stderr, flush=True)
    return thread
