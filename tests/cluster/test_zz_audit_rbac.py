"""deploy/rbac.yaml against what the launcher really sent, from the kube-apiserver's audit log.

Runs after the other modules of the tier (`make e2e` runs it alone once both halves have ended,
tools/ci/e2e.py; the file name sorts last for a plain pytest), so the log holds every request the
non-admin launcher user made: none may have been refused, and every
verb the Role grants must have been used on at least one resource of its rule (TrainJobs
included: the Trainer v2 controller runs here too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tools.cluster.controlplane import LAUNCHER_USER, Cluster


def _launcher_events(cluster: Cluster) -> list[dict[str, Any]]:
    events = []
    for line in cluster.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") == LAUNCHER_USER and event.get("stage") == "ResponseComplete":
            events.append(event)
    return events


def _resource(event: dict[str, Any]) -> tuple[str, str]:
    ref = event.get("objectRef", {})
    resource = ref.get("resource", "")
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return ref.get("apiGroup", ""), resource


def test_the_launcher_was_never_forbidden(cluster: Cluster) -> None:
    events = _launcher_events(cluster)
    assert events, f"no request of {LAUNCHER_USER} in {cluster.audit_log}"
    refused = [(e["verb"], *_resource(e), e["responseStatus"]["code"]) for e in events
               if e.get("responseStatus", {}).get("code") in (401, 403)]  # fmt: skip
    assert not refused, refused


# Granted for a path a real server takes only when it must: a job's watch begins at the create's
# resourceVersion, and the job is listed afresh only when a watch is answered 410 Gone (history
# compacted under a long wait), which no test can make a real API server do on demand. The
# stand-in provokes it (`tests/integration/test_k8s_rbac.py`, cut_watches(expire=True)) and shows
# the list is then made.
ONLY_AFTER_GONE = {("list", resource) for resource in ("pytorchjobs", "mpijobs", "jobsets", "trainjobs")}


def test_rbac_grants_no_verb_the_launcher_did_not_use(cluster: Cluster) -> None:
    used = {(*_resource(e), e["verb"]) for e in _launcher_events(cluster)}
    rbac = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
    role = next(d for d in yaml.safe_load_all(rbac.read_text()) if d and d["kind"] == "Role")
    unused = []
    for rule in role["rules"]:
        groups = rule["apiGroups"]
        for verb in rule["verbs"]:
            if all((verb, r) in ONLY_AFTER_GONE for r in rule["resources"]):
                continue
            if not any((g, r, verb) in used for g in groups for r in rule["resources"]):
                unused.append((verb, rule["resources"]))
    assert not unused, f"granted but never used: {unused}; used: {sorted(used)}"
