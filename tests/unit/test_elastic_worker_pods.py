"""The master hears of each worker pod's preemption, disruption, deletion, failure or placement once.

The pods go through the Kubernetes backend's own translation (`pod_info`), so what is tested is
what the master hears from real pod objects: a DisruptionTarget condition set by the scheduler's
preemption, a deletionTimestamp, a vanished pod.
"""

from __future__ import annotations

from typing import Any

from kubetrain.backends.base import PodInfo
from kubetrain.backends.kubernetes.objects import pod_info
from kubetrain.elastic.master import apply_change
from kubetrain.elastic.worker_pods import Change, WorkerChange, worker_changes
from kubetrain.manifests.kinds import JOBSET
from kubetrain.ps.common.tasks import BookConfig, Directive
from kubetrain.ps.master.taskbook import TaskBook

JS = "ps-job"


def pod(
    index: int,
    phase: str = "Running",
    extra: dict[str, Any] | None = None,
    *,
    role: str = "worker",
    suffix: str = "abcde",
) -> PodInfo:
    """A pod of the PS JobSet as the API returns it, through the backend's translation."""
    extra = extra or {}
    host = f"{JS}-{role}-0-{index}"
    raw: dict[str, Any] = {
        "metadata": {
            "name": f"{host}-{suffix}",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": JS,
                "jobset.sigs.k8s.io/replicatedjob-name": role,
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
            **extra.get("metadata", {}),
        },
        "spec": {"hostname": host, "containers": [{"name": "ps"}]},
        "status": {"phase": phase, **extra.get("status", {})},
    }
    return pod_info(JOBSET, raw)


def by_name(*pods: PodInfo) -> dict[str, PodInfo]:
    return {p.name: p for p in pods}


PREEMPTED: dict[str, Any] = {
    "metadata": {"deletionTimestamp": "2026-11-29T12:00:00Z"},
    "status": {
        "conditions": [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "default-scheduler: preempting to accommodate a higher priority pod",
            }
        ]
    },
}


def test_a_preempted_worker_is_named_by_the_id_it_registers_with_and_reported_once() -> None:
    before = by_name(pod(0), pod(1))
    after = [pod(0), pod(1, "Running", PREEMPTED), pod(0, role="master")]
    changes = worker_changes(before, after)
    assert [(c.worker_id, c.change, c.reason) for c in changes] == [
        (f"{JS}-worker-0-1", Change.PREEMPTED, "PreemptionByScheduler")
    ]
    assert changes[0].pod == f"{JS}-worker-0-1-abcde"
    assert "preempting to accommodate a higher priority pod" in changes[0].line()
    # The next look still shows the pod on its way out: nothing new to tell.
    assert worker_changes(by_name(*[p for p in after if p.replica_type == "worker"]), after) == []
    # Then it is gone: its leaving was told already.
    assert worker_changes(by_name(pod(0), pod(1, "Running", PREEMPTED)), [pod(0)]) == []


def test_an_eviction_is_a_disruption_not_a_preemption() -> None:
    evicted: dict[str, Any] = {
        "status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}
    }
    [change] = worker_changes(by_name(pod(2)), [pod(2, "Running", evicted)])
    assert (change.change, change.reason) == (Change.DISRUPTED, "EvictionByEvictionAPI")


def test_a_deleted_or_vanished_worker_is_deleted() -> None:
    deleting: dict[str, Any] = {"metadata": {"deletionTimestamp": "2026-11-29T12:00:00Z"}}
    [change] = worker_changes(by_name(pod(0)), [pod(0, "Running", deleting)])
    assert change.change is Change.DELETED
    [vanished] = worker_changes(by_name(pod(0), pod(1)), [pod(0)])
    assert (vanished.worker_id, vanished.change) == (f"{JS}-worker-0-1", Change.DELETED)


