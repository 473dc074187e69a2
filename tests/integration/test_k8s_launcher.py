"""The launcher and the Kubernetes backend against a stand-in for the API server.

These tests use tests/fake_apiserver.py, an in-process HTTP stand-in that serves the real REST
paths and the watch protocol to the official `kubernetes` client. It is NOT a cluster: no
operator, no kubelet, no scheduler. The operator's part (conditions, pods, logs, events) is
played by the scripts below. What they prove is the launcher's and the client's side of the
protocol: strict create, adoption, watch resumption, retries, cleanup and reporting.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.kubernetes import KubernetesBackend, RetryPolicy
from kubetrain.backends.kubernetes.backend import STEP_POD_NAME_ANNOTATION, STEP_POD_UID_ANNOTATION
from kubetrain.cli import main
from kubetrain.errors import (
    BackendError,
    ExitCode,
    InvalidInputError,
    JobConflictError,
    JobFailedError,
    JobTimeoutError,
    ManifestError,
)
from kubetrain.launcher import AwaitOptions, DeleteAfter, OnTimeout, Tuning, run_job
from kubetrain.manifests import build_mpijob, build_ps_jobset, build_pytorchjob, build_trainjob
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB, JobKind
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from kubetrain.specs import MPIJobSpec, PSJobSpec, PyTorchJobSpec, TrainJobSpec
from kubetrain.specs.common import ReplicaSpec
from kubetrain.specs.jobs import JobMeta
from kubetrain.status import JobPhase, JobResult
from tests.fake_apiserver import FakeApiServer, Request, make_pod

pytestmark = pytest.mark.timeout(90)

NS = "team-a"
RUN, TASK = "run-7f3a", "task-91c2"
IMAGE = "example.com/train:1"
FAST = Tuning(pending_poll_seconds=0.2, watch_window_seconds=3.0, log_drain_seconds=5.0, log_tail_lines=5)


def meta(name: str, run: str = RUN, task: str = TASK) -> JobMeta:
    return JobMeta(name=name, namespace=NS, kfp_run_id=run, kfp_task_id=task)


def pytorch_manifest(name: str = "train", workers: int = 1, **kw: str) -> dict[str, Any]:
    worker = ReplicaSpec(image=IMAGE, replicas=workers) if workers else None
    return build_pytorchjob(PyTorchJobSpec(meta=meta(name, **kw), master=ReplicaSpec(image=IMAGE), worker=worker))


def mpi_manifest(name: str = "mpi") -> dict[str, Any]:
    return build_mpijob(
        MPIJobSpec(meta=meta(name), launcher=ReplicaSpec(image=IMAGE), worker=ReplicaSpec(image=IMAGE, replicas=2))
    )


def ps_manifest(name: str = "ps") -> dict[str, Any]:
    return build_ps_jobset(
        PSJobSpec(
            meta=meta(name),
            master=ReplicaSpec(image=IMAGE),
            ps=ReplicaSpec(image=IMAGE, replicas=2),
            worker=ReplicaSpec(image=IMAGE, replicas=2),
        )
    )


def trainjob_manifest(name: str = "tj") -> dict[str, Any]:
    return build_trainjob(TrainJobSpec(meta=meta(name), runtime="torch-distributed", trainer=ReplicaSpec(image=IMAGE)))


def foreground(uid: str) -> dict[str, Any]:
    """The options of the launcher's delete: foreground, and only the job of this uid."""
    return {"propagationPolicy": "Foreground", "preconditions": {"uid": uid}}


def cond(ctype: str, reason: str = "", message: str = "", status: str = "True") -> tuple[str, str, str, str]:
    return (ctype, status, reason, message)


