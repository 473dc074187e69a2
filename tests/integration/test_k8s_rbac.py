"""deploy/rbac.yaml grants exactly the API calls the launcher makes: no more, no less.

The calls are recorded by the stand-in API server (tests/fake_apiserver.py; not a cluster) while
the launcher runs every path that talks to the API, for each job kind: adopt after a 409, report
a pending pod and its events, follow the log, succeed and delete, time out and suspend.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.errors import JobTimeoutError
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB, TRAINJOB, JobKind
from tests.conftest import REPO_ROOT
from tests.fake_apiserver import FakeApiServer, make_pod
from tests.integration.k8s_launcher_env import (
    NS,
    Env,
    cond,
    mpi_manifest,
    ps_manifest,
    pytorch_manifest,
    trainjob_manifest,
)

pytestmark = pytest.mark.timeout(120)

RBAC = REPO_ROOT / "deploy" / "rbac.yaml"
CASES: list[tuple[JobKind, Any, str, tuple[str, int], str]] = [
    (PYTORCHJOB, pytorch_manifest, "train", ("Master", 0), "pytorch"),
    (MPIJOB, mpi_manifest, "mpi", ("Launcher", 0), "mpi"),
    (JOBSET, ps_manifest, "ps", ("master", 0), "ps"),
    (TRAINJOB, trainjob_manifest, "tj", ("node", 0), "node"),
]


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


LAUNCHER_ROLE = "kubetrain-launcher"
PS_MASTER_ROLE = "kubetrain-ps-master"


def granted(name: str = LAUNCHER_ROLE) -> set[tuple[str, str, str]]:
    """Every (verb, group, resource) the Role `name` grants, expanded."""
    [role] = [d for d in documents() if d["kind"] == "Role" and d["metadata"]["name"] == name]
    return {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def exercise(env: Env, kind: JobKind, build: Any, name: str, primary: tuple[str, int], container: str) -> None:
    """Every API path of the launcher for one kind, against one stand-in server."""
    manifest = build()
    code, obj = env.api.create(kind, NS, copy.deepcopy(manifest), {"fieldValidation": "Strict"})
    assert code == 201, obj  # another launcher of this task created it: this one adopts it

    pod = make_pod(name, NS, kind=kind, replica_type=primary[0], index=primary[1], container=container)

    def script(api: FakeApiServer) -> None:
        if kind is TRAINJOB:
            # The Trainer lists the runtime's replicated jobs from its first status on; the launcher
            # follows no pod before the job has named its replicas.
            api.set_status(kind, NS, name, {"jobsStatus": [{"name": "node", "active": 0, "ready": 0, "succeeded": 0,
                                                            "failed": 0, "suspended": 0}]})  # fmt: skip
        api.put_pod(copy.deepcopy(pod))
        api.add_event(NS, "Pod", pod["metadata"]["name"], "FailedMount", "volume not ready")  # the pending pod's
        env.wait_line("FailedMount")  # pods and events were listed
        api.put_pod(make_pod(name, NS, kind=kind, replica_type=primary[0], index=primary[1], container=container,
                             phase="Running"))  # fmt: skip
        api.append_log(NS, pod["metadata"]["name"], container, "hello")
        env.wait_line("hello")
        # History compacted under the open watches (410 Gone): the job and its pods are listed afresh.
        api.cut_watches(expire=True)
        api.put_pod(make_pod(name, NS, kind=kind, replica_type=primary[0], index=primary[1], container=container,
                             phase="Succeeded"))  # fmt: skip
        done = {JOBSET: "Completed", TRAINJOB: "Complete"}.get(kind, "Succeeded")
        api.set_conditions(kind, NS, name, cond(done))

    env.launch(manifest, script, delete_after="always")
    # A second job of the kind that hits its deadline and is suspended.
    with pytest.raises(JobTimeoutError):
        env.launch(build(name=f"{name}2"), timeout=1.0, on_timeout="suspend")


def test_role_grants_exactly_the_calls_the_launcher_makes(tmp_path: Path) -> None:
    used: set[tuple[str, str, str]] = set()
    for kind, build, name, primary, container in CASES:
        with FakeApiServer(bookmark_seconds=0.1) as api:
            env = Env(api=api, kubeconfig=api.write_kubeconfig(tmp_path / f"kubeconfig-{kind.plural}", namespace=NS))
            exercise(env, kind, build, name, primary, container)
            used |= api.api_calls()
    role = granted()
    assert used - role == set(), f"the launcher makes calls the Role does not grant: {sorted(used - role)}"
    assert role - used == set(), f"the Role grants calls the launcher never makes: {sorted(role - used)}"


def test_bindings_cover_standalone_and_multi_user_kfp_and_the_own_account() -> None:
    docs = documents()
    assert {d["kind"] for d in docs} == {"ServiceAccount", "Role", "RoleBinding"}
    assert all("namespace" not in d["metadata"] for d in docs), "applied with -n, so one file serves any namespace"
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Role") == [LAUNCHER_ROLE, PS_MASTER_ROLE]
    subjects: dict[str, set[tuple[str, str]]] = {LAUNCHER_ROLE: set(), PS_MASTER_ROLE: set()}
    for binding in (d for d in docs if d["kind"] == "RoleBinding"):
        ref = binding["roleRef"]
        assert (ref["apiGroup"], ref["kind"]) == ("rbac.authorization.k8s.io", "Role")
        subjects[ref["name"]] |= {(s["kind"], s["name"]) for s in binding["subjects"]}
    assert subjects[LAUNCHER_ROLE] == {("ServiceAccount", "pipeline-runner"), ("ServiceAccount", "default-editor"),
                                       ("ServiceAccount", "kubetrain-launcher")}  # fmt: skip
    # The PS master's role is its own account's alone, never a step's (which would widen the steps').
    assert subjects[PS_MASTER_ROLE] == {("ServiceAccount", "kubetrain-ps-master")}


def test_the_ps_master_may_only_read_its_namespace_pods() -> None:
    assert granted(PS_MASTER_ROLE) == {("list", "", "pods"), ("watch", "", "pods")}
