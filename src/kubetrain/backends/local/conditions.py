"""`status.conditions` written the way the operators write them.

Two families: the kubeflow.org job conditions of training-operator and mpi-operator
(`JobCondition`: type, status, reason, message, lastUpdateTime, lastTransitionTime) and JobSet's
`metav1.Condition` (type, status, reason, message, lastTransitionTime).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Status = dict[str, Any]


def rfc3339(when: float | None = None) -> str:
    """A Unix time (default: now) as the API server writes timestamps."""
    moment = datetime.now(UTC) if when is None else datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_is_true(status: Status, ctype: str) -> bool:
    """Whether `status.conditions` holds `ctype` with status "True"."""
    return any(c.get("type") == ctype and c.get("status") == "True" for c in status.get("conditions") or ())


def find_condition(status: Status, ctype: str) -> dict[str, Any] | None:
    """The condition of type `ctype`, if any."""
    for cond in status.get("conditions") or ():
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def set_kubeflow_condition(status: Status, ctype: str, true: bool, reason: str, message: str, *, now: str) -> bool:
    """training-operator's `UpdateJobConditions` (pkg/util/status.go); True when it changed anything.

    - nothing changes once the job is Failed;
    - a condition with the same status and reason is left alone;
    - Running and Restarting replace each other;
    - Succeeded or Failed turn a Running condition to "False";
    - the changed condition moves to the end of the list.
    """
    if condition_is_true(status, "Failed"):
        return False
    value = "True" if true else "False"
    conditions: list[dict[str, Any]] = list(status.get("conditions") or [])
    current = next((c for c in conditions if c.get("type") == ctype), None)
    if current is not None and current.get("status") == value and current.get("reason") == reason:
        return False
    transition = now
    if current is not None and current.get("status") == value:
        transition = str(current.get("lastTransitionTime") or now)
    kept = []
    for cond in conditions:
        other = cond.get("type")
        if other == ctype or (ctype, other) in (("Running", "Restarting"), ("Restarting", "Running")):
            continue
        flip = ctype in ("Succeeded", "Failed") and other == "Running"
        kept.append({**cond, "status": "False"} if flip else cond)
    kept.append(
        {
            "type": ctype,
            "status": value,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": transition,
        }
    )
    status["conditions"] = kept
    return True


def set_jobset_condition(status: Status, ctype: str, true: bool, reason: str, message: str, *, now: str) -> bool:
    """JobSet's `setCondition` for metav1 conditions: update in place, time only on a status flip."""
    value = "True" if true else "False"
    conditions: list[dict[str, Any]] = [dict(c) for c in status.get("conditions") or []]
    for cond in conditions:
        if cond.get("type") != ctype:
            continue
        if cond.get("status") == value and cond.get("reason") == reason and cond.get("message") == message:
            return False
        if cond.get("status") != value:
            cond["lastTransitionTime"] = now
        cond.update(status=value, reason=reason, message=message)
        status["conditions"] = conditions
        return True
    if not true:
        # JobSet never adds a condition as False when it has none of that type.
        return False
    conditions.append({"type": ctype, "status": value, "reason": reason, "message": message, "lastTransitionTime": now})
    status["conditions"] = conditions
    return True
