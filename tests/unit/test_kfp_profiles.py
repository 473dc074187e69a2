"""The multi-user tier's per-profile objects (tools/cluster/kfp/profiles.py, the Profile stand-in).

The objects' golden file is tests/golden/cluster/profile-alice.yaml (tests/unit/test_golden_manifests.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kubetrain.errors import ExitCode, SpecError
from tools.cluster.kfp import backend, manifests
from tools.cluster.kfp.profiles import PROFILE_LABELS, Profile, profile_documents, profile_objects


def _by_name(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_a_profile_has_upstreams_objects_with_their_exact_names() -> None:
    docs = profile_documents(Profile("alice", "alice@example.com", {"requests.cpu": "2", "pods": "20"}))
    assert set(_by_name(docs)) == {
        ("Namespace", "alice"), ("ServiceAccount", "default-editor"), ("ServiceAccount", "default-viewer"),
        ("RoleBinding", "default-editor"), ("RoleBinding", "default-viewer"), ("RoleBinding", "namespaceAdmin"),
        ("ResourceQuota", "kf-resource-quota"),
    }  # fmt: skip
    assert {d["metadata"].get("namespace", "alice") for d in docs} == {"alice"}
    assert docs[0]["kind"] == "Namespace"  # applied first: everything else lives in it


def test_the_service_accounts_and_the_owner_are_bound_to_kubeflows_roles() -> None:
    objects = _by_name(profile_documents(Profile("alice", "alice@example.com")))
    for account, role in (("default-editor", "kubeflow-edit"), ("default-viewer", "kubeflow-view")):
        binding = objects[("RoleBinding", account)]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "alice"}]
    admin = objects[("RoleBinding", "namespaceAdmin")]
    assert admin["roleRef"]["name"] == "kubeflow-admin"
    # The API server's SubjectAccessReview names the user by the kubeflow-userid header: the email.
    assert admin["subjects"] == [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice@example.com"}]
    assert admin["metadata"]["annotations"] == {"user": "alice@example.com", "role": "admin"}


def test_the_namespace_is_selected_by_kfps_hook_owned_and_lands_on_the_real_node() -> None:
    namespace = profile_documents(Profile("alice", "alice@example.com"))[0]
    labels, annotations = namespace["metadata"]["labels"], namespace["metadata"]["annotations"]
    assert PROFILE_LABELS.items() <= labels.items() and labels["pipelines.kubeflow.org/enabled"] == "true"
    assert "istio-injection" not in labels  # no mesh here
    assert annotations["owner"] == "alice@example.com"
    # The same pod security and placement as `kubeflow`, whose steps run on the real node.
    kubeflow = yaml.safe_load(backend._namespace())
    assert kubeflow["metadata"]["labels"].items() <= labels.items()
    assert kubeflow["metadata"]["annotations"].items() <= annotations.items()


def test_the_shared_namespace_builder_is_what_the_backend_applies_to_kubeflow() -> None:
    assert manifests.node_namespace(manifests.NAMESPACE) == yaml.safe_load(backend._namespace())


def test_the_quota_comes_only_with_hard_limits_and_is_not_changed_by_the_callers_dict() -> None:
    assert ("ResourceQuota", "kf-resource-quota") not in _by_name(profile_documents(Profile("bob", "bob@example.com")))
    hard = {"requests.cpu": "2"}
    profile = Profile("alice", "alice@example.com", hard)
    hard["requests.cpu"] = "200"
    quota = _by_name(profile_documents(profile))[("ResourceQuota", "kf-resource-quota")]
    assert quota["spec"] == {"hard": {"requests.cpu": "2"}}
    assert list(yaml.safe_load_all(profile_objects(profile))) == profile_documents(profile)


@pytest.mark.parametrize(
    ("kwargs", "field", "fix"),
    [
        ({"name": "Alice"}, "Profile.name", "DNS-1123 label"),
        ({"name": "a" * 64}, "Profile.name", "at most 63"),
        ({"name": "alice_smith"}, "Profile.name", "rename the profile"),
        ({"name": "kubeflow"}, "Profile.name", "a namespace of its own"),
        ({"name": "kube-system"}, "Profile.name", "a namespace of its own"),
        ({"owner": "alice"}, "Profile.owner", "alice@example.com"),
        ({"owner": "alice @example.com"}, "Profile.owner", "email"),
        ({"quota": {"requests.cpu": "two"}}, "Profile.quota['requests.cpu']", "Kubernetes quantity"),
        ({"quota": {"requests.cpu": 2}}, "Profile.quota['requests.cpu']", "as a string"),
        ({"quota": {"": "2"}}, "Profile.quota", "resource name"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_field_the_value_and_the_fix(
    kwargs: dict[str, Any], field: str, fix: str
) -> None:
    args: dict[str, Any] = {"name": "alice", "owner": "alice@example.com", **kwargs}
    with pytest.raises(SpecError) as refused:
        Profile(**args)
    assert refused.value.field == field and fix in str(refused.value)
    assert refused.value.exit_code == ExitCode.INVALID_INPUT
