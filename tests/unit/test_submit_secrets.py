"""`kubetrain submit` never prints a credential, and refuses a broken one in one line.

Every case plants a secret (a token, a password in the host URL) and scans everything the command
left behind: stdout, stderr, log records, and the text of any exception that escaped `main`. A
loopback server that refuses every request (HTTP 401) records the Authorization header it got, so
the tests also see what was sent.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode
from kubetrain.tooling.submit import TOKEN_ENV

SECRET = "eyJhbGciOiJSUzI1NiJ9.planted-secret-7f3a9c"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads a saved context from $HOME
    for name in (TOKEN_ENV, "KF_PIPELINES_IAP_OAUTH2_CLIENT_ID"):
        monkeypatch.delenv(name, raising=False)


@contextmanager
def refusing() -> Iterator[tuple[str, list[str | None]]]:
    """A server on 127.0.0.1 answering 401 to everything; yields its URL and the Authorization headers seen."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def submit_scanned(
    argv: list[str], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, secrets: list[str]
) -> tuple[int, str]:
    """Run `kubetrain submit ARGV`; assert no secret in any output and one line on stderr; (exit code, line)."""
    escaped = ""
    code = -1
    try:
        code = main(["submit", "mnist_pytorch", *argv])
    except BaseException as e:  # noqa: BLE001 - any escape is the bug: keep its text to scan it
        escaped = "".join(traceback.format_exception(e))
    captured = capsys.readouterr()
    everything = "\n".join((captured.out, captured.err, caplog.text, escaped))
    for secret in secrets:
        assert secret not in everything, f"{secret!r} was printed"
    assert escaped == "", escaped
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return code, lines[0]


def test_a_token_with_a_trailing_newline_is_sent_stripped_and_never_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(TOKEN_ENV, SECRET + "\n")
    with refusing() as (host, seen):
        code, line = submit_scanned(["--host", host], capsys, caplog, [SECRET])
    assert seen == [f"Bearer {SECRET}"]
    assert code == ExitCode.INFRASTRUCTURE
    assert "refused the credentials (HTTP 401)" in line


@pytest.mark.parametrize("inside", ["\n", "\r\n", "\r"])
def test_a_token_with_a_line_break_inside_is_refused_in_one_line_without_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, inside: str
) -> None:
    first, second = SECRET[:20], SECRET[20:]
    monkeypatch.setenv(TOKEN_ENV, first + inside + second + "\n")
    with refusing() as (host, seen):
        code, line = submit_scanned(["--host", host], capsys, caplog, [first, second])
    assert seen == []  # nothing was sent
    assert code == ExitCode.INVALID_INPUT
    assert "line break inside it (not shown)" in line and TOKEN_ENV in line


def test_a_two_line_token_file_is_refused_and_a_one_line_file_is_sent_stripped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{SECRET}\nsecond-line-secret\n")
    with refusing() as (host, seen):
        code, line = submit_scanned(
            ["--host", host, "--token-file", str(token_file)], capsys, caplog, [SECRET, "second-line-secret"]
        )
        assert seen == []
        assert code == ExitCode.INVALID_INPUT and f"--token-file {token_file}: the token has a line break" in line
        token_file.write_text(f"  {SECRET}\n\n")
        code, line = submit_scanned(["--host", host, "--token-file", str(token_file)], capsys, caplog, [SECRET])
    assert seen == [f"Bearer {SECRET}"]
    assert code == ExitCode.INFRASTRUCTURE


@pytest.mark.parametrize(
    ("make", "says"), [("dir", "is a directory"), ("empty", "is empty"), ("none", "does not exist")]
)
def test_a_token_file_that_holds_no_token_says_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, make: str, says: str
) -> None:
    path = tmp_path / "token"
    if make == "dir":
        path.mkdir()
    elif make == "empty":
        path.write_text("\n")
    with refusing() as (host, seen):
        code, line = submit_scanned(["--host", host, "--token-file", str(path)], capsys, caplog, [])
    assert seen == []
    assert code == ExitCode.INVALID_INPUT
    assert f"--token-file {path}: {says}" in line


def test_a_password_in_the_host_url_is_refused_at_once_and_never_printed(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with refusing() as (host, seen):
        with_password = host.replace("http://", f"http://alice:{SECRET}@")
        code, line = submit_scanned(["--host", with_password], capsys, caplog, [SECRET, "alice"])
    assert seen == []
    assert code == ExitCode.INVALID_INPUT
    assert "credentials in the URL are not sent" in line and "--token-file" in line


def test_a_ca_cert_that_is_not_a_certificate_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    not_a_cert = tmp_path / "ca.pem"
    not_a_cert.write_text("this is not a certificate\n")
    code, line = submit_scanned(["--host", "https://127.0.0.1:1", "--ca-cert", str(not_a_cert)], capsys, caplog, [])
    assert code == ExitCode.INVALID_INPUT
    assert f"--ca-cert: {not_a_cert} holds no certificate ssl can load" in line
