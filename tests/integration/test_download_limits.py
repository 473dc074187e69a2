"""Downloads that must end: a server that drips, redirects to where kubetrain does not go.

Real loopback servers (plain and TLS). The dripping server sends one byte at a time for as long as
the client listens; the limits are configured small so the test is quick, and the drip is orders
of magnitude below them, so the outcome does not depend on the machine's speed.
"""

from __future__ import annotations

import http.server
import io
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from kubetrain.data.download import download
from kubetrain.data.errors import DataError, DownloadUnavailableError
from kubetrain.data.http import RetryPolicy
from kubetrain.errors import ExitCode
from tests.data_helpers import LoopbackServer
from tests.unit.test_submit_unreachable import self_signed

# The drips' limit: far above a drip (100 bytes/s), and below what a loopback transfer does on an
# idle machine, not on one whose two cores a cold Go build shares (a 500-byte file once took 0.3 s).
QUICK = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0, timeout=10, min_speed=100_000, speed_window=0.2)
# The redirect cases test where kubetrain goes, not how fast: the default speed limit.
NO_DELAY = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0, timeout=10)


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """`handler` on 127.0.0.1; yields the server's base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, x=np.zeros((10, 2), np.float32), y=np.arange(10) % 2)
    return buf.getvalue()


def test_a_server_that_drips_is_given_up_on(tmp_path: Path) -> None:
    stop = threading.Event()
    requests: list[str] = []

    class Drip(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(10**6))
            self.end_headers()
            try:
                while not stop.wait(0.01):  # a byte every 10 ms: about 100 bytes/s
                    self.wfile.write(b"x")
                    self.wfile.flush()
            except OSError:
                return  # the client gave up and closed the connection

    try:
        gave_up = pytest.raises(DownloadUnavailableError, match=r"giving up after 2 failed attempts in a row")
        with serving(Drip) as base, gave_up as failed:
            download(f"{base}/d.npz", tmp_path / "out", cache_dir=tmp_path / "c", retry=QUICK, quiet=True)
    finally:
        stop.set()
    assert "last error: too slow:" in str(failed.value) and "below the minimum of 100000 bytes/s" in str(failed.value)
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE
    assert requests == ["/d.npz", "/d.npz"]
    assert not (tmp_path / "out").exists()


def test_a_server_that_drips_its_headers_is_given_up_on(tmp_path: Path) -> None:
    stop = threading.Event()
    requests: list[str] = []

    class DripHeaders(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            requests.append(self.path)
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                # One header byte every 10 ms, for as long as the client listens (or the test ends:
                # then the headers end and a whole, valid file follows, which must not be reached).
                while not stop.wait(0.01):
                    self.wfile.write(b"X-Slow: x\r\n")
                    self.wfile.flush()
                body = _npz()
                self.wfile.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            except OSError:
                return  # the client gave up and closed the connection

    timer = threading.Timer(30, stop.set)
    timer.start()
    try:
        gave_up = pytest.raises(DownloadUnavailableError, match=r"giving up after 2 failed attempts in a row")
        with serving(DripHeaders) as base, gave_up as failed:
            download(f"{base}/d.npz", tmp_path / "out", cache_dir=tmp_path / "c", retry=QUICK, quiet=True)
    finally:
        stop.set()
        timer.cancel()
    assert "last error: too slow:" in str(failed.value)
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE
    assert requests == ["/d.npz", "/d.npz"]
    assert not (tmp_path / "out").exists()


def _redirecting_to(target: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Redirect(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Redirect


def test_a_redirect_to_ftp_is_refused_in_one_line(tmp_path: Path) -> None:
    with serving(_redirecting_to("ftp://127.0.0.1:9/d.npz")) as base, pytest.raises(DataError) as failed:
        download(f"{base}/d.npz", tmp_path / "out", cache_dir=tmp_path / "c", retry=NO_DELAY, quiet=True)
    assert failed.value.exit_code == ExitCode.INVALID_INPUT
    message = str(failed.value)
    assert message == (
        f"{base}/d.npz: refusing a redirect (HTTP 302) to ftp://127.0.0.1:9/d.npz: it leads to ftp://, not http(s); "
        "give the file's final https URL"
    )


@pytest.mark.parametrize("target", ["file:///etc/passwd", "FILE:///d.npz", "data:,x", "gopher://127.0.0.1:9/d"])
def test_a_redirect_to_any_other_scheme_is_invalid_input(tmp_path: Path, target: str) -> None:
    # urllib itself refuses these (all but http, https, ftp) with an HTTPError that read as a
    # server failure, exit 4: the URL has to change, so it is invalid input like ftp://.
    with serving(_redirecting_to(target)) as base, pytest.raises(DataError) as failed:
        download(f"{base}/d.npz", tmp_path / "out", cache_dir=tmp_path / "c", retry=NO_DELAY, quiet=True)
    assert failed.value.exit_code == ExitCode.INVALID_INPUT
    assert str(failed.value).startswith(f"{base}/d.npz: refusing a redirect (HTTP 302) to {target}: it leads to ")


def test_a_redirect_to_a_malformed_url_is_the_servers_fault(tmp_path: Path) -> None:
    with serving(_redirecting_to("http://[::1/d.npz")) as base, pytest.raises(DownloadUnavailableError) as failed:
        download(f"{base}/d.npz", tmp_path / "out", cache_dir=tmp_path / "c", retry=NO_DELAY, quiet=True)
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE
    assert "redirects (HTTP 302) to a malformed URL" in str(failed.value)


def test_a_redirect_from_https_down_to_http_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this test's certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with LoopbackServer({"d.npz": _npz()}) as plain:
        with serving(_redirecting_to(plain.url("d.npz")), tls=tls) as base:
            with pytest.raises(DataError, match="it leaves https for plain http") as failed:
                download(f"{base}/d.npz", tmp_path / "out", cache_dir=tmp_path / "c", retry=NO_DELAY, quiet=True)
            # The same file over https alone is fine: what is refused is the downgrade.
            download(plain.url("d.npz"), tmp_path / "ok", cache_dir=tmp_path / "c", retry=NO_DELAY, quiet=True)
        assert [r.path for r in plain.requests] == ["d.npz"]
    assert failed.value.exit_code == ExitCode.INVALID_INPUT
