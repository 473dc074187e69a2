"""Conditions written as training-operator / mpi-operator / JobSet write them, read by the shared parser."""

from __future__ import annotations

from typing import Any

from kubetrain.backends.local.conditions import set_jobset_condition, set_kubeflow_condition
from kubetrain.status import JobPhase, parse_job_status

T0, T1, T2, T3 = (f"2026-01-01T00:00:0{i}Z" for i in range(4))


def _types(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in status["conditions"]]


def _pytorchjob(status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "status": status}


def test_running_and_restarting_replace_each_other() -> None:
    status: dict[str, Any] = {}
    set_kubeflow_condition(status, "Created", True, "PyTorchJobCreated", "created", now=T0)
    set_kubeflow_condition(status, "Running", True, "PyTorchJobRunning", "running", now=T1)
    set_kubeflow_condition(status, "Restarting", True, "PyTorchJobRestarting", "restarting", now=T2)
    assert _types(status) == [("Created", "True"), ("Restarting", "True")]
    assert parse_job_status(_pytorchjob(status)).phase is JobPhase.RESTARTING
    set_kubeflow_condition(status, "Running", True, "PyTorchJobRunning", "running", now=T3)
    assert _types(status) == [("Created", "True"), ("Running", "True")]
    assert parse_job_status(_pytorchjob(status)).phase is JobPhase.RUNNING


def test_succeeded_turns_running_false_and_failed_is_final() -> None:
    status: dict[str, Any] = {}
    set_kubeflow_condition(status, "Running", True, "PyTorchJobRunning", "running", now=T1)
    set_kubeflow_condition(status, "Failed", True, "PyTorchJobFailed", "boom", now=T2)
    assert _types(status) == [("Running", "False"), ("Failed", "True")]
    assert not set_kubeflow_condition(status, "Running", True, "PyTorchJobRunning", "again", now=T3)
    parsed = parse_job_status(_pytorchjob(status))
    assert (parsed.phase, parsed.reason, parsed.message) == (JobPhase.FAILED, "PyTorchJobFailed", "boom")


def test_same_status_and_reason_is_left_alone() -> None:
    status: dict[str, Any] = {}
    set_kubeflow_condition(status, "Running", True, "PyTorchJobRunning", "running", now=T1)
    assert not set_kubeflow_condition(status, "Running", True, "PyTorchJobRunning", "other text", now=T2)
    assert status["conditions"][0]["lastTransitionTime"] == T1
    # A new reason with the same status updates the condition but keeps its transition time.
    assert set_kubeflow_condition(status, "Running", True, "Other", "x", now=T3)
    assert status["conditions"][0]["lastTransitionTime"] == T1
    assert status["conditions"][0]["lastUpdateTime"] == T3


def test_jobset_conditions_update_in_place() -> None:
    status: dict[str, Any] = {}
    assert not set_jobset_condition(status, "Suspended", False, "ResumeJobs", "resumed", now=T0)
    assert set_jobset_condition(status, "Suspended", True, "SuspendedJobs", "jobset is suspended", now=T1)
    assert set_jobset_condition(status, "Suspended", False, "ResumeJobs", "jobset is resumed", now=T2)
    assert status["conditions"] == [
        {
            "type": "Suspended",
            "status": "False",
            "reason": "ResumeJobs",
            "message": "jobset is resumed",
            "lastTransitionTime": T2,
        }
    ]
    set_jobset_condition(status, "Completed", True, "AllJobsCompleted", "jobset completed successfully", now=T3)
    obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"}, "status": status}
    assert parse_job_status(obj).phase is JobPhase.SUCCEEDED
