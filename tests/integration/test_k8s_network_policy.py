"""A parameter-server JobSet gets its NetworkPolicy, owned by it (issue 48.2). Against the stand-in
API server (tests/fake_apiserver.py): what the launcher creates, not what a network plugin enforces.
"""

from __future__ import annotations

import copy
import logging

import pytest

from kubetrain.manifests.jobset import network_policy_for
from kubetrain.manifests.kinds import JOBSET, PYTORCHJOB
from kubetrain.status import JobPhase
from tests.fake_apiserver_http import NETWORK_POLICY
from tests.fake_apiserver_proto import Obj
from tests.integration.k8s_launcher_env import NS, Env, cond, play_success, ps_manifest, pytorch_manifest

pytestmark = pytest.mark.timeout(90)
COMPANIONS = "kubetrain.backends.kubernetes.companions"


def _policy(env: Env, name: str) -> Obj | None:
    with env.api.cv:
        return copy.deepcopy(env.api.objects.get((NETWORK_POLICY.plural, NS, name)))


def test_a_ps_jobset_gets_its_network_policy_owned_by_it(env: Env) -> None:
    manifest = ps_manifest()
    result = env.launch(manifest, play_success(env, JOBSET, "ps", [("master", 0)], ["hi"], container="ps"))
    assert result.phase == JobPhase.SUCCEEDED
    policy = _policy(env, "ps")
    assert policy is not None, "no NetworkPolicy was created beside the JobSet"
    meta = policy["metadata"]
    assert isinstance(meta, dict)
    # The garbage collector deletes it with the JobSet, and only with that one (its uid).
    uid = env.created_uid("ps")
    assert meta["ownerReferences"] == [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "ps", "uid": uid}
    ]
    assert policy["spec"] == network_policy_for(manifest)["spec"]
    assert meta["labels"] == manifest["metadata"]["labels"]
    assert [r.query.get("fieldValidation") for r in env.requests("create", "networkpolicies")] == ["Strict"]


def test_a_launcher_that_adopts_the_jobset_keeps_the_policy_there(env: Env) -> None:
    manifest = ps_manifest()
    code, obj = env.api.create(JOBSET, NS, copy.deepcopy(manifest), {"fieldValidation": "Strict"})
    assert code == 201, obj
    env.api.set_conditions(JOBSET, NS, "ps", cond("Completed", "AllJobsCompleted"))
    first = network_policy_for(manifest)
    code, made = env.api.create(NETWORK_POLICY, NS, copy.deepcopy(first), {"fieldValidation": "Strict"})
    assert code == 201, made
    result = env.launch(ps_manifest())
    assert result.phase == JobPhase.SUCCEEDED
    assert len(env.requests("create", "networkpolicies")) == 1  # answered 409: the earlier one stays
    policy = _policy(env, "ps")
    assert policy is not None and policy["metadata"]["uid"] == made["metadata"]["uid"]


def test_a_launcher_not_allowed_to_create_it_runs_the_job_and_says_so(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=COMPANIONS)
    env.api.fail_next(1, 403, match=lambda r: r.resource == "networkpolicies", message="forbidden")
    result = env.launch(ps_manifest(), play_success(env, JOBSET, "ps", [("master", 0)], ["hi"], container="ps"))
    assert result.phase == JobPhase.SUCCEEDED
    assert _policy(env, "ps") is None
    [warning] = [r.getMessage() for r in caplog.records if r.name == COMPANIONS]
    assert warning.startswith(f"create NetworkPolicy {NS}/ps: ")
    assert "the job runs without it (its servers still need the job's token)" in warning
    assert "networkpolicies (deploy/rbac.yaml)" in warning


def test_other_jobs_get_none(env: Env) -> None:
    result = env.launch(pytorch_manifest(workers=0), play_success(env, PYTORCHJOB, "train", [("Master", 0)], ["hi"]))
    assert result.phase == JobPhase.SUCCEEDED
    assert env.requests("create", "networkpolicies") == []
