"""Credentials in a data set's URL stay out of everything kubetrain stores or prints.

A presigned URL (its signature, credential and session token in the query string) is fetched from a
real loopback server by the download step; `dataset.json`, the Dataset artifact (file and metadata),
the step's output and the workspace path are scanned for every secret. A URL with USER:PASSWORD@ is
refused before any request. Also here: a full disk while a fetched source is converted keeps its
exit code (4), where re-wrapping the message used to turn it into invalid input (2).
"""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kubetrain.cli import main
from kubetrain.data.download import download
from kubetrain.data.errors import DataError, DiskFullError
from kubetrain.errors import ExitCode
from kubetrain.kfp_runtime.download_step import download_dataset_step
from tests.data_helpers import LoopbackServer

SIGNATURE = "5ec7e75197a7a7e5ec7e75197a7a7e"
TOKEN = "FwoGZXIvYXdzPLANTEDTOKEN"
CREDENTIAL = "AKIAPLANTEDKEY"
QUERY = (
    f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={CREDENTIAL}%2F20261126%2Fus-east-1%2Fs3%2Faws4_request"
    f"&X-Amz-Expires=3600&X-Amz-Security-Token={TOKEN}&X-Amz-Signature={SIGNATURE}"
)
SECRETS = (SIGNATURE, TOKEN, CREDENTIAL)


class Artifact:
    """The two attributes of a KFP artifact the step uses."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.metadata: dict[str, Any] = {}


def _npz() -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    np.savez(buf, x=rng.random((40, 4)).astype(np.float32), y=np.arange(40) % 3)
    return buf.getvalue()


def _scan(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret} leaked into {text[:300]!r}"


def test_a_presigned_urls_secrets_reach_neither_the_dataset_nor_the_artifact_nor_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    with LoopbackServer({f"mnist.npz?{QUERY}": _npz()}) as server:
        source = server.url(f"mnist.npz?{QUERY}")
        first = Artifact(tmp_path / "a1")
        meta = download_dataset_step(
            source=source, sha256="", shards=1, workspace_pvc="ws", refresh=False, dataset=first
        )
        again = download_dataset_step(
            source=source, sha256="", shards=1, workspace_pvc="ws", refresh=False, dataset=Artifact(tmp_path / "a2")
        )
        assert len(server.requests) == 1  # the second step reused the data: the stored source still matches
    assert again["reused"] is True
    on_disk = tmp_path / "local" / "claims" / "ws" / meta["path"].removeprefix("/workspace/")
    dataset_json = (on_disk / "dataset.json").read_text()
    out = capsys.readouterr()
    _scan(dataset_json, Path(first.path).read_text(), json.dumps(first.metadata), out.out, out.err, meta["path"])
    assert json.loads(dataset_json)["source"].startswith(server.url("mnist.npz?X-Amz-Algorithm=AWS4-HMAC-SHA256&"))
    assert "X-Amz-Expires=3600" in meta["source"] and "X-Amz-Signature=REDACTED" in meta["source"]
    assert meta["path"].startswith("/workspace/datasets/mnist-")


def test_a_failing_presigned_url_is_reported_without_its_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LoopbackServer({}) as server:
        code = main(["download", server.url(f"gone.npz?{QUERY}"), "--out", str(tmp_path / "o"),
                     "--cache-dir", str(tmp_path / "c"), "--quiet"])  # fmt: skip
    out = capsys.readouterr()
    assert code == ExitCode.INVALID_INPUT
    _scan(out.out, out.err)
    assert "HTTP 404" in out.err and "X-Amz-Signature=REDACTED" in out.err


@pytest.mark.parametrize("scheme", ["http", "https", "s3"])
def test_a_url_with_a_password_is_refused_at_once_and_never_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scheme: str
) -> None:
    with LoopbackServer({"d.npz": _npz()}) as server:
        url = f"{scheme}://alice:{SIGNATURE}@127.0.0.1:{server.port}/d.npz"
        code = main(["download", url, "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])
        assert server.requests == []
    out = capsys.readouterr()
    assert code == ExitCode.INVALID_INPUT
    _scan(out.out, out.err)
    assert "alice" not in out.err
    assert len(out.err.strip().splitlines()) == 1
    assert "credentials in the URL (USER:PASSWORD@) are refused; use a presigned URL" in out.err


def test_a_full_disk_while_converting_a_fetched_source_stays_an_infrastructure_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "d.npz"
    source.write_bytes(_npz())

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", no_space)  # what writes each shard member
    with pytest.raises(DataError) as failed:
        download(str(source), tmp_path / "out", quiet=True)
    assert isinstance(failed.value, DiskFullError), repr(failed.value)
    assert failed.value.exit_code == ExitCode.INFRASTRUCTURE
    assert str(failed.value).startswith(f"{source}: ") and "no space left on the device" in str(failed.value)
