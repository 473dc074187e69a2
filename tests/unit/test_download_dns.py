"""A source host that does not resolve fails at once; a temporary DNS failure is still retried.

The resolver is replaced for one host name only, so the answers are the same on every machine
(with or without a DNS server); every other name resolves as usual.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode

HOST = "data.kubetrain-test.invalid"


def _resolver(monkeypatch: pytest.MonkeyPatch, errno: int, message: str) -> list[str]:
    """getaddrinfo answering `errno` for HOST; returns the list of HOST lookups made."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == HOST:
            asked.append(host)
            raise socket.gaierror(errno, message)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def _download(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    url = f"https://{HOST}/mnist.npz?X-Amz-Signature=planted"
    code = main(["download", url, "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), *extra])
    err = capsys.readouterr().err
    assert "planted" not in err
    return code, err


def test_a_host_that_does_not_resolve_fails_at_once_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = _resolver(monkeypatch, socket.EAI_NONAME, "Name or service not known")
    code, err = _download(tmp_path, capsys)
    assert asked == [HOST]  # asked once: no retry
    assert code == ExitCode.INFRASTRUCTURE
    assert err.count("\n") == 1, err
    assert f"https://{HOST}/mnist.npz?X-Amz-Signature=REDACTED: the host name does not resolve" in err
    assert "(Name or service not known); check the URL's host" in err


def test_a_temporary_dns_failure_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = _resolver(monkeypatch, socket.EAI_AGAIN, "Temporary failure in name resolution")
    code, err = _download(tmp_path, capsys, "--retries", "2")
    assert asked == [HOST, HOST]
    assert code == ExitCode.INFRASTRUCTURE
    assert "giving up after 2 failed attempts in a row" in err