@dataclass
class Env:
    """One stand-in API server, a kubeconfig pointing at it, and the launcher's output."""

    api: FakeApiServer
    kubeconfig: Path
    lines: list[str] = field(default_factory=list)

    def sink(self, line: str) -> None:
        with self.api.cv:
            self.lines.append(line)
            self.api.cv.notify_all()

    def wait_line(self, text: str) -> None:
        self.api.wait_until(lambda: any(text in line for line in self.lines), f"a launcher line with {text!r}")

    def backend(self, **kw: Any) -> KubernetesBackend:
        retry = kw.pop("retry", RetryPolicy(attempts=6, initial_delay_seconds=0.01, max_delay_seconds=0.05))
        return KubernetesBackend(kubeconfig=str(self.kubeconfig), retry=retry, server_watch_seconds=5, **kw)

    def launch(
        self,
        manifest: dict[str, Any],
        script: Callable[[FakeApiServer], None] | None = None,
        *,
        timeout: float = 30.0,
        delete_after: DeleteAfter = "success",
        on_timeout: OnTimeout = "delete",
        backend: KubernetesBackend | None = None,
        tuning: Tuning = FAST,
        start_timeout: float | None = None,
    ) -> JobResult:
        """run_job in this thread while `script` plays the operator; the script's errors surface too."""
        errors: list[BaseException] = []

        def play() -> None:
            try:
                if script is not None:
                    script(self.api)
            except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
                errors.append(e)

        player = threading.Thread(target=play, daemon=True)
        player.start()
        be = backend or self.backend()
        try:
            options = AwaitOptions(
                timeout_seconds=timeout,
                delete_after=delete_after,
                on_timeout=on_timeout,
                tuning=tuning,
                start_timeout_seconds=start_timeout,
            )
            return run_job(manifest, backend=be, options=options, log_sink=self.sink)
        finally:
            be.close()
            player.join(20)
            if errors:
                raise errors[0]

    def created_uid(self, name: str) -> str:
        """The uid of the job `name` the launcher's create made (from the ADDED event it caused)."""
        with self.api.cv:
            return next(
                str(obj["metadata"]["uid"])
                for _, etype, key, obj in self.api.history
                if etype == "ADDED" and key[2] == name and key[0] != "pods"
            )

    def requests(self, verb: str, resource: str) -> list[Request]:
        with self.api.cv:
            return [r for r in self.api.requests if r.verb == verb and r.resource == resource]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with FakeApiServer(bookmark_seconds=0.1) as api:
        yield Env(api=api, kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS))


def play_success(env: Env, kind: JobKind, name: str, replicas: list[tuple[str, int]], log: list[str],
                 container: str = "pytorch") -> Callable[[FakeApiServer], None]:  # fmt: skip
    """Pods Pending → Running → Succeeded, conditions Created → Running → Succeeded, a log on rank 0."""

    def script(api: FakeApiServer) -> None:
        api.wait_job(kind, NS, name)
        pods = [make_pod(name, NS, kind=kind, replica_type=t, index=i, container=container) for t, i in replicas]
        for pod in pods:
            api.put_pod(pod)
        api.set_conditions(kind, NS, name, cond("Created", f"{kind.kind}Created"))
        # Pods and the job come through two watches: each line says only what its own watch saw.
        env.wait_line("Pending (ContainerCreating)")
        env.wait_line("→ Created")
        for t, i in replicas:
            api.put_pod(make_pod(name, NS, kind=kind, replica_type=t, index=i, phase="Running", container=container))
        api.set_conditions(kind, NS, name, cond("Created"), cond("Running", f"{kind.kind}Running"),
                           startTime="2025-03-01T10:00:00Z")  # fmt: skip
        primary = pods[0]["metadata"]["name"]
        api.append_log(NS, primary, container, *log)
        env.wait_line(log[-1])
        for t, i in replicas:
            api.put_pod(make_pod(name, NS, kind=kind, replica_type=t, index=i, phase="Succeeded", container=container))
        done = "Completed" if kind is JOBSET else "Succeeded"
        api.set_conditions(kind, NS, name, cond("Created"), cond("Running", status="False"), cond(done, "AllDone"),
                           startTime="2025-03-01T10:00:00Z", completionTime="2025-03-01T10:05:00Z")  # fmt: skip

    return script


