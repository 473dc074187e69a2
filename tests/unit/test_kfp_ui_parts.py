"""The pure parts of the KFP tier's web UI and S3 store: gRPC-web framing (tools/cluster/kfp/grpcweb.py),
the UI server's environment (tools/cluster/kfp/ui.py) and SeaweedFS's command and identities
(tools/cluster/kfp/object_store.py)."""

from __future__ import annotations

import base64
import http.client
import io
import json
import tarfile
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.cluster.kfp import backend, grpcweb, manifests, object_store, ui

SERVICE = "ml_metadata.MetadataStoreService"
ARCHIVE = Path("/work/shared/upstream/kubeflow-pipelines-2.17.0.tar.gz")


def _echo(request: bytes, context: Any) -> bytes:
    return b"reply:" + request


def _refuse(request: bytes, context: Any) -> bytes:
    context.set_code(5)  # NOT_FOUND, as mlmd_server sets it from MLMD's status
    context.set_details("no context named run-1")
    return b""


def _trailer(frames: list[tuple[int, bytes]]) -> dict[str, str]:
    (flag, payload) = frames[-1]
    assert flag == grpcweb.TRAILER
    pairs = (line.split(":", 1) for line in payload.decode().split("\r\n") if line)
    return {key: urllib.parse.unquote(value) for key, value in pairs}


def test_a_grpc_web_call_gets_the_handlers_reply_then_an_ok_trailer() -> None:
    body = grpcweb.frame(grpcweb.DATA, b"\x08\x01")
    out = grpcweb.answer(SERVICE, {"GetContextTypes": _echo}, f"/{SERVICE}/GetContextTypes", body, text=False)
    frames = grpcweb.unframe(out)
    assert frames[0] == (grpcweb.DATA, b"reply:\x08\x01")
    assert _trailer(frames) == {"grpc-status": "0", "grpc-message": ""}


def test_the_text_form_is_base64_both_ways() -> None:
    body = base64.b64encode(grpcweb.frame(grpcweb.DATA, b"abc"))
    out = grpcweb.answer(SERVICE, {"M": _echo}, f"/{SERVICE}/M", body, text=True)
    assert grpcweb.unframe(base64.b64decode(out))[0] == (grpcweb.DATA, b"reply:abc")


def test_a_failed_call_sends_only_the_trailer_with_the_handlers_status_and_message() -> None:
    out = grpcweb.answer(SERVICE, {"M": _refuse}, f"/{SERVICE}/M", grpcweb.frame(0, b""), text=False)
    frames = grpcweb.unframe(out)
    assert len(frames) == 1
    assert _trailer(frames) == {"grpc-status": "5", "grpc-message": "no context named run-1"}


def test_an_unknown_method_or_service_is_unimplemented() -> None:
    for path in (f"/{SERVICE}/GetLineageGraph", "/other.Service/M"):
        out = grpcweb.answer(SERVICE, {"M": _echo}, path, grpcweb.frame(0, b""), text=False)
        assert _trailer(grpcweb.unframe(out))["grpc-status"] == str(grpcweb.UNIMPLEMENTED), path


def test_a_truncated_request_is_an_internal_error_not_a_call() -> None:
    calls: list[bytes] = []

    def record(request: bytes, context: Any) -> bytes:
        calls.append(request)
        return b""

    body = grpcweb.frame(0, b"abcdef")[:-2]
    out = grpcweb.answer(SERVICE, {"M": record}, f"/{SERVICE}/M", body, text=False)
    assert _trailer(grpcweb.unframe(out))["grpc-status"] == str(grpcweb.INTERNAL) and not calls


def test_the_grpc_web_server_answers_an_http_post_as_the_ui_server_forwards_it() -> None:
    httpd = grpcweb.server("127.0.0.1", 0, SERVICE, {"M": _echo})
    grpcweb.serve_in_background(httpd, "test")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", httpd.server_address[1], timeout=10)
        conn.request("POST", f"/{SERVICE}/M", body=grpcweb.frame(0, b"x"),
                     headers={"Content-Type": "application/grpc-web+proto", "X-Grpc-Web": "1"})  # fmt: skip
        reply = conn.getresponse()
        assert reply.status == 200 and reply.getheader("Content-Type") == "application/grpc-web+proto"
        assert grpcweb.unframe(reply.read())[0] == (0, b"reply:x")
    finally:
        httpd.shutdown()


