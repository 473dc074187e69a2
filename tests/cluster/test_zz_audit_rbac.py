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

from kubetrain.presets.defaults import PS_MASTER_SERVICE_ACCOUNT as PS_MASTER_ACCOUNT
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


def _ps_master_events(cluster: Cluster) -> list[dict[str, Any]]:
    events = []
    for line in cluster.audit_log.read_text().splitlines():
        event = json.loads(line)
        user = str(event.get("user", {}).get("username", ""))
        if user.endswith(f":{PS_MASTER_ACCOUNT}") and event.get("stage") == "ResponseComplete":
            events.append(event)
    return events


def test_the_ps_masters_used_every_verb_of_their_role_and_were_never_forbidden(cluster: Cluster) -> None:
    # The PS jobs of the tier's real pods watch their own pods for preemptions (kubetrain.elastic)
    # as deploy/rbac.yaml's kubetrain-ps-master: a refused watch would leave preempted workers'
    # tasks to their lease, so a refusal anywhere is a failure here, not only a line in a step log.
    events = _ps_master_events(cluster)
    assert events, f"no request of a {PS_MASTER_ACCOUNT} in {cluster.audit_log}: did no PS job run in real pods?"
    refused = [(e["user"]["username"], e["verb"], *_resource(e), e["responseStatus"]["code"]) for e in events
               if e.get("responseStatus", {}).get("code") in (401, 403)]  # fmt: skip
    assert not refused, refused
    used = {(*_resource(e), e["verb"]) for e in events}
    rbac = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
    role = next(d for d in yaml.safe_load_all(rbac.read_text())
                if d and d["kind"] == "Role" and d["metadata"]["name"] == PS_MASTER_ACCOUNT)  # fmt: skip
    unused = [(verb, rule["resources"]) for rule in role["rules"] for verb in rule["verbs"]
              if not any((g, r, verb) in used for g in rule["apiGroups"] for r in rule["resources"])]  # fmt: skip
    assert not unused, f"granted to {PS_MASTER_ACCOUNT} but never used: {unused}; used: {sorted(used)}"