def test_a_followed_log_the_server_never_ends_is_read_to_its_end_when_the_pod_ends(env: Env) -> None:
    """kwok keeps a followed log open after the container ended. The rest is read as soon as the
    pod stream says the pod ended, not once the job has (under a busy operator, minutes later):
    the read is then off the path from the job's end to the launcher's return."""
    env.api.log_streams_outlive_pods = True

    def rest_read() -> bool:
        return any(r.query.get("follow") not in ("true", "True") for r in env.requests("get", "pods/log"))

    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running"))
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Running", "PyTorchJobRunning"))
        api.append_log(NS, "train-master-0", "pytorch", "epoch 1", "done")
        env.wait_line("[train-master-0] done")
        assert not rest_read()
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Succeeded"))
        api.wait_until(rest_read, "the rest of the log read without following, the job still running")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Succeeded", "PyTorchJobSucceeded"))

    result = env.launch(pytorch_manifest(workers=0), script)
    assert result.phase == JobPhase.SUCCEEDED
    assert [line for line in env.lines if line.startswith("[train-master-0] ")] == [
        "[train-master-0] epoch 1",
        "[train-master-0] done",
    ]


def test_a_followed_log_the_server_never_ends_does_not_hold_the_launcher(env: Env) -> None:
    """kwok's kubelet keeps a followed log open after the container ended: the launcher reads the rest and returns.

    The drain bound is set far beyond this test's timeout: waiting for the server to end the stream
    would fail the test; reading what is left without following returns at once.
    """
    env.api.log_streams_outlive_pods = True
    lines = [f"step {i}" for i in range(5)]
    script = play_success(env, PYTORCHJOB, "quiet", [("Master", 0)], lines)
    be = env.backend()
    player = threading.Thread(target=script, args=(env.api,), daemon=True)
    player.start()
    try:
        tuning = Tuning(pending_poll_seconds=0.2, watch_window_seconds=3.0, log_drain_seconds=3600.0)
        result = run_job(pytorch_manifest("quiet", workers=0), backend=be,
                         options=AwaitOptions(timeout_seconds=60, tuning=tuning), log_sink=env.sink)  # fmt: skip
    finally:
        be.close()
        player.join(20)
    assert result.phase == JobPhase.SUCCEEDED
    printed = [line for line in env.lines if line.startswith("[quiet-master-0] ")]
    assert printed == [f"[quiet-master-0] {line}" for line in lines], printed


def test_success_strict_create_progress_logs_and_foreground_delete(env: Env) -> None:
    script = play_success(env, PYTORCHJOB, "train", [("Master", 0), ("Worker", 0)], ["epoch 1 loss=0.9", "done"])
    result = env.launch(pytorch_manifest(), script)
    assert (result.phase, result.name, result.namespace, result.kind) == (JobPhase.SUCCEEDED, "train", NS, "PyTorchJob")
    assert result.duration_seconds == 300.0
    assert result.backend == "kubernetes"
    [create] = env.requests("create", "pytorchjobs")
    assert create.query["fieldValidation"] == "Strict"
    text = "\n".join(env.lines)
    for expected in (
        "PyTorchJob team-a/train: submitted → Pending",
        "Pending → Created (PyTorchJobCreated)",
        "Created → Running (PyTorchJobRunning)",
        "Running → Succeeded (AllDone)",
        "pod train-master-0 [Master 0]: Pending (ContainerCreating)",
        "pod train-master-0 [Master 0]: Pending → Running after",
        "following the log of pod train-master-0 [Master 0], container pytorch",
        "[train-master-0] epoch 1 loss=0.9",
    ):
        assert expected in text, (expected, text)
    logs = env.requests("get", "pods/log")
    assert logs and all(r.query["container"] == "pytorch" for r in logs)
    assert env.api.deletions == [("pytorchjobs", NS, "train", foreground(result.uid))]
    # The watches of a job it created begin at the create's resourceVersion: nothing to list first.
    assert not env.requests("list", "pytorchjobs")
    assert next(r for r in env.api.requests if r.resource == "pods").verb == "watch"
    first_job_watch, first_pod_watch = env.requests("watch", "pytorchjobs")[0], env.requests("watch", "pods")[0]
    assert first_job_watch.query["resourceVersion"] == first_pod_watch.query["resourceVersion"] != ""
    assert ("pytorchjobs", NS, "train") not in env.api.objects