AT = ui.Addresses(api_host="127.0.0.1", api_port=18888, grpc_web_host="127.0.0.1", grpc_web_port=18081,
                  s3_host="10.244.0.1", s3_port=19000)  # fmt: skip


def test_the_ui_server_env_points_every_backend_piece_at_its_host_address(tmp_path: Path) -> None:
    env = ui.server_env({"PATH": "/bin"}, AT, kubeconfig=tmp_path / "ui.kubeconfig", namespace="kubeflow",
                        bucket="mlpipeline", access_key="minio", secret_key="minio123")  # fmt: skip
    assert env["PATH"] == "/bin"
    assert (env["ML_PIPELINE_SERVICE_HOST"], env["ML_PIPELINE_SERVICE_PORT"]) == ("127.0.0.1", "18888")
    assert (env["METADATA_ENVOY_SERVICE_SERVICE_HOST"], env["METADATA_ENVOY_SERVICE_SERVICE_PORT"]) == (
        "127.0.0.1", "18081")  # fmt: skip
    # An empty namespace: the server dials `${MINIO_HOST}.${MINIO_NAMESPACE}`, which must stay an IP.
    assert (env["MINIO_HOST"], env["MINIO_PORT"], env["MINIO_NAMESPACE"]) == ("10.244.0.1", "19000", "")
    rewrites = dict(pair.split("=") for pair in env["MINIO_ENDPOINT_REWRITE"].split(","))
    assert rewrites["seaweedfs.kubeflow:9000"] == rewrites["seaweedfs.kubeflow.svc:9000"] == "10.244.0.1:19000"
    assert env["KUBECONFIG"] == str(tmp_path / "ui.kubeconfig") and env["FRONTEND_SERVER_NAMESPACE"] == "kubeflow"
    assert env["ARGO_ARCHIVE_LOGS"] == "true" and env["ARGO_ARCHIVE_BUCKETNAME"] == "mlpipeline"


def test_the_ui_reads_archived_logs_where_argo_writes_them() -> None:
    repository = yaml.safe_load(yaml.safe_load(manifests.workflow_controller_config())["data"]
                                ["artifactRepository"])  # fmt: skip
    assert repository["s3"]["keyFormat"] == ui.ARGO_KEYFORMAT
    assert f"{repository['s3']['endpoint']}" in ui.STORE_NAMES


def test_the_ui_server_serves_the_built_page_on_its_port(tmp_path: Path) -> None:
    argv = ui.server_argv(Path("/usr/bin/node"), tmp_path / "app", 18390)
    assert argv == ["/usr/bin/node", str(tmp_path / "app/server/dist/server.js"), str(tmp_path / "app/build"), "18390"]
    assert ui.url(18390) == "http://127.0.0.1:18390"


@pytest.mark.parametrize(("field", "value"), [("api_port", 0), ("s3_port", 70000), ("s3_host", "10.0.0.1:9000"),
                                         ("grpc_web_host", "")])  # fmt: skip
def test_ui_addresses_refuse_a_bad_field_by_name(field: str, value: object) -> None:
    fields = {**AT.__dict__, field: value}
    with pytest.raises(ui.UIError, match=f"Addresses.{field}"):
        ui.Addresses(**fields)


def test_the_url_file_holds_the_url_alone_on_one_line(tmp_path: Path) -> None:
    assert ui.read_url(tmp_path) is None
    ui.write_url(tmp_path, 18390)
    assert (tmp_path / "kfp-ui").read_text() == "http://127.0.0.1:18390\n"
    assert ui.read_url(tmp_path) == "http://127.0.0.1:18390"


@pytest.mark.skipif(not ARCHIVE.exists(), reason=f"the pinned KFP archive is not at {ARCHIVE}")
def test_upstreams_ui_role_grants_what_the_ui_server_reads() -> None:
    # The files applied are the archive's own; this checks they still grant what the server reads
    # (the artifact Secret, pod logs, Argo Workflows for archived logs).
    with tarfile.open(ARCHIVE) as tar:
        name = f"kubeflow-pipelines-2.17.0/{ui.UI_FILES[1]}"
        member = tar.extractfile(name)
        assert member is not None, name
        role = yaml.safe_load(io.TextIOWrapper(member))
    grants = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    assert {("secrets", "get"), ("pods/log", "get"), ("pods", "get"), ("workflows", "get")} <= grants
    assert role["metadata"]["name"] == ui.ACCOUNT


