"""The multi-user tier's cluster-wide RBAC (tools/cluster/kfp/cluster_rbac.py): Kubeflow's roles (our
copy), KFP's multi-user files and the operators' aggregated roles, read from where the builds put them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.presets.defaults import PS_MASTER_SERVICE_ACCOUNT
from tools.cluster import build_script, controlplane, node
from tools.cluster.kfp import backend, cluster_rbac, manifests, multiuser
from tools.cluster.kfp.cluster_rbac import KFP_MULTIUSER_FILES, OPERATORS, ClusterRbacError
from tools.cluster.kfp.manifests import NAMESPACE as KFP_NAMESPACE

AGGREGATE = "rbac.authorization.kubeflow.org/aggregate-to-"


def _docs(files: list[cluster_rbac.RbacFile]) -> list[dict[str, Any]]:
    return [d for f in files for d in yaml.safe_load_all(f.text) if d]


def _fake_trees(tmp_path: Path) -> tuple[Path, Path]:
    """A KFP tree and a module cache holding one small file per path the module reads."""
    kfp = tmp_path / "pipelines"
    for relative in KFP_MULTIUSER_FILES:
        path = kfp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        name = path.parent.name + "-" + path.stem
        if path.stem.endswith("binding"):
            doc = {"kind": "ClusterRoleBinding", "metadata": {"name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": "ml-pipeline"},
                                {"kind": "ServiceAccount", "name": "other", "namespace": "elsewhere"},
                                {"kind": "Group", "name": "system:authenticated"}]}  # fmt: skip
        else:
            doc = {"kind": "ClusterRole", "metadata": {"name": name}, "rules": []}
        path.write_text(yaml.safe_dump(doc))
    cache = tmp_path / "mod"
    for operator in OPERATORS:
        version = cluster_rbac.pinned_version(operator.pinned_in, operator.module)
        path = cache / f"{operator.module}@{version}" / operator.path
        path.parent.mkdir(parents=True, exist_ok=True)
        docs = [{"kind": "ClusterRole", "metadata": {"name": f"{operator.name_prefix}edit"}},
                {"kind": "Deployment", "metadata": {"name": "controller"}},
                {"kind": "ClusterRole", "metadata": {"name": "controller-role"}}]  # fmt: skip
        path.write_text(yaml.safe_dump_all(docs))
    return kfp, cache


def test_kubeflows_roles_aggregate_view_into_edit_into_admin() -> None:
    roles = {d["metadata"]["name"]: d for d in yaml.safe_load_all(cluster_rbac.KUBEFLOW_ROLES.read_text()) if d}
    assert set(roles) == {f"kubeflow-{r}" for r in ("admin", "edit", "view")} | {
        f"kubeflow-kubernetes-{r}" for r in ("admin", "edit", "view")}  # fmt: skip
    for role in ("admin", "edit", "view"):
        selector = roles[f"kubeflow-{role}"]["aggregationRule"]["clusterRoleSelectors"]
        assert selector == [{"matchLabels": {f"{AGGREGATE}kubeflow-{role}": "true"}}]
        assert roles[f"kubeflow-kubernetes-{role}"]["metadata"]["labels"] == {f"{AGGREGATE}kubeflow-{role}": "true"}
    assert roles["kubeflow-edit"]["metadata"]["labels"] == {f"{AGGREGATE}kubeflow-admin": "true"}
    assert roles["kubeflow-view"]["metadata"]["labels"] == {f"{AGGREGATE}kubeflow-edit": "true"}
    edit = roles["kubeflow-kubernetes-edit"]["rules"]
    assert any("secrets" in r["resources"] and "create" in r["verbs"] for r in edit)  # a step's own Secrets


def test_kfps_bindings_name_their_service_accounts_in_kubeflow_as_kustomize_would(tmp_path: Path) -> None:
    kfp, cache = _fake_trees(tmp_path)
    docs = _docs(cluster_rbac.cluster_rbac(kfp, cache))
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert len(bindings) == 3  # the API server's, the persistence agent's, the UI server's
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ml-pipeline", "namespace": "kubeflow"},
                                       {"kind": "ServiceAccount", "name": "other", "namespace": "elsewhere"},
                                       {"kind": "Group", "name": "system:authenticated"}]  # fmt: skip


def test_only_the_operators_aggregated_roles_are_taken_from_their_files(tmp_path: Path) -> None:
    kfp, cache = _fake_trees(tmp_path)
    files = cluster_rbac.cluster_rbac(kfp, cache)
    operator_docs = _docs(files[-len(OPERATORS) :])
    assert "controller" not in {d["metadata"]["name"] for d in operator_docs}  # no Deployment
    mpi = [f for f in files if f.source.name == "mpi-operator.yaml"]
    assert [d["metadata"]["name"] for d in _docs(mpi)] == ["kubeflow-mpijobs-edit"]  # not the controller's role


def test_a_missing_file_is_named_with_the_build_that_makes_it(tmp_path: Path) -> None:
    kfp, cache = _fake_trees(tmp_path)
    with pytest.raises(ClusterRbacError, match=r"training-operator v1\.9\.3 \(`make controlplane`\)"):
        cluster_rbac.cluster_rbac(kfp, tmp_path / "empty-cache")
    (kfp / KFP_MULTIUSER_FILES[0]).unlink()
    with pytest.raises(ClusterRbacError, match=r"view-edit-cluster-roles\.yaml is missing: run tools/kfp/build\.sh"):
        cluster_rbac.cluster_rbac(kfp, cache)


def test_the_versions_are_the_control_planes_pins() -> None:
    pins = {o.module: cluster_rbac.pinned_version(o.pinned_in, o.module) for o in OPERATORS}
    assert pins == {"github.com/kubeflow/training-operator": "v1.9.3", "github.com/kubeflow/mpi-operator": "v0.8.0",
                    "github.com/kubeflow/trainer/v2": "v2.3.0"}  # fmt: skip
    with pytest.raises(ClusterRbacError, match=r"does not require example\.com/nothing"):
        cluster_rbac.pinned_version(OPERATORS[0].pinned_in, "example.com/nothing")


def _real_trees() -> tuple[Path, Path] | None:
    bins = build_script.printed_folder(backend.BUILD_SCRIPT, "--print-bin")
    kfp = manifests.kfp_tree(bins) if bins else None
    try:
        cache = cluster_rbac.go_mod_cache()
    except ClusterRbacError:
        return None
    if kfp is None or not (kfp / KFP_MULTIUSER_FILES[0]).is_file():
        return None
    if not all(
        (cache / f"{o.module}@{cluster_rbac.pinned_version(o.pinned_in, o.module)}").is_dir() for o in OPERATORS
    ):
        return None
    return kfp, cache


def test_with_the_real_files_kubeflow_edit_lets_default_editor_run_every_kind_but_jobsets() -> None:
    trees = _real_trees()
    if trees is None:
        pytest.skip(
            "the KFP source tree or the operators' modules are not there: tools/kfp/build.sh, make controlplane"
        )
    docs = _docs(cluster_rbac.cluster_rbac(*trees))
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}

    def aggregated(role: str) -> set[str]:  # what the API server's aggregation controller folds in
        selectors = [s["matchLabels"] for s in roles[role].get("aggregationRule", {}).get("clusterRoleSelectors", [])]
        out = {role}
        for name, doc in roles.items():
            labels = doc["metadata"].get("labels", {})
            if name != role and any(sel.items() <= labels.items() for sel in selectors):
                out |= aggregated(name)
        return out

    edit = aggregated("kubeflow-edit")
    assert {"kubeflow-pipelines-edit", "kubeflow-training-edit", "kubeflow-mpijobs-edit", "kubeflow-trainer-edit",
            "kubeflow-kubernetes-edit", "kubeflow-view"} <= edit  # fmt: skip
    granted = {(group, resource, verb) for name in edit for rule in roles[name].get("rules", [])
               for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}  # fmt: skip
    for group, resource in (("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "mpijobs"),
                            ("trainer.kubeflow.org", "trainjobs"), ("argoproj.io", "workflows")):  # fmt: skip
        assert (group, resource, "create") in granted or (group, resource, "*") in granted, (group, resource)
    assert ("pipelines.kubeflow.org", "runs", "create") in granted  # the API server's SubjectAccessReview
    # JobSet ships no aggregated role: default-editor gets jobsets from deploy/rbac.yaml (docs/cluster.md).
    assert not [g for g in granted if g[0] == "jobset.x-k8s.io"]


def test_the_audit_log_records_the_ps_master_in_every_namespace_ps_jobs_run_in_real_pods() -> None:
    # tests/cluster/test_zz_audit_rbac.py judges deploy/rbac.yaml's kubetrain-ps-master from these
    # records: a namespace missing here would hide its refusals.
    namespaces = {node.REAL_NAMESPACE, KFP_NAMESPACE, *(p.name for p in multiuser.PROFILES)}
    policy = yaml.safe_load(controlplane.AUDIT_POLICY)
    users = {u for rule in policy["rules"] for u in rule.get("users", [])}
    assert {f"system:serviceaccount:{ns}:{PS_MASTER_SERVICE_ACCOUNT}" for ns in namespaces} <= users
    rbac = yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml").read_text())
    assert any(d and d["kind"] == "Role" and d["metadata"]["name"] == PS_MASTER_SERVICE_ACCOUNT for d in rbac)
