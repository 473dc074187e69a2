"""`kubetrain submit` against hosts that are not a working KFP API: one line naming the host and the cause.

Real sockets on 127.0.0.1: a closed port, a tiny HTTP server answering every request with one
status (404, 401, 403), a TLS server whose self-signed certificate is made here, and a name under
`.invalid` (RFC 6761: never resolves). Each ends before anything is compiled or uploaded.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubetrain.cli import main
from kubetrain.errors import BackendError, ExitCode
from kubetrain.tooling.submit import preflight


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads a saved context from $HOME
    for name in ("KUBETRAIN_KFP_TOKEN", "KF_PIPELINES_IAP_OAUTH2_CLIENT_ID"):
        monkeypatch.delenv(name, raising=False)


@contextmanager
def answering(status: int, tls: ssl.SSLContext | None = None) -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.1 answering every request with `status`; yields its URL and the paths asked for."""
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            paths.append(self.path)
            body = b'{"error": "nope"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}", paths
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key: (cert.pem, key.pem)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kfp-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def _submit(host: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["submit", "mnist_pytorch", "--host", host, *extra])
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err  # one line, no traceback, no retry warnings
    return code, lines[0]


def test_connection_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, line = _submit(f"http://127.0.0.1:{port}", capsys)
    assert code == ExitCode.INFRASTRUCTURE
    assert line.startswith(f"kubetrain submit: http://127.0.0.1:{port}: cannot reach the KFP API: connection refused")
    assert line.endswith("is the port-forward running?); see docs/cluster.md#reaching-the-kfp-api")


def test_a_name_that_does_not_resolve(capsys: pytest.CaptureFixture[str]) -> None:
    code, line = _submit("http://kfp.kubetrain-test.invalid:8080", capsys)
    assert code == ExitCode.INFRASTRUCTURE
    assert "http://kfp.kubetrain-test.invalid:8080: cannot reach the KFP API: the host name does not resolve" in line
    assert line.endswith("; see docs/cluster.md#reaching-the-kfp-api")


def test_not_a_kfp_api(capsys: pytest.CaptureFixture[str]) -> None:
    with answering(404) as (url, paths):
        code, line = _submit(url, capsys)
    assert code == ExitCode.INFRASTRUCTURE
    assert f"{url}: no KFP API there (HTTP 404 for {url}/apis/v2beta1/healthz)" in line
    assert "(docs/cluster.md#reaching-the-kfp-api)" in line
    assert paths == ["/apis/v2beta1/healthz"]  # asked once, then stopped: no upload tried


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_credentials_refused(status: int, token: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    with answering(status) as (url, paths):
        code, line = _submit(url, capsys, *(["--token", token] if token else []))
    # The host refused us: exit 4, as for every other answer that stops a submission.
    assert code == ExitCode.INFRASTRUCTURE
    assert f"{url}: the KFP API refused the credentials (HTTP {status}); pass --token or --token-file" in line
    assert line.endswith("(docs/cluster.md#reaching-the-kfp-api)")
    assert paths == ["/apis/v2beta1/healthz"]


def test_an_untrusted_tls_certificate_and_the_ca_that_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with answering(404, tls) as (url, paths):
        code, line = _submit(url, capsys)
        assert code == ExitCode.INFRASTRUCTURE
        assert f"{url}: cannot reach the KFP API: its TLS certificate is not trusted" in line
        assert "pass --ca-cert PATH" in line
        assert paths == []  # the handshake failed: no request was made
        # Trusting its CA, the handshake succeeds and the answer (404 here) is what is reported.
        code, line = _submit(url, capsys, "--ca-cert", str(cert))
    assert code == ExitCode.INFRASTRUCTURE
    assert "no KFP API there (HTTP 404" in line
    assert paths == ["/apis/v2beta1/healthz"]


def test_a_ca_cert_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, line = _submit("https://127.0.0.1:1", capsys, "--ca-cert", str(tmp_path / "nope.pem"))
    assert code == ExitCode.INVALID_INPUT
    assert "--ca-cert" in line and "nope.pem does not exist" in line


@pytest.mark.parametrize("status", [401, 403])
def test_a_host_kfp_client_authenticates_itself_is_not_refused_by_the_preflight(
    status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kfp.Client fetches a GCP token by itself for `*.googleusercontent.com` (no --token): left to it."""
    asked: list[str] = []

    def refuse(request: urllib.request.Request, **_: Any) -> Any:
        asked.append(request.full_url)
        raise urllib.error.HTTPError(request.full_url, status, "Forbidden", Message(), None)

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    proxy = "https://1a2b3c-dot-us-central1.pipelines.googleusercontent.com"
    for host in (proxy, proxy + "/"):
        preflight(host, None)  # no error: kfp.Client gets its token and reports a refusal itself
    assert asked == [f"{proxy}/apis/v2beta1/healthz"] * 2
    # With a token of the user's own, a refusal is a refusal; and any other host is refused at once.
    for host, token in ((proxy, "user-token"), ("https://kfp.example.com", None)):
        with pytest.raises(BackendError, match=rf"refused the credentials \(HTTP {status}\)"):
            preflight(host, token)