def test_failure_reports_reason_and_log_tails_read_before_delete(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running"))
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker", index=0, phase="Running"))
        api.append_log(NS, "train-worker-0", "pytorch", *[f"step {i}" for i in range(20)], "RuntimeError: NaN loss")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker", index=0, phase="Failed", exit_code=3))
        api.set_conditions(PYTORCHJOB, NS, "train",
                           cond("Failed", "PyTorchJobFailed", "PyTorchJob train is failed because 1 Worker replica(s) "
                                "failed."))  # fmt: skip

    with pytest.raises(JobFailedError) as info:
        env.launch(pytorch_manifest(), script, delete_after="always")
    err = info.value
    assert err.exit_code == ExitCode.JOB_FAILED
    assert err.reason == "PyTorchJobFailed"
    assert "1 Worker replica(s) failed" in str(err)
    assert err.log_tails["train-worker-0/pytorch"].splitlines() == [
        "step 16", "step 17", "step 18", "step 19", "RuntimeError: NaN loss"
    ]  # fmt: skip
    tail_read = next(i for i, r in enumerate(env.api.requests)
                     if r.resource == "pods/log" and r.query.get("tailLines") == "5")  # fmt: skip
    delete = next(i for i, r in enumerate(env.api.requests) if r.verb == "delete")
    assert tail_read < delete


def test_failed_job_is_kept_by_default(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Failed", exit_code=137))
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Failed", "PyTorchJobFailed", "master OOMKilled"))

    with pytest.raises(JobFailedError, match="kept for debugging"):
        env.launch(pytorch_manifest(workers=0), script)
    assert env.api.deletions == []
    assert ("pytorchjobs", NS, "train") in env.api.objects


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


def test_a_throttled_launcher_waits_as_told_beyond_its_attempts(env: Env) -> None:
    """API Priority and Fairness answering 429 to every kind of request (create, watches, delete)
    ten times each is waited out, although the launcher gives up after 3 failures."""
    for verb in ("create", "watch", "delete"):
        env.api.fail_next(10, 429, retry_after=0.01, message="too many requests", match=lambda r, v=verb: r.verb == v)
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


def test_timeout_deletes_the_job(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Running"))

    with pytest.raises(JobTimeoutError, match=r"did not finish within 1\.5s .*deleted it") as info:
        env.launch(pytorch_manifest(workers=0), script, timeout=1.5)
    assert info.value.exit_code == ExitCode.TIMEOUT
    assert env.api.deletions == [("pytorchjobs", NS, "train", foreground(env.created_uid("train")))]


def test_timeout_can_suspend_instead_of_delete(env: Env) -> None:
    with pytest.raises(JobTimeoutError, match="suspended it"):
        env.launch(pytorch_manifest(workers=0), timeout=1.0, on_timeout="suspend")
    [patch] = env.requests("patch", "pytorchjobs")
    assert patch.body == {"spec": {"runPolicy": {"suspend": True}}}
    assert env.api.objects[("pytorchjobs", NS, "train")]["spec"]["runPolicy"]["suspend"] is True
    assert env.api.deletions == []


def test_image_pull_backoff_and_unschedulable_are_reported(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", waiting="ImagePullBackOff",
                             waiting_message='Back-off pulling image "example.com/train:1"'))  # fmt: skip
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker",
                             unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu."))  # fmt: skip
        api.add_event(NS, "Pod", "train-worker-0", "FailedScheduling", "0/3 nodes are available")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Created"))
        env.wait_line("ImagePullBackOff")
        env.wait_line("Unschedulable")
        env.wait_line("FailedScheduling")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Failed", "PyTorchJobFailed", "gave up"))

    with pytest.raises(JobFailedError):
        env.launch(pytorch_manifest(), script)
    text = "\n".join(env.lines)
    assert (
        'pod train-master-0 [Master 0]: Pending (ImagePullBackOff): Back-off pulling image "example.com/train:1"'
        in text
    )
    assert "pod train-worker-0 [Worker 0]: Pending (Unschedulable): 0/3 nodes are available" in text
    assert ", pending " in text
    assert "event on Pod/train-worker-0: FailedScheduling: 0/3 nodes are available" in text


def test_a_job_whose_pods_never_start_is_deleted_at_the_start_timeout_naming_why(env: Env) -> None:
    """What a training step's start_timeout_seconds does: a mistyped image (ErrImagePull) and a pod
    no node can take (Unschedulable) end the job at the start timeout, not at the overall timeout,
    with the reasons and the scheduler's message in the error; exit code 3."""

    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", waiting="ErrImagePull",
                             waiting_message='failed to pull image "example.com/tarin:1": not found'))  # fmt: skip
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker",
                             unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu."))  # fmt: skip
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Created", "PyTorchJobCreated"))

    with pytest.raises(JobTimeoutError) as timed_out:
        env.launch(pytorch_manifest(), script, timeout=3600, start_timeout=2)
    message = str(timed_out.value)
    assert message.startswith("PyTorchJob team-a/train did not start within 2s (phase Created; pods: ")
    assert 'train-master-0: ErrImagePull (failed to pull image "example.com/tarin:1": not found)' in message
    assert "train-worker-0: Unschedulable (0/3 nodes are available: 3 Insufficient nvidia.com/gpu.)" in message
    assert message.endswith("; deleted it")
    assert timed_out.value.exit_code == ExitCode.TIMEOUT == 3
    assert env.api.deletions == [("pytorchjobs", NS, "train", foreground(env.created_uid("train")))]


