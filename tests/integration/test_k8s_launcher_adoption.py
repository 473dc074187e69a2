"""Whose job is it: a 409 on create adopts only this task's job (or replaces its failed one),
deletes touch only the job of their uid, and a job names the KFP step pod and launcher pod it
answers to. Against the stand-in API server (tests/fake_apiserver.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kubetrain.backends.kubernetes.backend import STEP_POD_NAME_ANNOTATION, STEP_POD_UID_ANNOTATION
from kubetrain.cli import main
from kubetrain.errors import (
    ExitCode,
    InvalidInputError,
    JobConflictError,
)
from kubetrain.manifests.kinds import PYTORCHJOB
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from kubetrain.status import JobPhase
from tests.fake_apiserver import FakeApiServer
from tests.integration.k8s_launcher_env import NS, RUN, TASK, Env, cond, foreground, play_success, pytorch_manifest

pytestmark = pytest.mark.timeout(90)


def _existing(env: Env, manifest: dict[str, Any], *conditions: tuple[str, str, str, str]) -> str:
    """Create `manifest` in the stand-in directly (another launcher did), with a status; its uid."""
    code, obj = env.api.create(PYTORCHJOB, NS, copy.deepcopy(manifest), {"fieldValidation": "Strict"})
    assert code == 201, obj
    if conditions:
        env.api.set_conditions(PYTORCHJOB, NS, manifest["metadata"]["name"], *conditions)
    return str(obj["metadata"]["uid"])


def test_409_with_this_tasks_labels_adopts_the_running_job(env: Env) -> None:
    uid = _existing(env, pytorch_manifest(workers=0), cond("Created"), cond("Running"))

    def script(api: FakeApiServer) -> None:
        env.wait_line("submitted → Running")  # the adopted job's state is reported as it is
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Succeeded", "PyTorchJobSucceeded"))

    result = env.launch(pytorch_manifest(workers=0), script)
    assert result.uid == uid
    assert result.phase == JobPhase.SUCCEEDED
    assert len(env.requests("create", "pytorchjobs")) == 1 + 0  # ours; the first was made directly
    assert env.requests("get", "pytorchjobs/status"), "adoption reads the existing job"


def test_409_of_a_failed_job_of_this_task_replaces_it(env: Env) -> None:
    """A KFP retry of a failed task derives the same name: it must run again, not re-read the failure."""
    old_uid = _existing(env, pytorch_manifest(workers=0), cond("Failed", "PyTorchJobFailed"))
    operator = play_success(env, PYTORCHJOB, "train", [("Master", 0)], ["second attempt"])

    def script(api: FakeApiServer) -> None:
        api.wait_until(lambda: bool(api.deletions), "the failed job's deletion")
        operator(api)

    result = env.launch(pytorch_manifest(workers=0), script)
    assert result.uid != old_uid
    assert env.api.deletions[0][:3] == ("pytorchjobs", NS, "train")


def test_a_failed_job_held_by_a_finalizer_is_watched_until_gone_then_replaced(env: Env) -> None:
    """The replacement waits for the old job's DELETED event on a watch, not on a timer of GETs."""
    held = pytorch_manifest(workers=0)
    held["metadata"]["finalizers"] = ["example.com/hold"]
    old_uid = _existing(env, held, cond("Failed", "PyTorchJobFailed"))
    operator = play_success(env, PYTORCHJOB, "train", [("Master", 0)], ["second attempt"])

    def script(api: FakeApiServer) -> None:
        api.wait_until(lambda: bool(api.deletions), "the failed job's deletion")
        with api.cv:
            seen = len(api.requests)
        # While the finalizer holds the job, the backend watches it (a poll would only GET it).
        api.wait_until(
            lambda: any(r.verb == "watch" and r.resource == "pytorchjobs" for r in api.requests[seen:]),
            "a watch of the job being deleted",
        )
        api.release_finalizers(PYTORCHJOB, NS, "train")
        operator(api)

    result = env.launch(pytorch_manifest(workers=0), script)
    assert result.uid != old_uid
    assert len(env.requests("get", "pytorchjobs/status")) <= 2  # the adoption's read, and at most one more


def test_409_of_someone_elses_job_fails_clearly_and_touches_nothing(env: Env) -> None:
    _existing(env, pytorch_manifest(workers=0, run="other-run", task="other-task"), cond("Running"))
    with pytest.raises(JobConflictError) as info:
        env.launch(pytorch_manifest(workers=0))
    message = str(info.value)
    assert "already exists and does not belong to this task" in message
    assert "'other-run'/'other-task'" in message and f"{RUN!r}/{TASK!r}" in message
    assert info.value.exit_code == ExitCode.INVALID_INPUT
    assert env.api.deletions == []


