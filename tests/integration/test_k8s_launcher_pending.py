"""Jobs that do not run: timeouts (delete or suspend), pods that never start and why
(ImagePullBackOff, Unschedulable), the events asked about them, and operator rejections.
Against the stand-in API server (tests/fake_apiserver.py).
"""

from __future__ import annotations

import dataclasses

import pytest

from kubetrain.errors import (
    ExitCode,
    JobFailedError,
    JobTimeoutError,
)
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB
from tests.fake_apiserver import FakeApiServer, make_pod
from tests.integration.k8s_launcher_env import (
    FAST,
    NS,
    Env,
    cond,
    foreground,
    mpi_manifest,
    ps_manifest,
    pytorch_manifest,
)

pytestmark = pytest.mark.timeout(90)


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
    assert patch.body == {"spec": {"runPolicy": {"suspend": True}}, "metadata": {"uid": env.created_uid("train")}}
    assert env.api.objects[("pytorchjobs", NS, "train")]["spec"]["runPolicy"]["suspend"] is True
    assert env.api.deletions == []


def test_a_timeout_suspends_only_its_own_job_not_one_that_took_its_name(env: Env) -> None:
    """Issue 48.12: the suspend patch had no uid precondition, so it suspended another user's job that
    had replaced the launcher's (same name, new uid) while the launcher waited."""
    key = ("pytorchjobs", NS, "train")

    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        with api.cv:  # someone's job now holds the name (no event: the launcher cannot tell)
            api.objects[key]["metadata"]["uid"] = "someone-elses-job"

    with pytest.raises(JobTimeoutError):
        env.launch(pytorch_manifest(workers=0), script, timeout=1.0, on_timeout="suspend")
    [patch] = env.requests("patch", "pytorchjobs")
    assert patch.body["metadata"] == {"uid": env.created_uid("train")}
    assert "suspend" not in env.api.objects[key]["spec"].get("runPolicy", {})
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
    assert timed_out.value.exit_code == ExitCode.TIMEOUT and int(ExitCode.TIMEOUT) == 3
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


QUOTA_MESSAGE = (
    'Error creating: pods "ps-master-0-0-abcde" is forbidden: exceeded quota: kf-resource-quota, '
    "requested: requests.cpu={asked}, used: requests.cpu=1, limited: requests.cpu=2"
)


def test_pods_the_quota_can_never_hold_fail_the_step_at_once_not_at_the_start_timeout(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(JOBSET, NS, "ps")
        # JobSet's child Job, not the set, is what the Job controller's refusal is about.
        api.add_event(NS, "Job", "ps-master-0", "FailedCreate", QUOTA_MESSAGE.format(asked=4))

    tuning = dataclasses.replace(FAST, watch_window_seconds=3600.0)
    with pytest.raises(JobFailedError, match="ResourceQuota kf-resource-quota in team-a") as info:
        env.launch(ps_manifest(), script, timeout=300, start_timeout=300, tuning=tuning)
    assert info.value.reason == "PodsRefused"
    assert "requested requests.cpu=4, used 1 of 2" in str(info.value)
    assert len(env.requests("watch", "jobsets")) == 1, "the look ended the open watch; no timeout did"


def test_pods_that_fit_once_others_finish_wait_and_the_step_says_so_once(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(JOBSET, NS, "ps")
        api.add_event(NS, "Job", "ps-master-0", "FailedCreate", QUOTA_MESSAGE.format(asked=2))
        api.add_event(NS, "Job", "someone-else-master-0", "FailedCreate", QUOTA_MESSAGE.format(asked=9))
        env.wait_line("waiting for ResourceQuota kf-resource-quota in team-a")
        api.add_event(NS, "Job", "ps-master-0", "FailedCreate", QUOTA_MESSAGE.format(asked=2))  # again, later
        api.set_conditions(JOBSET, NS, "ps", cond("Completed"))

    env.launch(ps_manifest(), script, timeout=60)
    waiting = [line for line in env.lines if line.startswith("waiting for ResourceQuota")]
    assert waiting == [
        "waiting for ResourceQuota kf-resource-quota in team-a: requested requests.cpu=2, used 1 of 2; the pods "
        "are created when other work in the namespace releases its share"
    ]
    assert not any("someone-else" in line for line in env.lines), "another job's refusal is not this one's"