def test_events_are_asked_of_the_job_and_its_pending_pods_never_of_the_whole_namespace(env: Env) -> None:
    """The API server filters a namespace's events for every listing: a thousand launchers each
    listing every Warning of the namespace would cost it the square of the jobs."""

    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master"))
        api.add_event(NS, "Pod", "train-master-0", "FailedMount", "volume not ready")
        api.add_event(NS, "Pod", "other-job-master-0", "FailedMount", "someone else's volume")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Created"))
        env.wait_line("FailedMount")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Failed", "PyTorchJobFailed", "gave up"))

    with pytest.raises(JobFailedError):
        env.launch(pytorch_manifest(workers=0), script)
    selectors = {r.query.get("fieldSelector", "") for r in env.requests("list", "events")}
    assert selectors <= {"involvedObject.name=train", "involvedObject.name=train-master-0,type=Warning"}, selectors
    assert "event on Pod/train-master-0: FailedMount: volume not ready" in env.lines
    assert not any("someone else's" in line for line in env.lines)


def test_mpijob_rejected_by_the_operator_fails_with_the_validation_event(env: Env) -> None:
    message = "Invalid MPIJob: spec.mpiReplicaSpecs[Launcher].replicas: Invalid value: 2: must be 1"

    def script(api: FakeApiServer) -> None:
        api.wait_job(MPIJOB, NS, "mpi")
        api.add_event(NS, "MPIJob", "mpi", "ValidationError", message)

    # A job-watch window of an hour: the look at the events, in its own thread, ends the open HTTP
    # watch (without that the launch's 300 s timeout would end it, as a JobTimeoutError).
    tuning = dataclasses.replace(FAST, watch_window_seconds=3600.0)
    with pytest.raises(JobFailedError, match="must be 1") as info:
        env.launch(mpi_manifest(), script, timeout=300, tuning=tuning)
    assert info.value.reason == "ValidationError"
    assert env.requests("list", "events")
    assert len(env.requests("watch", "mpijobs")) == 1


def test_mpijob_success_follows_the_launcher_pod(env: Env) -> None:
    script = play_success(env, MPIJOB, "mpi", [("Launcher", 0), ("Worker", 0), ("Worker", 1)],
                          ["mpirun: 3 ranks", "accuracy 0.97"], container="mpi")  # fmt: skip
    result = env.launch(mpi_manifest(), script)
    assert result.phase == JobPhase.SUCCEEDED
    assert "[mpi-launcher-0] accuracy 0.97" in env.lines
    assert env.requests("watch", "pods")[0].query["labelSelector"] == "training.kubeflow.org/job-name=mpi"