def _rendered(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """What `kubetrain render pytorchjob --name train --workers 0` prints, as a user pipes it to launch."""
    assert main(["render", "pytorchjob", "--name", "train", "--workers", "0", "--namespace", NS, "-o", "json"]) == 0
    manifest: dict[str, Any] = json.loads(capsys.readouterr().out)
    return manifest


def test_two_users_render_and_launch_the_same_name_neither_takes_the_others_job(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 33: `render | launch -f -` by two users; the second finds the first's job (POST 409,
    GET) and must neither adopt nor delete it: one line naming the job and what to do."""
    first = _rendered(capsys)
    uid = _existing(env, first, cond("Failed", "PyTorchJobFailed"))  # resubmit_failed would replace it
    with pytest.raises(JobConflictError) as info:
        env.launch(_rendered(capsys))
    message = str(info.value)
    assert "\n" not in message
    assert f"PyTorchJob {NS}/train already exists and does not belong to this task" in message
    assert "delete it or choose another name" in message
    assert env.api.deletions == []
    assert not [r for r in env.api.requests if r.verb in ("delete", "patch")]
    assert env.api.objects[("pytorchjobs", NS, "train")]["metadata"]["uid"] == uid


def test_a_delete_removes_only_the_job_of_its_uid(env: Env) -> None:
    """The job this launcher created was replaced by another of the same name: its delete (timeout,
    cancel, success) carries the uid, so the API server refuses it and the other job stays."""
    backend = env.backend()
    try:
        ref = backend.submit(pytorch_manifest(workers=0))
        assert ref.uid
        env.api.delete(PYTORCHJOB, NS, "train", {})
        other = _existing(env, pytorch_manifest(workers=0, run="other-run", task="other-task"), cond("Running"))
        backend.delete(ref)
    finally:
        backend.close()
    [delete] = env.requests("delete", "pytorchjobs")
    assert delete.body["preconditions"] == {"uid": ref.uid}
    assert env.api.objects[("pytorchjobs", NS, "train")]["metadata"]["uid"] == other


def test_replacing_a_failed_job_of_this_task_deletes_it_by_its_uid(env: Env) -> None:
    old_uid = _existing(env, pytorch_manifest(workers=0), cond("Failed", "PyTorchJobFailed"))
    backend = env.backend()
    try:
        ref = backend.submit(pytorch_manifest(workers=0))
    finally:
        backend.close()
    assert ref.uid != old_uid
    assert env.api.deletions[0] == ("pytorchjobs", NS, "train", foreground(old_uid))


def test_a_retried_step_records_its_own_pod_on_the_job_it_adopts(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """KFP retries a step: the new step pod adopts its task's job, which from then on answers to that
    pod (the reaper deletes the job when its step pod ends), through a patch that only that job takes."""
    manifest = pytorch_manifest(workers=0)
    manifest["metadata"]["annotations"] = {STEP_POD_NAME_ANNOTATION: "step-try-1", STEP_POD_UID_ANNOTATION: "uid-1"}
    uid = _existing(env, manifest, cond("Running"))
    monkeypatch.setenv("KFP_POD_NAME", "step-try-2")
    monkeypatch.setenv("KFP_POD_UID", "uid-2")
    backend = env.backend()
    try:
        ref = backend.submit(pytorch_manifest(workers=0))
    finally:
        backend.close()
    assert ref.uid == uid
    [patch] = env.requests("patch", "pytorchjobs")
    assert patch.body["metadata"]["uid"] == uid
    annotations = env.api.objects[("pytorchjobs", NS, "train")]["metadata"]["annotations"]
    assert (annotations[STEP_POD_NAME_ANNOTATION], annotations[STEP_POD_UID_ANNOTATION]) == ("step-try-2", "uid-2")


def test_a_job_submitted_from_a_kfp_step_names_its_step_pod(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFP_POD_NAME", "step-pod")
    monkeypatch.setenv("KFP_POD_UID", "step-uid")
    backend = env.backend()
    try:
        backend.submit(pytorch_manifest(workers=0))
    finally:
        backend.close()
    annotations = env.api.objects[("pytorchjobs", NS, "train")]["metadata"]["annotations"]
    assert (annotations[STEP_POD_NAME_ANNOTATION], annotations[STEP_POD_UID_ANNOTATION]) == ("step-pod", "step-uid")


def test_owner_reference_to_the_launcher_pod(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "pipeline-step-abc")
    monkeypatch.setenv("POD_UID", "1234-uid")
    monkeypatch.setenv("POD_NAMESPACE", NS)
    script = play_success(env, PYTORCHJOB, "train", [("Master", 0)], ["ok"])
    env.launch(pytorch_manifest(workers=0), script, backend=env.backend(owner_pod=True), delete_after="never")
    owner = env.api.objects[("pytorchjobs", NS, "train")]["metadata"]["ownerReferences"]
    assert owner == [{"apiVersion": "v1", "kind": "Pod", "name": "pipeline-step-abc", "uid": "1234-uid",
                      "controller": False, "blockOwnerDeletion": False}]  # fmt: skip
    labels = env.api.objects[("pytorchjobs", NS, "train")]["metadata"]["labels"]
    assert (labels[LABEL_RUN_ID], labels[LABEL_TASK_ID]) == (RUN, TASK)


def test_owner_reference_across_namespaces_is_refused(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes garbage-collects a job whose owner lives in another namespace: never create one."""
    for var, value in (("POD_NAME", "step"), ("POD_UID", "u"), ("POD_NAMESPACE", "kubeflow")):
        monkeypatch.setenv(var, value)
    with pytest.raises(InvalidInputError, match="cannot own a job in 'team-a'"):
        env.launch(pytorch_manifest(workers=0), backend=env.backend(owner_pod=True))
    assert env.requests("create", "pytorchjobs") == []
