"""The KFP backend's objects (tools/cluster/kfp/manifests.py) and the images of its pods (tools/cluster/oci.py)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import yaml

from tests.data_helpers import tar_member
from tools.cluster import oci
from tools.cluster.kfp import accounts, api_server, backend, manifests
from tools.cluster.kfp.manifests import HostService, ServicePort


def test_a_host_service_keeps_every_port_and_points_its_endpoints_at_the_host() -> None:
    api = HostService("ml-pipeline", (ServicePort("grpc", 8887, 18887), ServicePort("http", 8888, 18888)))
    service, endpoints = yaml.safe_load_all(manifests.host_services([api], "10.244.0.1"))
    assert "selector" not in service["spec"]  # the endpoints are ours, not a pod's
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8887, 18887), (8888, 18888)]
    assert endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == "ml-pipeline"
    assert {p["name"]: p["port"] for p in endpoints["ports"]} == {"grpc": 18887, "http": 18888}
    assert endpoints["endpoints"] == [{"addresses": ["10.244.0.1"], "conditions": {"ready": True}}]


def test_argo_archives_logs_to_the_store_the_steps_reach_by_name_as_non_root() -> None:
    config = yaml.safe_load(manifests.workflow_controller_config())
    repository = yaml.safe_load(config["data"]["artifactRepository"])
    assert repository["s3"]["endpoint"] == "seaweedfs.kubeflow.svc:9000" and repository["archiveLogs"]
    executor = yaml.safe_load(config["data"]["executor"])["securityContext"]
    assert executor["runAsNonRoot"] and executor["capabilities"] == {"drop": ["ALL"]}
    assert yaml.safe_load(config["data"]["metricsConfig"]) == {"enabled": False}  # its port is often taken


def test_the_persistence_agent_gets_its_token_where_its_binary_looks_and_runs_restricted() -> None:
    deployment = yaml.safe_load(manifests.persistence_agent())
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert {"mountPath": "/var/run/secrets/kubeflow/tokens", "name": "persistenceagent-sa-token"} in container[
        "volumeMounts"
    ]
    token = pod["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]
    assert (token["path"], token["audience"]) == ("persistenceagent-sa-token", "pipelines.kubeflow.org")
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_api_server_config_is_upstreams_without_the_mlflow_plugin(tmp_path: Path) -> None:
    upstream = tmp_path / "config.json"
    upstream.write_text(json.dumps({"DBDriverName": "mysql", "plugins": {"mlflow": {}}}))
    assert json.loads(api_server.config(upstream)) == {"DBDriverName": "mysql"}


def test_every_backend_port_is_distinct_and_named() -> None:
    # Six servers' ports, SeaweedFS's eight and the UI's two: none overwrote another in the merge.
    ports = backend.ports(multi_user=False)
    assert len(ports) == 6 + 8 + 2 and all(ports.values())
    assert len(backend.ports("moto", with_ui=False, multi_user=False)) == 7


def test_a_one_layer_image_holds_its_binary_and_a_sticky_tmp(tmp_path: Path) -> None:
    binary = tmp_path / "driver"
    binary.write_bytes(b"\x7fELF...")
    spec = oci.ImageSpec({"/bin/driver": binary}, ["/bin/driver"], user="65532:65532", dirs=("/tmp",))
    archive = tmp_path / "image.tar"
    oci.write_image(archive, "ghcr.io/kubeflow/kfp-driver:2.17.0", spec.files, spec.entrypoint)
    with tarfile.open(archive) as outer:
        index = json.load(tar_member(outer, "index.json"))
        manifest_digest = index["manifests"][0]["digest"].split(":")[1]
        manifest = json.load(tar_member(outer, f"blobs/sha256/{manifest_digest}"))
        layer = outer.extractfile(f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}")
        assert layer is not None
        with tarfile.open(fileobj=io.BytesIO(layer.read())) as files:
            assert files.getmember("bin/driver").mode == 0o755
    blobs = oci._blobs(spec)
    config = json.loads(blobs.config[1])["config"]
    assert config["User"] == "65532:65532" and config["Env"] == [f"PATH={oci.DEFAULT_PATH}"]
    with tarfile.open(fileobj=io.BytesIO(blobs.layer[1])) as files:
        tmp = files.getmember("tmp")
        assert tmp.isdir() and tmp.mode == 0o1777


def test_the_kubeflow_namespace_audits_restricted_and_runs_on_the_real_node() -> None:
    namespace = yaml.safe_load(backend._namespace())
    labels, annotations = namespace["metadata"]["labels"], namespace["metadata"]["annotations"]
    # Enforcing "restricted" refuses KFP's step pods (runAsNonRoot unset on them): see _namespace.
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert annotations["scheduler.alpha.kubernetes.io/node-selector"] == "kubetrain.dev/node=real"


def test_the_e2e_cluster_applies_the_reapers_identity_but_runs_it_as_a_host_process() -> None:
    """deploy/reaper.yaml's ServiceAccount, Role and RoleBinding as they are (the real authorizer then
    checks that Role), without the Deployment: the reaper runs on the host as that ServiceAccount."""
    docs = list(yaml.safe_load_all(accounts.reaper_identity()))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding"]
    shipped = [d for d in yaml.safe_load_all((backend.REPO_ROOT / "deploy" / "reaper.yaml").read_text()) if d]
    assert [d["metadata"]["name"] for d in docs] == [
        d["metadata"]["name"] for d in shipped if d["kind"] != "Deployment"
    ]
    assert {d["metadata"]["namespace"] for d in docs} == {"kubeflow"}
    assert {d["metadata"]["namespace"] for d in yaml.safe_load_all(accounts.reaper_identity("alice"))} == {"alice"}


def test_the_harness_runs_argo_with_the_advised_requeue_times_unless_asked_for_kfps_shipped_ones() -> None:
    advised = backend.harness_argo_knobs({})
    assert advised == {"DEFAULT_REQUEUE_TIME": "2s", "RECENTLY_STARTED_POD_DURATION": "2s"}
    # docs/platform-knobs.md advises these very values: the harness and the advice move together.
    knobs_page = (Path(__file__).resolve().parents[2] / "docs" / "platform-knobs.md").read_text()
    assert all(f"`{name}` | `10s` | `{value}`" in knobs_page for name, value in advised.items())
    assert backend.harness_argo_knobs({"KUBETRAIN_ARGO_SHIPPED": "1"}) == {}