def test_jobset_success_follows_the_master_pod(env: Env) -> None:
    script = play_success(env, JOBSET, "ps", [("master", 0), ("ps", 0), ("worker", 0)], ["tasks done: 40"],
                          container="ps")  # fmt: skip
    result = env.launch(ps_manifest(), script)
    assert result.phase == JobPhase.SUCCEEDED
    assert "[ps-master-0-0-abcde] tasks done: 40" in env.lines
    assert env.requests("watch", "pods")[0].query["labelSelector"] == "jobset.sigs.k8s.io/jobset-name=ps"
    assert env.api.deletions[0][:3] == ("jobsets", NS, "ps")


def test_crashed_container_log_is_read_from_the_previous_instance(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running", sidecar=True))
        api.append_log(NS, "train-master-0", "pytorch", "Killed: out of memory", restart=0)
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running", restarts=1,
                             last_exit_code=137, sidecar=True))  # fmt: skip
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Restarting", "PyTorchJobRestarting"))
        env.wait_line("Killed: out of memory")
        api.append_log(NS, "train-master-0", "pytorch", "resumed from checkpoint")
        env.wait_line("resumed from checkpoint")
        # The log lines come from the follower thread; the status line from the watch. Wait for both
        # before ending the job, or a fast follower lets Succeeded overtake Restarting.
        env.wait_line("Restarting (PyTorchJobRestarting)")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Succeeded", restarts=1,
                             sidecar=True))  # fmt: skip
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Succeeded"))

    env.launch(pytorch_manifest(workers=0), script)
    assert "[train-master-0 (previous)] Killed: out of memory" in env.lines
    assert "[train-master-0] resumed from checkpoint" in env.lines
    assert any(line.endswith("Restarting (PyTorchJobRestarting)") for line in env.lines)
    assert all(r.query.get("container") == "pytorch" for r in env.requests("get", "pods/log"))


def test_a_followed_stream_the_server_keeps_open_across_a_restart_is_left_for_the_new_container(env: Env) -> None:
    """A followed log the server does not end when its container restarts (kwok never ends one;
    a follow asked for just after a restart reads the new container while the launcher takes it
    for the old one): when the pod stream says the followed container restarted, the launcher
    leaves that stream and follows the new container."""

    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running"))
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Running", "PyTorchJobRunning"))
        api.append_log(NS, "train-master-0", "pytorch", "epoch 1")
        env.wait_line("[train-master-0] epoch 1")
        api.log_streams_outlive_pods = True  # the open stream no longer ends with its container
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running", restarts=1,
                             last_exit_code=137))  # fmt: skip
        api.append_log(NS, "train-master-0", "pytorch", "resumed from checkpoint")
        env.wait_line("[train-master-0] resumed from checkpoint")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Succeeded", restarts=1))
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Succeeded"))

    assert env.launch(pytorch_manifest(workers=0), script).phase == JobPhase.SUCCEEDED


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


def test_every_status_reaches_the_callback_and_the_log_hint_names_the_container(env: Env) -> None:
    seen: list[JobPhase] = []
    script = play_success(env, PYTORCHJOB, "train", [("Master", 0)], ["ok"])
    errors: list[BaseException] = []

    def play() -> None:
        try:
            script(env.api)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    player = threading.Thread(target=play, daemon=True)
    player.start()
    backend = env.backend()
    try:
        run_job(pytorch_manifest(workers=0), backend=backend, options=AwaitOptions(timeout_seconds=30, tuning=FAST),
                log_sink=env.sink, on_status=lambda s: seen.append(s.phase))  # fmt: skip
    finally:
        backend.close()
        player.join(20)
    assert not errors
    assert seen[-1] == JobPhase.SUCCEEDED
    assert JobPhase.RUNNING in seen
    assert any(f"(kubectl -n {NS} logs -f train-master-0 -c pytorch)" in line for line in env.lines)


def test_owner_reference_across_namespaces_is_refused(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes garbage-collects a job whose owner lives in another namespace: never create one."""
    for var, value in (("POD_NAME", "step"), ("POD_UID", "u"), ("POD_NAMESPACE", "kubeflow")):
        monkeypatch.setenv(var, value)
    with pytest.raises(InvalidInputError, match="cannot own a job in 'team-a'"):
        env.launch(pytorch_manifest(workers=0), backend=env.backend(owner_pod=True))
    assert env.requests("create", "pytorchjobs") == []
