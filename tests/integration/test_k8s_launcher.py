"""The launcher and the Kubernetes backend against a stand-in for the API server: a job's run to
its end, its progress lines and logs, and what a failure reports.

These tests use tests/fake_apiserver.py, an in-process HTTP stand-in that serves the real REST
paths and the watch protocol to the official `kubernetes` client. It is NOT a cluster: no
operator, no kubelet, no scheduler. The operator's part (conditions, pods, logs, events) is
played by the scripts in tests/integration/k8s_launcher_env.py and the tests. What they prove is
the launcher's and the client's side of the protocol; the other test_k8s_launcher_*.py cover
adoption, API faults and pending jobs.
"""

from __future__ import annotations

import threading

import pytest

from kubetrain.errors import (
    ExitCode,
    JobFailedError,
)
from kubetrain.launcher import AwaitOptions, Tuning, run_job
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB
from kubetrain.status import JobPhase
from tests.fake_apiserver import FakeApiServer, make_pod
from tests.integration.k8s_launcher_env import (
    FAST,
    NS,
    Env,
    cond,
    foreground,
    mpi_manifest,
    play_success,
    ps_manifest,
    pytorch_manifest,
)

pytestmark = pytest.mark.timeout(90)


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