def test_the_store_is_seaweedfs_unless_moto_is_asked_for() -> None:
    assert object_store.choice({}) == "seaweedfs"
    assert object_store.choice({"KUBETRAIN_KFP_S3": "moto"}) == "moto"
    with pytest.raises(object_store.ObjectStoreError, match="KUBETRAIN_KFP_S3='minio'"):
        object_store.choice({"KUBETRAIN_KFP_S3": "minio"})


def test_weed_binds_only_the_ports_it_is_given_and_phones_nowhere(tmp_path: Path) -> None:
    ports = backend.WEED_PORTS
    argv = object_store.weed_argv(Path("/c/weed"), ip="10.244.0.1", data_dir=tmp_path, config=tmp_path / "s3.json",
                                  ports=ports)  # fmt: skip
    flags = dict(arg.lstrip("-").split("=", 1) for arg in argv[2:] if "=" in arg)
    assert argv[:2] == ["/c/weed", "server"] and "-s3" in argv and "-filer" in argv
    bound = {int(v) for k, v in flags.items() if k.endswith((".port", ".port.grpc"))}
    assert bound == set(ports.all())
    assert flags["s3.port"] == "19000" and flags["ip.bind"] == "10.244.0.1"
    assert flags["s3.port.iceberg"] == flags["s3.port.lance"] == "0" and flags["master.telemetry"] == "false"
    # The tier's own ports are not among SeaweedFS's (its defaults 18080 and 18888 would be).
    assert not set(ports.all()) & {backend.MLMD_PORT, backend.API_HTTP_PORT, backend.API_GRPC_PORT}


def test_weed_ports_refuse_a_clash_or_an_overflow() -> None:
    with pytest.raises(object_store.ObjectStoreError, match="the same"):
        object_store.WeedPorts(s3=1000, master=1000, volume=1001, filer=1002)
    with pytest.raises(object_store.ObjectStoreError, match="outside"):
        object_store.WeedPorts(s3=60000, master=1000, volume=1001, filer=1002)


def test_the_s3_identity_holds_the_keys_with_every_action(tmp_path: Path) -> None:
    argv = object_store.prepare_seaweedfs(tmp_path, Path("/c/weed"), ip="127.0.0.1", ports=backend.WEED_PORTS,
                                          access_key="minio", secret_key="minio123")  # fmt: skip
    config = tmp_path / "seaweedfs-s3.json"
    assert f"-s3.config={config}" in argv and oct(config.stat().st_mode & 0o777) == "0o600"
    (identity,) = json.loads(config.read_text())["identities"]
    assert identity["credentials"] == [{"accessKey": "minio", "secretKey": "minio123"}]
    assert "Admin" in identity["actions"]


def test_mlmd_answers_grpc_web_on_loopback_only_when_the_ui_runs(tmp_path: Path) -> None:
    with_ui = backend.mlmd_argv(Path("/v/python"), tmp_path, with_ui=True)
    assert with_ui[with_ui.index("--grpc-web") + 1] == f"127.0.0.1:{ui.GRPC_WEB_PORT}"
    assert "--grpc-web" not in backend.mlmd_argv(Path("/v/python"), tmp_path, with_ui=False)
    assert ui.GRPC_WEB_PORT in backend.ports() and ui.GRPC_WEB_PORT not in backend.ports(with_ui=False)


def test_the_kfp_tiers_ports_are_none_of_the_clusters_other_ports() -> None:
    """A port the UI's gRPC-web listener shared with the training-operator's health probe stopped `up`."""
    from tools.cluster import node_config, operators, webhooks
    from tools.cluster.kfp import backend

    others = {
        node_config.KUBELET_PORT, node_config.KUBE_PROXY_METRICS, node_config.REGISTRY_PORT, node_config.COREDNS_HEALTH,
        operators.TRAINING_OPERATOR_HEALTH, operators.JOBSET_HEALTH, operators.TRAINER_HEALTH,
        operators.MPI_OPERATOR_HEALTH, webhooks.TRAINING_OPERATOR_WEBHOOK_PORT, webhooks.JOBSET_WEBHOOK_PORT,
        webhooks.TRAINER_WEBHOOK_PORT,
    }  # fmt: skip
    for store in ("seaweedfs", "moto"):
        assert not set(backend.ports(store, with_ui=True)) & others, store
