"""The kubetrain-vs-floor benchmark's arithmetic, from pod and job JSON as the API server returns them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from floor_timeline import job_of_step_log, pods_of_job, step_timeline, take_objects


def _pod(name: str, started: str, finished: str | None, container: str = "main") -> dict[str, Any]:
    state: dict[str, Any] = (
        {"terminated": {"startedAt": started, "finishedAt": finished, "exitCode": 0}}
        if finished
        else {"running": {"startedAt": started}}
    )
    return {"metadata": {"name": name}, "status": {"containerStatuses": [{"name": container, "state": state}]}}


STEP = _pod("mnist-pytorch-abc-system-container-impl-1", "2026-11-27T00:00:10Z", "2026-11-27T00:00:40Z")
JOB = {
    "metadata": {"name": "pytorch-abc", "creationTimestamp": "2026-11-27T00:00:13Z"},
    "status": {
        "conditions": [
            {"type": "Created", "status": "True", "lastTransitionTime": "2026-11-27T00:00:13Z"},
            {"type": "Running", "status": "False", "lastTransitionTime": "2026-11-27T00:00:36Z"},
            {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-27T00:00:37Z"},
        ]
    },
}
PODS = [
    _pod("pytorch-abc-master-0", "2026-11-27T00:00:16Z", "2026-11-27T00:00:35Z", "pytorch"),
    _pod("pytorch-abc-worker-0", "2026-11-27T00:00:18Z", "2026-11-27T00:00:36Z", "pytorch"),
]


def test_the_spans_add_up_to_the_step() -> None:
    t = step_timeline(STEP, JOB, PODS)
    assert t.step_wall == 30
    assert t.start_to_job_created == 3
    assert t.job_created_to_all_running == 5  # the last pod to start decides
    assert t.training == 18  # all Running (00:18) -> the last pod's end (00:36)
    assert t.pods_end_to_job_succeeded == 1
    assert t.job_succeeded_to_step_completed == 3
    parts = (
        t.start_to_job_created + t.job_created_to_all_running + t.training
        + t.pods_end_to_job_succeeded + t.job_succeeded_to_step_completed
    )  # fmt: skip
    assert parts == t.step_wall
    assert t.kubetrain_share == 12


def test_a_jobset_completes_instead_of_succeeding() -> None:
    jobset = {**JOB, "status": {"conditions": [{"type": "Completed", "status": "True",
                                                "lastTransitionTime": "2026-11-27T00:00:38Z"}]}}  # fmt: skip
    assert step_timeline(STEP, jobset, PODS).pods_end_to_job_succeeded == 2


def test_missing_times_are_named() -> None:
    running = [_pod("pytorch-abc-master-0", "2026-11-27T00:00:16Z", None, "pytorch")]
    with pytest.raises(ValueError, match="training pods' start and end"):
        step_timeline(STEP, JOB, running)
    unfinished = {**JOB, "status": {"conditions": []}}
    with pytest.raises(ValueError, match="job Succeeded"):
        step_timeline(STEP, unfinished, PODS)


def test_a_step_log_names_its_job_and_pods_are_matched_by_name() -> None:
    log = "12:00:01.5 pytorch: job pytorch-abc on the kubernetes backend, output /workspace/runs/x\n"
    assert job_of_step_log(log) == "pytorch-abc"
    assert job_of_step_log("dataset digits: reused") is None
    others = [_pod("pytorch-abcd-master-0", "2026-11-27T00:00:16Z", None)]
    assert [p["metadata"]["name"] for p in pods_of_job([*PODS, *others], "pytorch-abc")] == [
        "pytorch-abc-master-0",
        "pytorch-abc-worker-0",
    ]


def test_kubectls_watch_output_is_split_into_whole_objects_across_reads() -> None:
    stream = '{\n  "metadata": {"name": "a"}\n}\n{\n  "metadata": {"name": "b", "note": "}{"}\n}\n{\n  "meta'
    found, rest = take_objects(stream)
    assert [o["metadata"]["name"] for o in found] == ["a", "b"]
    assert rest == '{\n  "meta'
    more, rest = take_objects(rest + 'data": {"name": "c"}}\n')
    assert [o["metadata"]["name"] for o in more] == ["c"] and rest == ""
