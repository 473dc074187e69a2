"""The launcher's client side of the API's protocol under faults: strict validation, watch drops
and 410s, 5xx and 429 retries, and dry runs. Against the stand-in API server
(tests/fake_apiserver.py).
"""

from __future__ import annotations

from functools import partial

import pytest

from kubetrain.backends.kubernetes import RetryPolicy
from kubetrain.errors import (
    BackendError,
    ExitCode,
    ManifestError,
)
from kubetrain.manifests.kinds import PYTORCHJOB
from kubetrain.status import JobPhase
from tests.fake_apiserver import FakeApiServer
from tests.fake_apiserver_proto import Request
from tests.integration.k8s_launcher_env import NS, Env, cond, play_success, pytorch_manifest

pytestmark = pytest.mark.timeout(90)


def test_unknown_field_is_rejected_by_strict_validation_not_pruned(env: Env) -> None:
    manifest = pytorch_manifest(workers=0)
    manifest["spec"]["cleanPodPolicy"] = "All"  # the old launchers' misplaced field
    with pytest.raises(ManifestError, match=r'unknown field "spec\.cleanPodPolicy"') as info:
        env.launch(manifest)
    assert info.value.exit_code == ExitCode.INVALID_INPUT
    assert env.api.objects == {}


@pytest.mark.parametrize("gone_as_http", [False, True], ids=["410-event", "410-status"])
def test_watch_drop_resumes_from_resource_version_and_410_relists(env: Env, gone_as_http: bool) -> None:
    env.api.gone_as_http = gone_as_http

    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Created"))
        env.wait_line("→ Created")
        created_rv = api.objects[("pytorchjobs", NS, "train")]["metadata"]["resourceVersion"]
        watches = len(env.requests("watch", "pytorchjobs"))
        api.cut_watches()  # the connection drops mid-watch
        api.wait_until(lambda: len(env.requests("watch", "pytorchjobs")) > watches, "a reconnected watch")
        resumed = env.requests("watch", "pytorchjobs")[-1].query["resourceVersion"]
        assert int(resumed) >= int(created_rv), (resumed, created_rv)
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Created"), cond("Running"))
        env.wait_line("→ Running")
        lists = len(env.requests("list", "pytorchjobs"))
        api.cut_watches(expire=True)  # history compacted: resuming answers 410 Gone
        api.wait_until(lambda: len(env.requests("list", "pytorchjobs")) > lists, "a re-list after 410")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Succeeded", "PyTorchJobSucceeded"))

    result = env.launch(pytorch_manifest(workers=0), script)
    assert result.phase == JobPhase.SUCCEEDED
    watches = env.requests("watch", "pytorchjobs")
    assert all(w.query["allowWatchBookmarks"] in ("true", "True") for w in watches)
    assert all(1 <= int(w.query["timeoutSeconds"]) <= 5 for w in watches)
    text = "\n".join(env.lines)
    assert text.count("→ Running") == 1 and text.count("→ Succeeded") == 1


def test_5xx_429_and_dropped_connections_are_retried(env: Env) -> None:
    env.api.fail_next(3, 500)
    env.api.fail_next(2, 429, retry_after=0.05, message="throttled")
    env.api.fail_next(2, None)  # connection closed without an answer
    env.api.fail_next(2, 503, match=lambda r: r.verb == "watch")
    script = play_success(env, PYTORCHJOB, "train", [("Master", 0)], ["ok"])
    backend = env.backend(retry=RetryPolicy(attempts=10, initial_delay_seconds=0.01, max_delay_seconds=0.05))
    result = env.launch(pytorch_manifest(workers=0), script, backend=backend)
    assert result.phase == JobPhase.SUCCEEDED
    assert all(f.times == 0 for f in env.api.faults)
    assert len(env.requests("create", "pytorchjobs")) >= 1


def _has_verb(verb: str, request: Request) -> bool:
    return request.verb == verb


def test_a_throttled_launcher_waits_as_told_beyond_its_attempts(env: Env) -> None:
    """API Priority and Fairness answering 429 to every kind of request (create, watches, delete)
    ten times each is waited out, although the launcher gives up after 3 failures."""
    for verb in ("create", "watch", "delete"):
        env.api.fail_next(10, 429, retry_after=0.01, message="too many requests", match=partial(_has_verb, verb))
    script = play_success(env, PYTORCHJOB, "train", [("Master", 0)], ["ok"])
    backend = env.backend(retry=RetryPolicy(attempts=3, initial_delay_seconds=0.01, max_delay_seconds=0.02))
    result = env.launch(pytorch_manifest(workers=0), script, backend=backend)
    assert result.phase == JobPhase.SUCCEEDED
    assert all(f.times == 0 for f in env.api.faults), "every injected 429 was answered"
    assert ("pytorchjobs", NS, "train") not in env.api.objects, "the job was deleted in the end"


def test_a_5xx_storm_beyond_the_retry_limit_is_an_infrastructure_error(env: Env) -> None:
    env.api.fail_next(1000, 503, message="etcdserver: leader changed")
    backend = env.backend(retry=RetryPolicy(attempts=4, initial_delay_seconds=0.01, max_delay_seconds=0.02))
    with pytest.raises(BackendError, match=r"kept failing \(4 attempts\).*leader changed") as info:
        env.launch(pytorch_manifest(workers=0), backend=backend)
    assert info.value.exit_code == ExitCode.INFRASTRUCTURE
    assert len(env.api.requests) == 4


def test_dry_run_validates_strictly_and_creates_nothing(env: Env) -> None:
    backend = env.backend()
    try:
        obj = backend.dry_run(pytorch_manifest(workers=0))
        assert obj["metadata"]["name"] == "train" and obj["metadata"]["uid"]
        bad = pytorch_manifest(workers=0)
        bad["spec"]["runPolicy"]["activeDeadlineSecond"] = 60  # the TFJob launcher's misspelt key
        with pytest.raises(ManifestError, match=r'unknown field "spec\.runPolicy\.activeDeadlineSecond"'):
            backend.dry_run(bad)
    finally:
        backend.close()
    assert env.api.objects == {}
    assert all(r.query.get("dryRun") == "All" for r in env.requests("create", "pytorchjobs"))