def test_a_failed_worker_pod_names_its_exit() -> None:
    failed: dict[str, Any] = {
        "status": {
            "containerStatuses": [{"name": "ps", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]
        }
    }
    [change] = worker_changes(by_name(pod(0)), [pod(0, "Failed", failed)])
    assert (change.change, change.reason) == (Change.FAILED, "OOMKilled")


def test_a_pending_worker_is_placed_when_it_runs_and_its_replacement_too() -> None:
    assert worker_changes({}, [pod(0, "Pending")]) == []
    [placed] = worker_changes(by_name(pod(0, "Pending")), [pod(0)])
    assert (placed.worker_id, placed.change) == (f"{JS}-worker-0-0", Change.PLACED)
    assert worker_changes(by_name(pod(0)), [pod(0)]) == []
    # The Job's replacement for a preempted pod has the same host name (worker id), a new pod name.
    [again] = worker_changes(by_name(pod(1, "Running", PREEMPTED)), [pod(1, suffix="fghij")])
    assert (again.worker_id, again.pod, again.change) == (f"{JS}-worker-0-1", f"{JS}-worker-0-1-fghij", Change.PLACED)


def test_master_and_server_pods_are_not_workers() -> None:
    assert worker_changes({}, [pod(0, role="master"), pod(0, "Running", PREEMPTED, role="ps")]) == []


def _book() -> TaskBook:
    return TaskBook(
        config=BookConfig(
            epochs=1, records_per_task=10, train_shards=(50,), test_shards=(10,), eval_records_per_task=10
        )
    )


def test_the_master_gives_a_preempted_workers_tasks_back_at_once_and_counts_one_preemption() -> None:
    book = _book()
    _, lease = book.get_task(f"{JS}-worker-0-1", "i1", 0.0)
    assert lease is not None
    [change] = worker_changes(by_name(pod(1)), [pod(1, "Running", PREEMPTED)])
    assert apply_change(book, change, 1.0) == 1
    assert book.counters["preemptions"] == 1
    [line] = book.drain_events()
    assert line.startswith(f"worker {JS}-worker-0-1 preempted (by default-scheduler: preempting to accommodate")
    assert line.endswith("1 task re-queued; 0 workers left")
    # The same worker's next pod, placed, gets work again; the deletion told after is no news.
    assert apply_change(book, WorkerChange(f"{JS}-worker-0-1", "p2", Change.DELETED, "deleted"), 2.0) == 0


def test_an_evicted_or_deleted_worker_gives_its_tasks_back_and_a_failed_one_is_left_to_the_heartbeats() -> None:
    book = _book()
    for i in range(3):
        book.get_task(f"w-{i}", "i1", 0.0)
    evicted = WorkerChange("w-0", "w-0-x", Change.DISRUPTED, "EvictionByEvictionAPI", "Eviction API: evicting")
    assert apply_change(book, evicted, 1.0) == 1
    assert apply_change(book, WorkerChange("w-1", "w-1-x", Change.DELETED, "deleted"), 1.0) == 1
    assert apply_change(book, WorkerChange("w-2", "w-2-x", Change.FAILED, "OOMKilled"), 1.0) == 0
    assert [line.split(";")[0] for line in book.drain_events()] == [
        "worker w-0 disrupted (EvictionByEvictionAPI)",
        "worker w-1 deleted",
    ]
    assert book.counters["preemptions"] == 0


def test_a_pod_preempted_before_its_worker_registered_is_refused_and_its_replacement_welcome() -> None:
    # Seen on the real node: the scheduler preempted a worker pod one second after it started,
    # before its process had asked for work; the process, alive through its grace period, then
    # registered under the worker id its replacement shares, and trained as if nothing happened.
    book = _book()
    uid = "0b5e-old"
    [change] = worker_changes(by_name(pod(1)), [pod(1, "Running", {**PREEMPTED, "metadata": {
        **PREEMPTED["metadata"], "uid": uid}})])  # fmt: skip
    assert change.pod_uid == uid
    assert apply_change(book, change, 1.0) == 0  # it held nothing yet
    worker = f"{JS}-worker-0-1"
    assert book.get_task(worker, f"{uid}/process-a", 2.0) == (Directive.WAIT, None)
    assert book.roster.alive() == 0, "the preempted pod's process is not counted as a worker"
    directive, lease = book.get_task(worker, "0b5e-new/process-b", 3.0)
    assert directive == Directive.RUN_TASK and lease is not None, "the replacement pod trains"
    # A report of the old pod's process, had it got a lease, would be dropped too.
    assert book.roster.is_gone(worker, f"{uid}/process-a")
