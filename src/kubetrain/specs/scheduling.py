"""Where training pods may run and how they rank: node affinity, the priority class, the user's metadata.

Node affinity is what a KFP task's `kfp.kubernetes.add_node_affinity` hands the component (the
KFP driver passes a Kubernetes `NodeAffinity`); the priority class names a cluster's
`PriorityClass`; labels and annotations are the user's own (a Kueue queue name, a cost centre),
kept apart from the keys kubetrain sets itself, which no user value may replace. Each is checked
here against the API server's own rules, so a mistake is named before anything is submitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kubetrain.errors import SpecError
from kubetrain.names import LABEL_MANAGED_BY, is_dns1123_subdomain, is_label_key, is_label_value

NodeOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
NODE_OPERATORS: tuple[str, ...] = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
# The only node field a matchFields requirement may name (the API server's validation).
NODE_NAME_FIELD = "metadata.name"

# Istio's sidecar keeps a pod Running after the training container exits and swallows log reads
# without an explicit container name (kubeflow/trainer#1182, #1183): kubetrain turns it off for
# every job pod, as a label and an annotation.
ISTIO_INJECT = "sidecar.istio.io/inject"
KUBETRAIN_KEY_PREFIX = "kubetrain.io/"
# Keys kubetrain writes on jobs and pods: the KFP run and task it adopts by, the component, the
# replica type, the manager, the sidecar switch. A user's label or annotation may not replace them.
RESERVED_KEYS = (LABEL_MANAGED_BY, ISTIO_INJECT)
# The API server refuses an object whose annotations (keys and values) exceed 256 KiB in total.
ANNOTATIONS_MAX_BYTES = 256 * 1024
# Annotations that set a pod's or a container's security profile, AppArmor's and the old seccomp
# ones (the kubelet still honours them): `...apparmor.../<container>: unconfined` turns AppArmor
# off, and the "baseline" Pod Security Standard forbids changing them. kubetrain's pods keep
# RuntimeDefault, so no input and no manifest_patch may set one, on the job or on a pod.
SECURITY_PROFILE_PREFIXES = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)
SECURITY_PROFILE_PROBLEM = "a key of your own: it would set a security profile, and the pods keep RuntimeDefault"


def is_reserved_key(key: str) -> bool:
    """True for a label or annotation key kubetrain sets itself."""
    return key.startswith(KUBETRAIN_KEY_PREFIX) or key in RESERVED_KEYS


def is_security_profile_key(key: object) -> bool:
    """True for a label or annotation key that sets an AppArmor or seccomp profile."""
    return isinstance(key, str) and key.startswith(SECURITY_PROFILE_PREFIXES)


def check_user_metadata(labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
    """The user's labels and annotations: valid keys and label values, none of kubetrain's own keys."""
    for field_name, items in (("labels", labels), ("annotations", annotations)):
        for key, value in items.items():
            where = f"{field_name}[{key!r}]"
            if not isinstance(key, str) or not is_label_key(key):
                raise SpecError(
                    where, key, "a qualified key: an optional DNS prefix and '/', then ≤63 alphanumerics, '-', '_', '.'"
                )
            if is_reserved_key(key):
                raise SpecError(
                    where,
                    key,
                    f"a key of your own: kubetrain sets {KUBETRAIN_KEY_PREFIX}* and {', '.join(RESERVED_KEYS)} itself "
                    "(the KFP run and task it re-attaches by, the manager, the sidecar switch); choose another key",
                )
            if is_security_profile_key(key):
                raise SpecError(where, key, SECURITY_PROFILE_PROBLEM)
            if not isinstance(value, str):
                raise SpecError(where, value, "a string value (quote numbers and booleans)")
            if field_name == "labels" and not is_label_value(value):
                raise SpecError(where, value, "a label value: ≤63 alphanumerics, '-', '_', '.', or empty")
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        raise SpecError("annotations", f"{size} bytes", f"at most {ANNOTATIONS_MAX_BYTES} bytes in all (256 KiB)")


def check_priority_class(value: str | None, field_name: str = "priority_class") -> None:
    """The name of a PriorityClass (a DNS-1123 subdomain), or None for the cluster's default."""
    if value is not None and (not isinstance(value, str) or not is_dns1123_subdomain(value)):
        raise SpecError(
            field_name, value, "the name of a PriorityClass (lower-case alphanumerics, '-' and '.'), or empty"
        )


