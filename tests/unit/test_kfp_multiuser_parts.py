"""The multi-user KFP tier's pure parts (tools/cluster/kfp/multiuser.py, api_server.py) and Argo's cluster RBAC."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tools.cluster.kfp import api_server, backend, manifests, multiuser, profiles

ARGO_ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: argo-role}
rules:
- {apiGroups: [""], resources: [pods], verbs: [create, get]}
"""


def test_the_multi_user_server_runs_upstreams_multi_user_settings_on_a_database_and_service_of_its_own() -> None:
    store = api_server.ObjectStore("10.244.0.1", 19000)
    env = api_server.environment(Path("/k"), store, multiuser.PORTS, multiuser.api_server_env())
    assert env["MULTIUSER"] == "true" and env["DEFAULTPIPELINERUNNERSERVICEACCOUNT"] == "default-editor"
    assert (env["KUBEFLOW_USERID_HEADER"], env["KUBEFLOW_USERID_PREFIX"]) == ("kubeflow-userid", "")
    standalone = api_server.environment(Path("/k"), store, backend.STANDALONE, {})
    # Two servers, one MariaDB: each its own database; each compiles its own Service into the steps.
    assert env["DBCONFIG_MYSQLCONFIG_DBNAME"] != standalone.get("DBCONFIG_MYSQLCONFIG_DBNAME", "mlpipeline")
    assert (env["ML_PIPELINE_SERVICE_NAME"], standalone["ML_PIPELINE_SERVICE_NAME"]) == (
        "ml-pipeline-mu",
        "ml-pipeline",
    )
    assert "MULTIUSER" not in standalone
    argv = api_server.argv(Path("/b/apiserver"), Path("/c"), multiuser.PORTS)
    assert {"--rpcPortFlag=:28887", "--httpPortFlag=:28888", "--webhookPortFlag=:28443"} <= set(argv)


def test_both_servers_ports_are_distinct_from_every_other_backend_port() -> None:
    with_tier, without = backend.ports(), backend.ports(multi_user=False)
    # None overwrote another in the merge: the tier's own, and SeaweedFS's IAM API.
    assert len(with_tier) == len(without) + len(multiuser.ports()) + 1 and set(multiuser.ports()) <= set(with_tier)
    assert with_tier[backend.MULTI_USER_WEED_PORTS.iam] == "SeaweedFS (IAM API)"  # type: ignore[index]


def test_each_profile_has_a_persistence_agent_reporting_only_its_namespace_to_the_multi_user_server() -> None:
    agent = yaml.safe_load(multiuser.persistence_agent("alice"))
    args = agent["spec"]["template"]["spec"]["containers"][0]["args"]
    assert agent["metadata"]["name"] == "ml-pipeline-persistenceagent-alice"
    assert "--namespace=alice" in args and "--mlPipelineAPIServerName=ml-pipeline-mu" in args
    standalone = yaml.safe_load(manifests.persistence_agent())["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=kubeflow" in standalone and "--mlPipelineAPIServerName=ml-pipeline" in standalone


def test_a_profile_gets_kubetrains_deploy_objects_in_its_namespace_and_a_workspace_claim(tmp_path: Path) -> None:
    bob = profiles.Profile("bob", "bob@example.com", {"requests.cpu": "4"})
    docs = [d for text in multiuser.kubetrain_objects(bob, tmp_path) for d in yaml.safe_load_all(text) if d]
    namespaced = [d for d in docs if d["kind"] != "PersistentVolume"]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"bob"}
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("RoleBinding", "kubetrain-launcher-default-editor"), ("LimitRange", "kubetrain-default-requests"),
            ("PersistentVolumeClaim", "kubetrain-workspace")} <= kinds  # fmt: skip
    volume = next(d for d in docs if d["kind"] == "PersistentVolume")
    assert volume["spec"]["hostPath"]["path"] == str(tmp_path)
    # Without a quota no LimitRange: nothing refuses a pod without requests there.
    alice = [d for t in multiuser.kubetrain_objects(profiles.Profile("alice", "a@example.com"), tmp_path)
             for d in yaml.safe_load_all(t) if d]  # fmt: skip
    assert "LimitRange" not in {d["kind"] for d in alice}


def test_argo_watches_every_namespace_with_its_namespace_roles_rules_as_a_cluster_role(tmp_path: Path) -> None:
    role = tmp_path / manifests.ARGO_NAMESPACE_ROLE
    role.parent.mkdir(parents=True)
    role.write_text(ARGO_ROLE)
    cluster_role, binding = yaml.safe_load_all(manifests.argo_cluster_rbac(tmp_path))
    assert cluster_role["kind"] == "ClusterRole" and cluster_role["rules"][0]["resources"] == ["pods"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "argo", "namespace": "kubeflow"}]
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]


def test_the_tier_is_on_unless_turned_off_and_needs_seaweedfs_for_each_profiles_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBETRAIN_KFP_MULTIUSER", raising=False)
    assert multiuser.enabled("seaweedfs") and not multiuser.enabled("moto")
    monkeypatch.setenv("KUBETRAIN_KFP_MULTIUSER", "0")
    assert not multiuser.enabled("seaweedfs")


def test_pods_reach_the_multi_user_server_only_through_its_proxy_and_never_the_ui_or_the_login() -> None:
    script = multiuser.pod_guard()
    dropped = {int(p) for p in script.split("tcp dport {")[1].split("}")[0].replace(",", " ").split()}
    assert {multiuser.PORTS.http, multiuser.PORTS.grpc, multiuser.UI_PORT} <= dropped
    assert not {multiuser.GUARD_HTTP_PORT, multiuser.GUARD_GRPC_PORT} & dropped  # the way pods take
    service, _endpoints = yaml.safe_load_all(multiuser.service("10.244.0.1"))
    assert {p["port"]: p["targetPort"] for p in service["spec"]["ports"]} == {
        8887: multiuser.GUARD_GRPC_PORT, 8888: multiuser.GUARD_HTTP_PORT}  # fmt: skip
