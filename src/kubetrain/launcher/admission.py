"""Pods the API server refused to create, read from the controllers' FailedCreate events.

An operator or the Job controller that cannot create a pod says why only in a Warning event
(`FailedCreate` from the Job controller, `FailedCreatePod` from the training-operator), and keeps
trying. Some refusals pass when other work ends (a ResourceQuota that is full now); others can
never pass (a pod that asks for more than the quota's whole limit, a PriorityClass or service
account that does not exist, a pod the namespace's Pod Security level forbids). The launcher
reports the first kind as waiting and fails the step at once on the second, instead of waiting out
`start_timeout_seconds` for pods that will never exist.

Pure: an event's reason and message in, a verdict out. The messages are the API server's own
(`k8s.io/apiserver` admission plugins, `kubernetes/plugin/pkg/admission`), stable across releases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = ["FAILED_CREATE_REASONS", "Refusal", "refusal"]

# The Job controller (and JobSet's child Jobs), the training-operator, the mpi-operator.
FAILED_CREATE_REASONS = frozenset({"FailedCreate", "FailedCreatePod"})

# "exceeded quota: NAME, requested: cpu=4,memory=1Gi, used: cpu=1, limited: cpu=2" (no spaces in a list).
_QUOTA = re.compile(
    r"exceeded quota: (?P<quota>[^,]+), requested: (?P<requested>\S+), used: (?P<used>\S+), "
    r"limited: (?P<limited>[^\s,]+(?:,[^\s,]+)*)"
)
_PRIORITY_CLASS = re.compile(r"no PriorityClass with name (?P<name>\S+) was found")
_SERVICE_ACCOUNT = re.compile(r'serviceaccount "(?P<name>[^"]+)" not found')
_POD_SECURITY = re.compile(r'violates PodSecurity "(?P<level>[^"]+)": (?P<why>.*)')
_QUOTA_NEEDS = re.compile(r"failed quota: (?P<quota>[^:]+): must specify (?P<what>.*)")
_LIMIT_RANGE = re.compile(r"(?P<what>(maximum|minimum) \S+ usage per (Container|Pod) is .*)")

_SUFFIXES = {
    "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}  # fmt: skip


@dataclass(frozen=True)
class Refusal:
    """Why a pod was refused; `final` when waiting cannot help."""

    line: str
    final: bool


def _quantity(text: str) -> Decimal | None:
    match = re.fullmatch(r"([0-9.]+(?:[eE][0-9]+)?)([a-zA-Z]{0,2})", text.strip())
    if match is None or match.group(2) not in ("", *_SUFFIXES):
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIXES.get(match.group(2), Decimal(1))
    except InvalidOperation:
        return None


def _amounts(text: str) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return {key.strip(): value.strip() for key, value in pairs}


def _quota(match: re.Match[str], namespace: str) -> Refusal:
    quota = match["quota"].strip()
    requested, used, limited = (_amounts(match[k]) for k in ("requested", "used", "limited"))
    parts, final = [], False
    for resource, asked in requested.items():
        limit, now = limited.get(resource, "?"), used.get(resource, "0")
        parts.append(f"{resource}={asked}, used {now} of {limit}")
        need, cap = _quantity(asked), _quantity(limit)
        final = final or (need is not None and cap is not None and need > cap)
    asked_for = "; ".join(parts)
    if final:
        return Refusal(
            f"pods refused by ResourceQuota {quota} in {namespace}: requested {asked_for}. One pod asks for more "
            "than the quota allows at all: lower the request (cpu, memory, gpus) or ask for a larger quota",
            final=True,
        )
    return Refusal(
        f"waiting for ResourceQuota {quota} in {namespace}: requested {asked_for}; the pods are created "
        "when other work in the namespace releases its share",
        final=False,
    )


def refusal(reason: str, message: str, *, namespace: str) -> Refusal | None:
    """The verdict on one Warning event, or None when it is not a refused pod creation."""
    if reason not in FAILED_CREATE_REASONS:
        return None
    if (m := _QUOTA.search(message)) is not None:
        return _quota(m, namespace)
    if (m := _QUOTA_NEEDS.search(message)) is not None:
        return Refusal(
            f"pods refused by ResourceQuota {m['quota'].strip()} in {namespace}: it needs every pod to set "
            f"{m['what'].strip()} (set cpu and memory on the step, or add a LimitRange with defaults)",
            final=True,
        )
    if (m := _PRIORITY_CLASS.search(message)) is not None:
        return Refusal(
            f"pods refused: PriorityClass {m['name']} does not exist in this cluster (a cluster admin applies "
            "deploy/priority-classes.yaml, or set the priority class input to one that exists, or empty)",
            final=True,
        )
    if (m := _SERVICE_ACCOUNT.search(message)) is not None:
        return Refusal(
            f"pods refused: service account {m['name']} does not exist in {namespace} (apply deploy/rbac.yaml "
            "in this namespace, or name an existing account)",
            final=True,
        )
    if (m := _POD_SECURITY.search(message)) is not None:
        return Refusal(f"pods refused by {namespace}'s Pod Security level {m['level']}: {m['why'].strip()}", final=True)
    if (m := _LIMIT_RANGE.search(message)) is not None:
        return Refusal(f"pods refused by a LimitRange in {namespace}: {m['what'].strip()}", final=True)
    return None
