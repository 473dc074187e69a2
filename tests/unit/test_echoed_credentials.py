"""An error body that echoes the request's credentials is never printed with them.

A proxy, gateway or webhook in front of the KFP API or the Kubernetes API server may answer an
error with the request's headers in its body (a debug page, `httpbin`-style JSON). `kubetrain
submit` and `kubetrain launch` quote error bodies to say what went wrong; the bearer token (the
`--token`, or the kubeconfig's) must not come along. Each test serves such answers from a real
loopback server and scans everything the command printed.
"""

from __future__ import annotations

import json
import random
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.kubernetes.errors import api_message
from kubetrain.backends.kubernetes.retry import Retrier, RetryPolicy
from kubetrain.cli import main
from kubetrain.errors import BackendError, ExitCode
from kubetrain.tooling.submit import TOKEN_ENV

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJlY2hvIn0.echoed-planted-7c1d"
STATIC_TOKEN = "kubeconfig-static-planted-93ab"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads a saved context from $HOME
    for name in (TOKEN_ENV, "KF_PIPELINES_IAP_OAUTH2_CLIENT_ID", "KUBERNETES_SERVICE_HOST", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)


def _plain(headers: dict[str, str]) -> str:
    return "".join(f"{k}: {v}\n" for k, v in headers.items())


def _json(headers: dict[str, str]) -> str:
    return json.dumps({"kind": "Status", "status": "Failure", "message": f"upstream refused: headers {headers}"})


@contextmanager
def echoing(status: int, shape: str, *, healthy: bool = True) -> Iterator[str]:
    """A server on 127.0.0.1 answering `status` with the request's headers in its body; yields its URL.

    `healthy`: KFP's health check gets a 200, so the failure comes from a later call.
    """

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if healthy and self.path.endswith("/healthz"):
                code, data = 200, b'{"multi_user": false}'
            else:
                headers = dict(self.headers.items())
                code, data = status, (_plain(headers) if shape == "plain" else _json(headers)).encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if shape == "plain" else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def run_scanned(
    argv: list[str], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> tuple[int, str]:
    """`kubetrain ARGV`; asserts no token in anything it printed or logged; (exit code, stderr)."""
    escaped = ""
    code = -1
    try:
        code = main(argv)
    except BaseException as e:  # noqa: BLE001 - any escape is the bug: keep its text to scan it
        escaped = "".join(traceback.format_exception(e))
    captured = capsys.readouterr()
    everything = "\n".join((captured.out, captured.err, caplog.text, escaped))
    # Any piece of either token (a cut may keep only its start) carries "planted".
    assert "planted" not in everything, everything
    assert escaped == "", escaped
    return code, captured.err


@pytest.mark.parametrize("shape", ["plain", "json"])
def test_submit_quotes_a_500_that_echoes_the_bearer_token_without_it(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    with echoing(500, shape) as host:
        code, err = run_scanned(["submit", "mnist_pytorch", "--host", host, "--token", TOKEN], capsys, caplog)
    assert code == ExitCode.INFRASTRUCTURE
    assert "KFP API call failed (HTTP 500: " in err
    assert "REDACTED" in err  # the body is still quoted: what failed stays readable


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": STATIC_TOKEN}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
                "current-context": "x",
            }
        ),
        encoding="utf-8",
    )
    return path


def test_launch_quotes_an_answer_that_echoes_the_kubeconfigs_token_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    assert main(["render", "pytorchjob", "--name", "demo", "-o", "json"]) == 0
    manifest = tmp_path / "job.json"
    manifest.write_text(capsys.readouterr().out, encoding="utf-8")
    with echoing(403, "plain", healthy=False) as server:
        kubeconfig = _kubeconfig(tmp_path / "kubeconfig", server)
        code, err = run_scanned(
            ["launch", "-f", str(manifest), "--kubeconfig", str(kubeconfig), "--no-logs"], capsys, caplog
        )
    assert code == ExitCode.INFRASTRUCTURE
    assert err.count("\n") == 1, err  # one line, the echoed page included
    assert "forbidden: " in err and "authorization: bearer redacted" in err.lower()


@pytest.mark.parametrize("shape", ["plain", "json"])
def test_the_kubernetes_backend_quotes_a_500_that_echoes_the_token_without_it(shape: str) -> None:
    headers = {"Authorization": f"Bearer {STATIC_TOKEN}", "User-Agent": "kubetrain"}
    error = ApiException(status=500, reason="Internal Server Error")
    error.body = (_plain(headers) if shape == "plain" else _json(headers)).encode()
    assert STATIC_TOKEN not in api_message(error)
    slept: list[float] = []
    retrier = Retrier(RetryPolicy(attempts=2, sleep=slept.append, rng=random.Random(0)))

    def failing() -> None:
        raise error

    with pytest.raises(BackendError) as raised:
        retrier.call("create PyTorchJob team-a/demo", failing)
    assert STATIC_TOKEN not in str(raised.value)
    assert "the Kubernetes API kept failing (2 attempts)" in str(raised.value)
