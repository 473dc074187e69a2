"""The Profile stand-in of the multi-user tier (issue 47): a profile's objects, as pure builders.

Kubeflow's Profile controller (kubeflow/dashboard `components/profile-controller`) does not build
here: the Go module proxy refuses its repository, and it needs Istio's AuthorizationPolicy CRD
(docs/design/multi-user.md). `profile_objects` returns what it creates for a Profile, with the same
names, minus the Istio policy, the finalizer and the owner references (there is no Profile CRD):
the namespace, `default-editor` and `default-viewer` bound to `kubeflow-edit` and `kubeflow-view`,
the owner bound to `kubeflow-admin` as `namespaceAdmin`, and `kf-resource-quota`. The KFP objects
of each namespace (`kfp-launcher`, the artifact Secret, ...) are not built here: upstream's own
sync hook returns them (tools/cluster/kfp/profile_hook.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from kubetrain.errors import SpecError
from kubetrain.names import is_dns1123_label, is_quantity
from tools.cluster.kfp import manifests

QUOTA_NAME = "kf-resource-quota"
EDITOR = "default-editor"
VIEWER = "default-viewer"
ADMIN_BINDING = "namespaceAdmin"
# kubeflow/dashboard's profile-controller `namespace-labels.yaml`, without `istio-injection:
# enabled` (no mesh here). `pipelines.kubeflow.org/enabled` is what KFP's sync hook selects on.
PROFILE_LABELS = {
    "katib.kubeflow.org/metrics-collector-injection": "enabled",
    "serving.kubeflow.org/inferenceservice": "enabled",
    "pipelines.kubeflow.org/enabled": "true",
    "app.kubernetes.io/part-of": "kubeflow-profile",
}
# Namespaces a profile must never take over: the platform's own and Kubernetes'.
RESERVED = ("default", manifests.NAMESPACE)
# An address the API server's SubjectAccessReview is made for (oauth2-proxy passes the `email`
# claim): one @, no spaces or control characters.
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\Z")


@dataclass(frozen=True)
class Profile:
    """One user's profile: namespace `name`, owned by `owner` (an email), with an optional quota.

    `quota` is a ResourceQuota's `spec.hard` (resource name to quantity, e.g. `{"requests.cpu":
    "2"}`); empty means no `kf-resource-quota`, as upstream creates one only when the Profile's
    `resourceQuotaSpec` has `hard`.
    """

    name: str
    owner: str
    quota: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not is_dns1123_label(self.name):
            raise SpecError("Profile.name", self.name,
                            "a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters, "
                            "starting and ending alphanumeric), e.g. 'alice' or 'kubeflow-user-a-example-com'; "
                            "rename the profile")  # fmt: skip
        if self.name in RESERVED or self.name.startswith("kube-"):
            taken = ", ".join(RESERVED)
            raise SpecError(
                "Profile.name", self.name, f"a namespace of its own, not {taken} or kube-*; rename the profile"
            )
        if not isinstance(self.owner, str) or not _EMAIL.match(self.owner):
            raise SpecError("Profile.owner", self.owner,
                            "the owner's email as the login sets the kubeflow-userid header, e.g. "
                            "'alice@example.com'")  # fmt: skip
        for resource, amount in self.quota.items():
            if not isinstance(resource, str) or not resource:
                raise SpecError("Profile.quota", resource, "a resource name such as 'requests.cpu' or 'pods'")
            if not isinstance(amount, str) or not is_quantity(amount):
                raise SpecError(f"Profile.quota[{resource!r}]", amount,
                                "a Kubernetes quantity as a string, e.g. '2', '500m' or '4Gi'")  # fmt: skip
        # Frozen means frozen: the caller's dict may change after construction.
        object.__setattr__(self, "quota", MappingProxyType(dict(self.quota)))


def profile_objects(profile: Profile) -> str:
    """The profile's objects as one multi-document YAML, in the order they can be applied."""
    return yaml.safe_dump_all(profile_documents(profile), sort_keys=True)


def profile_documents(profile: Profile) -> list[dict[str, Any]]:
    """`profile_objects` as dicts: Namespace, ServiceAccounts, RoleBindings, then the quota if any."""
    ns = profile.name
    namespace = manifests.node_namespace(ns, labels=PROFILE_LABELS, annotations={"owner": profile.owner})
    docs: list[dict[str, Any]] = [namespace]
    for account, role in ((EDITOR, "kubeflow-edit"), (VIEWER, "kubeflow-view")):
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}})
        subject = {"kind": "ServiceAccount", "name": account, "namespace": ns}
        docs.append(_role_binding(ns, account, role, subject))
    owner = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": profile.owner}
    # The annotations are how the Central Dashboard and KFP's UI list a namespace's contributors.
    docs.append(_role_binding(ns, ADMIN_BINDING, "kubeflow-admin", owner,
                              annotations={"user": profile.owner, "role": "admin"}))  # fmt: skip
    if profile.quota:
        docs.append({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": QUOTA_NAME, "namespace": ns},
                     "spec": {"hard": dict(profile.quota)}})  # fmt: skip
    return docs


def _role_binding(namespace: str, name: str, cluster_role: str, subject: dict[str, str],
                  annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [subject]}  # fmt: skip
