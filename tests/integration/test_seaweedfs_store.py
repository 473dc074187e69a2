"""SeaweedFS, the KFP tier's S3 store, on its own: `weed server -s3` as tools/cluster/kfp/object_store.py runs it.

No cluster: one `weed` on loopback ports, driven by boto3 the way KFP's API server, its launcher,
Argo's log archive and the UI server use the store (tests/integration/s3_client_check.py, run in
an interpreter that has boto3: the KFP services venv, or this one if it has boto3). It runs only
when `weed` is built (tools/seaweedfs/build.sh, minutes cold; `make e2e` builds it) and skips
with that reason otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import weed_server
from tools.cluster import processes
from tools.cluster.kfp import http_probe, manifests, object_store, services_venv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CHECK = Path(__file__).with_name("s3_client_check.py")
WEED = object_store.built_weed()


def _client_python() -> str | None:
    venv = services_venv.venv_dir()
    if services_venv.python(venv).exists():
        return str(services_venv.python(venv))
    return sys.executable if importlib.util.find_spec("boto3") else None


PYTHON = _client_python()
if WEED is None:
    pytest.skip("SeaweedFS is not built: run tools/seaweedfs/build.sh (make e2e builds it)", allow_module_level=True)
if PYTHON is None:
    pytest.skip("no interpreter with boto3: build the KFP services venv "
                "(python -c 'from tools.cluster.kfp import services_venv; services_venv.ensure()')",
                allow_module_level=True)  # fmt: skip


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert WEED is not None
    with weed_server.serving(tmp_path_factory.mktemp("seaweedfs"), WEED) as ports:
        yield f"http://127.0.0.1:{ports.s3}"


def _check(endpoint: str, scenario: str) -> None:
    assert PYTHON is not None
    env = {**services_venv.environment(), "S3_ENDPOINT": endpoint, "S3_IAM_ENDPOINT": endpoint,
           "S3_ACCESS_KEY": manifests.S3_ACCESS_KEY, "S3_SECRET_KEY": manifests.S3_SECRET_KEY}  # fmt: skip
    done = subprocess.run([PYTHON, str(CHECK), scenario], capture_output=True, text=True, env=env, timeout=180,
                          check=False)  # fmt: skip
    assert done.returncode == 0 and f"ok {scenario}" in done.stdout, done.stdout + done.stderr[-4000:]


def test_the_api_servers_bucket_and_the_launchers_objects_path_style(endpoint: str) -> None:
    _check(endpoint, "objects")


def test_a_big_artifact_uploads_in_parts_and_reads_back_whole(endpoint: str) -> None:
    _check(endpoint, "multipart")


def test_a_pod_addressing_the_store_by_its_service_name_is_served_path_style(endpoint: str) -> None:
    _check(endpoint, "service_name")


def test_wrong_or_missing_credentials_are_refused(endpoint: str) -> None:
    _check(endpoint, "credentials")


def test_the_ui_lists_an_artifact_directory_page_by_page(endpoint: str) -> None:
    _check(endpoint, "paging")


def test_a_presigned_url_serves_without_credentials_and_a_forged_one_is_refused(endpoint: str) -> None:
    _check(endpoint, "presigned")


def test_the_iam_api_mints_a_namespaces_keys_scoped_to_its_prefix(tmp_path: Path) -> None:
    # What KFP's multi-user sync hook needs (issue 47): the IAM API on the S3 port, writable, with
    # the identities the gateway already has. The trimmed build keeps it (tools/seaweedfs/main.go).
    assert WEED is not None
    with weed_server.serving(tmp_path, WEED, "-s3.iam.readOnly=false") as ports:
        _check(f"http://127.0.0.1:{ports.s3}", "iam")


def test_cluster_down_leaves_no_store_process_and_frees_its_ports(tmp_path: Path) -> None:
    # Started and stopped as the KFP tier does (tools/cluster/processes.py: SIGTERM to its group,
    # SIGKILL after its own short grace). weed 4.53 stops its volume server on SIGTERM but then
    # waits in gRPC's graceful stop for its own in-process streams, so it is the SIGKILL that ends it.
    assert WEED is not None
    state = tmp_path / "cluster"
    ports = weed_server.free_ports()
    argv = object_store.prepare_seaweedfs(state, WEED, ip="127.0.0.1", ports=ports, access_key="a" * 8,
                                          secret_key="b" * 16)  # fmt: skip
    processes.start(state, "s3", argv, env=os.environ, log=state / "s3.log", cwd=state,
                    stop_grace_seconds=object_store.STOP_GRACE_S)  # fmt: skip
    deadline = time.monotonic() + weed_server.READY_S
    while not http_probe.answers(object_store.wait_ready_url("127.0.0.1", ports), ok_only=True):
        assert time.monotonic() < deadline, (state / "s3.log").read_text()[-3000:]
        time.sleep(0.5)
    assert processes.members(state), "the store is not found as a member of its cluster"
    processes.stop_all(state)
    assert processes.members(state) == []
    taken = {port: processes.listener(port) for port in ports.all()}
    assert not {port: pid for port, pid in taken.items() if pid is not None}, taken
