"""The shared status parser: only conditions with status "True" count, for every kind."""

from __future__ import annotations

from typing import Any

from kubetrain.status import JobPhase, parse_job_status


def _obj(kind: str, api: str, status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "j"}, "status": status}


def _cond(ctype: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip


def test_last_condition_false_does_not_mean_finished() -> None:
    # The old launchers read conditions[-1]: a False "Succeeded" would have been a success.
    status = {"conditions": [_cond("Created"), _cond("Running"), _cond("Succeeded", "False")]}
    assert parse_job_status(_obj("PyTorchJob", "kubeflow.org/v1", status)).phase is JobPhase.RUNNING


def test_failed_wins_and_carries_reason_and_message() -> None:
    status = {
        "conditions": [
            _cond("Running", "False"),
            _cond("Failed", reason="PyTorchJobFailed", message="master exited 1"),
        ],
        "replicaStatuses": {"Master": {"failed": 1}, "Worker": {"active": 2}},
        "startTime": "2026-01-01T00:00:00Z",
    }
    parsed = parse_job_status(_obj("PyTorchJob", "kubeflow.org/v1", status))
    assert parsed.phase is JobPhase.FAILED and parsed.phase.terminal
    assert (parsed.reason, parsed.message) == ("PyTorchJobFailed", "master exited 1")
    assert parsed.replicas["Master"].failed == 1 and parsed.replicas["Worker"].active == 2
    assert parsed.start_time is not None


def test_restarting_and_suspended_are_reported() -> None:
    restarting = {"conditions": [_cond("Created"), _cond("Running", "False"), _cond("Restarting")]}
    assert parse_job_status(_obj("MPIJob", "kubeflow.org/v2beta1", restarting)).phase is JobPhase.RESTARTING
    suspended = {"conditions": [_cond("Created"), _cond("Suspended")]}
    assert parse_job_status(_obj("PyTorchJob", "kubeflow.org/v1", suspended)).phase is JobPhase.SUSPENDED


def test_no_status_is_pending() -> None:
    assert parse_job_status(_obj("PyTorchJob", "kubeflow.org/v1", {})).phase is JobPhase.PENDING


def test_jobset_completed_failed_and_running() -> None:
    api = "jobset.x-k8s.io/v1alpha2"
    done = parse_job_status(_obj("JobSet", api, {"conditions": [_cond("Completed", reason="AllJobsCompleted")]}))
    assert done.phase is JobPhase.SUCCEEDED and done.completion_time is not None
    failed = parse_job_status(_obj("JobSet", api, {"conditions": [_cond("Failed", reason="ReachedMaxRestarts")],
                                                   "restarts": 3}))  # fmt: skip
    assert failed.phase is JobPhase.FAILED and failed.restarts == 3
    running = parse_job_status(
        _obj("JobSet", api, {"replicatedJobsStatus": [{"name": "master", "ready": 1, "active": 1}]})
    )
    assert running.phase is JobPhase.RUNNING and running.replicas["master"].ready == 1


def test_jobset_duration_runs_from_its_creation() -> None:
    """A JobSet has no startTime and only its terminal condition: its duration used to be 0.0 s."""
    obj = _obj("JobSet", "jobset.x-k8s.io/v1alpha2", {"conditions": [_cond("Completed", reason="AllJobsCompleted")]})
    obj["metadata"]["creationTimestamp"] = "2025-12-31T23:58:30Z"
    status = parse_job_status(obj)
    assert status.start_time is not None and status.completion_time is not None
    assert (status.completion_time - status.start_time).total_seconds() == 90.0