@dataclass(frozen=True, kw_only=True)
class NodeSelectorRequirement:
    """One requirement on a node's labels (or, in matchFields, on its name)."""

    key: str
    operator: NodeOperator
    values: tuple[str, ...] = ()

    def check(self, where: str, *, field: bool) -> None:
        """The API server's rules for a matchExpressions (or, with `field`, a matchFields) item."""
        if field and self.key != NODE_NAME_FIELD:
            raise SpecError(f"{where}.key", self.key, f"{NODE_NAME_FIELD!r}, the only field matchFields supports")
        if not field and (not isinstance(self.key, str) or not is_label_key(self.key)):
            raise SpecError(f"{where}.key", self.key, "a node label key such as topology.kubernetes.io/zone")
        if self.operator not in NODE_OPERATORS:
            raise SpecError(f"{where}.operator", self.operator, f"one of {', '.join(NODE_OPERATORS)}")
        if not all(isinstance(v, str) for v in self.values):
            raise SpecError(f"{where}.values", list(self.values), "strings (quote numbers)")
        if field and (self.operator not in ("In", "NotIn") or len(self.values) != 1):
            raise SpecError(where, self, "operator In or NotIn with exactly one node name")
        if self.operator in ("In", "NotIn") and not self.values:
            raise SpecError(f"{where}.values", [], f"at least one value with operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise SpecError(f"{where}.values", list(self.values), f"no values with operator {self.operator}")
        if self.operator in ("Gt", "Lt") and (len(self.values) != 1 or not _is_int(self.values[0])):
            raise SpecError(f"{where}.values", list(self.values), f"exactly one integer with operator {self.operator}")

    def __post_init__(self) -> None:
        if isinstance(self.values, (str, bytes)) or not isinstance(self.values, (tuple, list)):
            raise SpecError("values", self.values, "a list of strings")
        object.__setattr__(self, "values", tuple(self.values))


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


@dataclass(frozen=True, kw_only=True)
class NodeSelectorTerm:
    """Requirements that must all hold on one node (a term of `nodeSelectorTerms`)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def check(self, where: str) -> None:
        """Every requirement valid; at least one (an empty term matches no node at all)."""
        if not self.match_expressions and not self.match_fields:
            raise SpecError(where, {}, "matchExpressions or matchFields: an empty term matches no node")
        for i, req in enumerate(self.match_expressions):
            req.check(f"{where}.matchExpressions[{i}]", field=False)
        for i, req in enumerate(self.match_fields):
            req.check(f"{where}.matchFields[{i}]", field=True)


@dataclass(frozen=True, kw_only=True)
class PreferredSchedulingTerm:
    """A term the scheduler prefers, by weight (1-100), without requiring it."""

    weight: int
    preference: NodeSelectorTerm


@dataclass(frozen=True, kw_only=True)
class NodeAffinity:
    """A pod's node affinity: terms one of which must hold (`required`), and weighted preferences."""

    required: tuple[NodeSelectorTerm, ...] = ()
    preferred: tuple[PreferredSchedulingTerm, ...] = ()

    def __post_init__(self) -> None:
        for name in ("required", "preferred"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)):
                raise SpecError(f"affinity.{name}", value, "a list of terms")
            object.__setattr__(self, name, tuple(value))
        if not self.required and not self.preferred:
            raise SpecError("affinity", self, "required or preferred node terms (or no affinity at all)")
        required = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        for i, term in enumerate(self.required):
            term.check(f"{required}[{i}]")
        preferred = "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
        for i, pref in enumerate(self.preferred):
            weight = pref.weight
            if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                raise SpecError(f"{preferred}[{i}].weight", weight, "an integer from 1 to 100")
            pref.preference.check(f"{preferred}[{i}].preference")
