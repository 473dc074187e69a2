"""Protocol pieces of the fake API server (tests/fake_apiserver.py; a stand-in, not a cluster).

Request records and injected faults, metav1.Status bodies, JSON merge patch, and the field and
label selectors the stand-in understands (it refuses what it does not, rather than misread it).
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
TRUE = ("1", "t", "T", "TRUE", "true", "True")  # what Go's strconv.ParseBool accepts


@dataclass(frozen=True)
class Request:
    """One request as RBAC sees it (verb, API group, resource[/subresource]) plus its details."""

    method: str
    path: str
    query: Mapping[str, str]
    verb: str
    group: str
    resource: str
    body: Any = None
    time: float = field(default_factory=time.monotonic)


@dataclass
class Fault:
    """Answer the next `times` requests matching `match` with `status` (None: close the socket)."""

    match: Callable[[Request], bool]
    status: int | None
    times: int
    retry_after: float | None = None
    message: str = "injected fault"


def status_body(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    """A metav1.Status object."""
    out: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": reason, "code": code}  # fmt: skip
    if details:
        out["details"] = details
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def selector_matches(selector: str, flat: Mapping[str, str]) -> bool:
    """Whether the flattened fields satisfy an equality field selector (`a.b=x,c==y`)."""
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if flat.get(key.rstrip("=!")) != value.lstrip("="):
            return False
    return True


_LABEL_TERM = re.compile(r"^\s*([A-Za-z0-9][-A-Za-z0-9_./]*)\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$")


def parse_label_selector(selector: str) -> list[tuple[str, str, str]] | None:
    """(key, operator, value) of each equality-based requirement; None when one cannot be parsed
    (set-based requirements are not served by this stand-in: refused rather than misread)."""
    terms = []
    for term in filter(None, selector.split(",")):
        match = _LABEL_TERM.match(term)
        if match is None:
            return None
        terms.append((match.group(1), match.group(2), match.group(3)))
    return terms


def labels_match(terms: list[tuple[str, str, str]], labels: Mapping[str, str]) -> bool:
    """Whether labels satisfy every parsed requirement."""
    return all((labels.get(key) == value) == (op != "!=") for key, op, value in terms)


def flat_fields(obj: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`a.b.c` → value for every scalar in an object (what field selectors address)."""
    out: dict[str, str] = {}
    for key, value in obj.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_fields(value, f"{path}."))
        elif not isinstance(value, list):
            out[path] = str(value)
    return out
