"""The built KFP 2.17 UI served by its own Node server and loaded in headless Chromium, with no backend.

What can go wrong before any cluster: the build (tools/ui/build.sh), the server's start with the
environment tools/cluster/kfp/ui.py gives it, the browser's launch (tests/ui_browser.py), the
selectors the cluster scenarios use on the upload page, and the server's forwarding of gRPC-web
to the MLMD server's listener (tools/cluster/kfp/grpcweb.py). The API address is a closed port: the
pipeline list must show the UI's own error, not a blank page. Runs only when the UI is built
(tools/ui/build.sh; `make e2e` builds it) and a browser is installed.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import ui_browser
from tools.cluster.kfp import grpcweb, http_probe, services_venv, ui

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
APP = ui.built()
if APP is None:
    pytest.skip("the KFP UI is not built: run tools/ui/build.sh (make e2e builds it)", allow_module_level=True)
if ui_browser.skip_reason():
    pytest.skip(str(ui_browser.skip_reason()), allow_module_level=True)
SERVICE = "ml_metadata.MetadataStoreService"
PACKAGE = Path(__file__).resolve().parents[2] / "pipelines" / "mnist_pytorch.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _context_types(request: bytes, context: Any) -> bytes:
    return b"\x0a\x00"  # one empty ContextType: any bytes do, the bridge does not parse them


@contextmanager
def _ui_server(run: Path, grpc_web_port: int) -> Iterator[str]:
    """The built UI's server with the API on a closed port and MLMD's gRPC-web at `grpc_web_port`."""
    assert APP is not None
    port = _free_port()
    at = ui.Addresses(api_host="127.0.0.1", api_port=_free_port(), grpc_web_host="127.0.0.1",
                      grpc_web_port=grpc_web_port, s3_host="127.0.0.1", s3_port=_free_port())  # fmt: skip
    # The server reads its kubeconfig at start and exits if the file is missing: one to a closed port.
    kubeconfig = run / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": f"http://127.0.0.1:{_free_port()}"}}],
        "users": [{"name": "none", "user": {"token": "none"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none", "namespace": "kubeflow"}}],
    }))  # fmt: skip
    env = ui.server_env({"PATH": "/usr/bin:/bin"}, at, kubeconfig=kubeconfig, namespace="kubeflow",
                        bucket="mlpipeline", access_key="minio", secret_key="minio123")  # fmt: skip
    log = run / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(ui.server_argv(ui.node_binary(), APP, port), stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=run, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not http_probe.answers(ui.url(port)):
            assert proc.poll() is None, f"the UI server exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the UI server did not answer:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)
        yield ui.url(port)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    mlmd = grpcweb.server("127.0.0.1", 0, SERVICE, {"GetContextTypes": _context_types})
    grpcweb.serve_in_background(mlmd, "test-mlmd")
    try:
        with _ui_server(tmp_path_factory.mktemp("ui"), int(mlmd.server_address[1])) as url:
            yield url
    finally:
        mlmd.shutdown()


def test_the_pipeline_list_loads_and_says_the_api_is_unreachable(served: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with ui_browser.page() as page:
        page.goto(f"{served}/#/pipelines")
        expect(page.get_by_role("button", name="Upload pipeline")).to_be_visible()
        expect(page.get_by_text("Error: failed to retrieve list of pipelines")).to_be_visible()
        ui_browser.screenshot(page, "smoke-pipelines", tmp_path)


def test_the_upload_page_takes_a_file_after_upload_a_file_is_chosen(served: str) -> None:
    from playwright.sync_api import expect

    with ui_browser.page() as page:
        page.goto(f"{served}/#/pipelines")
        page.get_by_role("button", name="Upload pipeline").click()
        page.locator("#localPackageBtn").click()
        page.locator("input[type=file]").set_input_files(str(PACKAGE))
        # The name is pre-filled from the file, and Create is enabled: what the cluster scenario relies on.
        expect(page.locator("#newPipelineName")).to_have_value(PACKAGE.stem)
        expect(page.locator("#createNewPipelineOrVersionBtn")).to_be_enabled()


def test_the_ui_server_forwards_grpc_web_to_the_mlmd_listener(served: str) -> None:
    with ui_browser.page() as page:
        page.goto(f"{served}/#/pipelines")
        reply = page.request.post(f"{served}/{SERVICE}/GetContextTypes", data=grpcweb.frame(0, b""),
                                  headers={"Content-Type": "application/grpc-web+proto", "X-Grpc-Web": "1"})  # fmt: skip
        assert reply.status == 200, reply.text()
        frames = grpcweb.unframe(reply.body())
        assert frames[0] == (grpcweb.DATA, b"\x0a\x00")
        assert b"grpc-status:0" in frames[-1][1]


MLMD_SERVER = Path(__file__).resolve().parents[2] / "tools" / "cluster" / "kfp" / "mlmd_server.py"
PUT_ARTIFACT = """
import sys
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as pb
store = metadata_store.MetadataStore(pb.MetadataStoreClientConfig(host="127.0.0.1", port=int(sys.argv[1])))
kind = store.put_artifact_type(pb.ArtifactType(name="system.HTML"))
artifact = pb.Artifact(type_id=kind, uri=sys.argv[2], state=pb.Artifact.LIVE)
artifact.custom_properties["display_name"].string_value = "report"
store.put_artifacts([artifact])
"""


def test_the_artifacts_page_lists_what_the_real_mlmd_server_holds_through_its_grpc_web(tmp_path: Path) -> None:
    # The MLMD front the KFP tier runs (mlmd_server.py --grpc-web, the real MLMD library): the page's
    # gRPC-web calls go through the UI server to it, and the artifact written by MLMD's own client shows.
    from playwright.sync_api import expect

    python = services_venv.python(services_venv.venv_dir())
    if not python.exists():
        pytest.skip("the KFP services venv (ml-metadata) is not built; cluster up builds it")
    grpc_port, web_port = _free_port(), _free_port()
    log = tmp_path / "mlmd.log"
    argv = [str(python), str(MLMD_SERVER), "--host", "127.0.0.1", "--port", str(grpc_port),
            "--sqlite", str(tmp_path / "mlmd.sqlite"), "--grpc-web", f"127.0.0.1:{web_port}"]  # fmt: skip
    with log.open("wb") as out:
        mlmd = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=services_venv.environment())
    try:
        deadline = time.monotonic() + 60
        while "serving gRPC-web" not in log.read_text():
            assert mlmd.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        uri = "minio://mlpipeline/v2/artifacts/smoke/report"
        subprocess.run([str(python), "-c", PUT_ARTIFACT, str(grpc_port), uri], check=True, timeout=60,
                       env=services_venv.environment())  # fmt: skip
        with _ui_server(tmp_path, web_port) as url, ui_browser.page() as page:
            page.goto(f"{url}/#/artifacts")
            expect(page.get_by_text(uri, exact=True)).to_be_visible()
            expect(page.get_by_text("system.HTML", exact=True)).to_be_visible()
    finally:
        mlmd.terminate()
        mlmd.wait(timeout=20)
