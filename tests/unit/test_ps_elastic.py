"""The elastic PS master's decisions, on a fake clock: preempted workers' work re-queued at once
(their late word dropped), stragglers backed up (first result counts, once), workers joining and
leaving mid-training, and a master restarted from its state. The size decision: test_ps_scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain.errors import SpecError
from kubetrain.ps.common.tasks import BookConfig, Directive, Lease
from kubetrain.ps.master.state import StateStore, book_from_json, book_to_json
from kubetrain.ps.master.taskbook import TaskBook

RECORDS = 50  # one epoch of 5 tasks of 10 records


def _book(**kw: Any) -> TaskBook:
    base: dict[str, Any] = {
        "epochs": 1,
        "records_per_task": 10,
        "train_shards": (RECORDS,),
        "test_shards": (10,),
        "eval_records_per_task": 10,
        "heartbeat_timeout_s": 30.0,
        "min_task_timeout_s": 600.0,
        "straggler_min_samples": 3,
        "straggler_floor_s": 10.0,
    }
    base.update(kw)
    return TaskBook(config=BookConfig(**base))


def _take(book: TaskBook, worker: str, now: float, inc: str = "i1") -> Lease:
    directive, lease = book.get_task(worker, inc, now)
    assert directive == Directive.RUN_TASK and lease is not None, directive
    return lease


def _report(
    book: TaskBook, lease: Lease, now: float, *, worker: str | None = None, inc: str = "i1"
) -> tuple[bool, str]:
    return book.report(
        worker_id=worker or lease.worker_id,
        incarnation=inc,
        task_id=lease.task.task_id,
        lease=lease.lease,
        success=True,
        records=lease.task.records,
        loss_sum=0.5 * lease.task.records,
        versions={0: (1, lease.lease)},
        now=now,
    )


def _finish(book: TaskBook, lease: Lease, now: float, inc: str = "i1") -> None:
    ok, note = _report(book, lease, now, inc=inc)
    assert ok and note == "done", note


def _counted_once(book: TaskBook) -> None:
    """Every record in the ledger once, and the twice-trained count is what was trained beyond it."""
    assert book.training_complete()
    assert book.ledger.records() == RECORDS and book.counters["tasks_done"] == RECORDS // 10
    c = book.counters
    assert c["records_trained"] - c["records_trained_twice"] == RECORDS


# ----------------------------------------------------------------------------------- preemption


def test_a_preempted_workers_leases_go_back_at_once_and_its_late_word_is_dropped() -> None:
    book = _book()
    held = _take(book, "ps-w-2", 0.0)
    other = _take(book, "ps-w-1", 0.0)
    book.heartbeat("ps-w-2", "i1", held.lease, 4, 1.0)  # 4 records of it trained and pushed
    assert book.worker_left("ps-w-2", 2.0, preempted_by="online/web-7f9c") == 1
    # Back at the front of the queue at once: no heartbeat timeout, no task timeout waited for.
    assert book.queues.todo[0] == held.task and held.lease not in book.doing
    assert book.drain_events() == ["worker ps-w-2 preempted (by online/web-7f9c); 1 task re-queued; 1 worker left"]
    assert book.drain_events() == []
    c = book.counters
    assert (c["preemptions"], c["tasks_requeued"], c["tasks_failed"]) == (1, 1, 0)
    # The going pod's process still talks in its grace period: its report is dropped, its
    # heartbeat told to abandon, and it gets no new work.
    ok, note = _report(book, held, 3.0)
    assert not ok and "preempted or removed" in note and held.task.task_id not in book.ledger
    assert book.heartbeat("ps-w-2", "i1", held.lease, 10, 3.0) == (Directive.WAIT, True)
    assert book.get_task("ps-w-2", "i1", 3.0) == (Directive.WAIT, None)
    assert not book.workers["ps-w-2"].alive
    # Another worker trains it; the 4 records the preempted one pushed are the only ones trained twice.
    _finish(book, other, 4.0)
    now = 5.0
    while (lease := book.get_task("ps-w-1", "i1", now)[1]) is not None:
        _finish(book, lease, now)
    _counted_once(book)
    assert c["records_trained_twice"] == 4 and c["duplicate_reports"] == 0
    # The version history: one entry per task, from the lease that finished it, none from the preempted one.
    assert held.lease not in {e.lease for _, e in book.ledger.items()}


def test_preemption_is_not_a_task_failure_and_a_new_pod_of_the_worker_gets_work() -> None:
    book = _book(max_task_failures=2)
    for attempt in range(3):  # more preemptions of the same task than max_task_failures
        lease = _take(book, "ps-w-0", float(attempt), inc=f"pod{attempt}")
        book.worker_left("ps-w-0", float(attempt), preempted_by="")
        assert book.queues.todo[0] == lease.task
    assert book.counters["tasks_dropped"] == 0 and book.counters["preemptions"] == 3
    assert book.drain_events()[-1] == "worker ps-w-0 preempted; 1 task re-queued; 0 workers left"
    # The replacement pod (same host name, a new process) is welcome again.
    lease = _take(book, "ps-w-0", 9.0, inc="pod3")
    _finish(book, lease, 10.0, inc="pod3")


def test_the_watch_telling_a_preemption_twice_counts_it_once() -> None:
    book = _book()
    _take(book, "ps-w-0", 0.0)
    assert book.worker_left("ps-w-0", 1.0, preempted_by="online/web-1") == 1
    assert book.worker_left("ps-w-0", 2.0, preempted_by="online/web-1") == 0  # the pod's deletion, after
    assert book.counters["preemptions"] == 1 and len(book.drain_events()) == 1
    # A pending pod preempted before its process ever registered: counted once too, and its
    # replacement registers as usual.
    assert book.worker_left("ps-w-5", 3.0, preempted_by="") == 0
    assert book.worker_left("ps-w-5", 4.0, preempted_by="") == 0
    assert book.counters["preemptions"] == 2
    _take(book, "ps-w-5", 5.0, inc="new")


def test_a_shrink_gives_the_leaving_workers_tasks_back() -> None:
    book = _book()
    kept = _take(book, "ps-w-0", 0.0)
    leaving = _take(book, "ps-w-1", 0.0)
    assert book.worker_left("ps-w-1", 1.0) == 1
    assert book.drain_events() == ["worker ps-w-1 left (job shrank); 1 task re-queued; 1 worker left"]
    assert book.counters["workers_left"] == 1 and book.counters["preemptions"] == 0
    _finish(book, kept, 2.0)
    assert _take(book, "ps-w-0", 2.0).task == leaving.task


# ----------------------------------------------------------------------------------- stragglers


def _slow_task_with_median_5s(book: TaskBook) -> tuple[Lease, float]:
    """Three tasks of 5 s finished by w1; w0 holds the fourth from t=20; w1 finishes the fifth:
    the queue is empty, the median 5 s, the threshold max(10 s, 3 x 5 s) = 15 s."""
    for i in range(3):
        _finish(book, _take(book, "w1", 5.0 * i), 5.0 * i + 5.0)
    slow = _take(book, "w0", 20.0)
    _finish(book, _take(book, "w1", 20.0), 25.0)
    assert book.drain_events() == ["grew to 2 workers (w0 joined)"]  # w0 came once training had begun
    return slow, 25.0


def test_a_straggling_task_goes_out_again_and_the_first_result_counts_once() -> None:
    book = _book()
    slow, _ = _slow_task_with_median_5s(book)
    book.heartbeat("w0", "i1", slow.lease, 6, 30.0)
    assert book.get_task("w1", "i1", 34.0) == (Directive.WAIT, None)  # held 14 s: not yet
    backup = _take(book, "w1", 36.0)  # held 16 s: handed out again
    assert backup.task == slow.task and backup.lease != slow.lease
    assert book.drain_events() == [f"task {slow.task.task_id} re-issued (held 16 s; median 5 s)"]
    assert book.counters["tasks_reissued"] == 1
    assert book.get_task("w2", "i1", 37.0) == (Directive.WAIT, None)  # one backup a task
    _finish(book, backup, 40.0)
    # The straggler is told to abandon; its result, when it comes, changes nothing but the count.
    assert book.heartbeat("w0", "i1", slow.lease, 8, 41.0)[1] is True
    ok, note = _report(book, slow, 42.0)
    assert ok and note.startswith("duplicate")
    _counted_once(book)
    c = book.counters
    assert (c["duplicate_reports"], c["records_trained_twice"]) == (1, 10)  # its 10 records once, not 10 + 6


def test_when_the_straggler_answers_first_the_backup_is_dropped() -> None:
    book = _book()
    slow, _ = _slow_task_with_median_5s(book)
    backup = _take(book, "w1", 40.0)
    _finish(book, slow, 41.0)
    assert backup.lease not in book.doing and book.heartbeat("w1", "i1", backup.lease, 3, 41.0)[1] is True
    assert _report(book, backup, 42.0)[1].startswith("duplicate")
    _counted_once(book)


def test_a_failing_straggler_leaves_its_task_to_the_backup_not_to_a_third_copy() -> None:
    book = _book()
    slow, _ = _slow_task_with_median_5s(book)
    backup = _take(book, "w1", 40.0)
    ok, _ = book.report(
        worker_id="w0", incarnation="i1", task_id=slow.task.task_id, lease=slow.lease, success=False,
        error="killed", now=41.0,
    )  # fmt: skip
    assert ok and not book.queues.todo and list(book.doing) == [backup.lease]
    _finish(book, backup, 42.0)
    _counted_once(book)


def test_a_late_report_that_finishes_its_task_counts_its_records_once() -> None:
    book = _book(min_task_timeout_s=30.0, task_timeout_factor=3.0)
    late = _take(book, "w0", 0.0)
    book.heartbeat("w0", "i1", late.lease, 4, 10.0)
    assert book.expire(31.0)  # over the task timeout: taken back, its 4 records counted as to be trained again
    assert book.counters["records_trained_twice"] == 4
    ok, note = _report(book, late, 32.0)  # then its worker finishes it after all: it counts, from the queue
    assert ok and note == "done" and late.task not in book.queues.todo
    assert (book.counters["records_trained"], book.counters["records_trained_twice"]) == (10, 0)


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"straggler_factor": 0.0}, "off"),
        ({"straggler_min_samples": 5}, "four finished tasks are too few to judge"),
        ({"straggler_floor_s": 60.0}, "the floor: 16 s is no straggler"),
    ],
)
def test_no_straggler_without_enough_evidence(kw: dict[str, Any], why: str) -> None:
    book = _book(**kw)
    _slow_task_with_median_5s(book)
    assert book.get_task("w1", "i1", 36.0) == (Directive.WAIT, None), why


def test_static_sharding_never_reissues() -> None:
    book = _book(static_slots=2)
    for i in range(3):
        _finish(book, _take(book, "w1", 5.0 * i), 5.0 * i + 5.0)
    _take(book, "w0", 20.0)
    assert book.get_task("w1", "i1", 100.0) == (Directive.WAIT, None)


def test_a_straggler_factor_that_is_not_above_one_is_refused() -> None:
    with pytest.raises(
        SpecError, match=r"straggler_factor: got 0\.5; expected 0 \(never re-issue a task\) or a number > 1"
    ):
        _book(straggler_factor=0.5)


# ----------------------------------------------------------------------------------- joining


def test_a_worker_joining_mid_training_gets_work_and_its_results_count() -> None:
    book = _book()
    _finish(book, _take(book, "ps-w-0", 0.0), 1.0)
    joined = _take(book, "ps-w-1", 2.0)  # grew: a new pod registers
    _finish(book, joined, 3.0)
    assert book.ledger.get(joined.task.task_id) is not None and book.workers["ps-w-1"].records_trained == 10
    assert book.roster.max_alive == 2


def test_worker_seconds_follow_the_live_workers() -> None:
    book = _book()
    book.expire(0.0)
    _take(book, "a", 0.0)
    _take(book, "b", 0.0)
    book.expire(10.0)  # two workers for 10 s
    book.worker_left("b", 10.0, preempted_by="")
    book.expire(15.0)  # one for 5 s
    assert book.roster.worker_seconds == pytest.approx(25.0)


# ----------------------------------------------------------------------------------- recovery


def test_a_master_restarted_from_its_state_resumes_and_counts_every_record_once(tmp_path: Path) -> None:
    first = StateStore(tmp_path)
    first.claim()
    book = _book()
    done = _take(book, "ps-w-0", 0.0)
    _finish(book, done, 1.0)
    reattach = _take(book, "ps-w-0", 1.0)  # its worker outlives the master
    orphan = _take(book, "ps-w-1", 1.0)  # its worker dies with the master's node
    preempted = _take(book, "ps-w-2", 1.0)
    book.worker_left("ps-w-2", 2.0, preempted_by="online/web-1")
    first.save({"book": book_to_json(book)})
    # The master is killed; a new one claims the state on the same volume.
    second = StateStore(tmp_path)
    raw = second.claim()
    assert raw is not None and second.generation == 2
    book = book_from_json(book.config, raw["book"], now=100.0)
    # The surviving worker's report of its lease from the old master is re-attached and counted.
    ok, note = _report(book, reattach, 101.0)
    assert ok and note == "done"
    # The preempted process stays gone across the restart; its task was already re-queued.
    assert not _report(book, preempted, 101.0)[0] and book.queues.todo[0] == preempted.task
    # The dead worker's lease goes back once its heartbeats are missed on the new master's clock.
    assert book.expire(131.0) == ["worker ps-w-1 missed heartbeats"]
    now = 132.0
    while (lease := book.get_task("ps-w-0", "i1", now)[1]) is not None:
        _finish(book, lease, now)
    _counted_once(book)
    assert {orphan.task.task_id, done.task.task_id} <= {t for t, _ in book.ledger.items()}
    assert book.counters["preemptions"] == 1 and book.roster.max_alive == 3


def test_training_waits_below_min_workers_and_goes_on_when_a_worker_joins() -> None:
    book = _book(min_workers=2)
    assert book.get_task("w-0", "i1", 0.0) == (Directive.WAIT, None)
    assert book.get_task("w-0", "i1", 1.0) == (Directive.WAIT, None)
    assert book.drain_events() == ["waiting for workers: 1 of at least 2 here; training pauses"]
    a = _take(book, "w-1", 2.0)
    b = _take(book, "w-0", 2.0)
    assert book.drain_events() == ["2 workers here (at least 2): training goes on"]
    # One of the two is preempted: the other finishes what it holds, then waits again.
    assert book.worker_left("w-1", 3.0, preempted_by="") == 1
    _finish(book, b, 4.0)
    assert book.get_task("w-0", "i1", 5.0) == (Directive.WAIT, None)
    assert book.drain_events()[-1] == "waiting for workers: 1 of at least 2 here; training pauses"
    # The preempted worker's replacement (a new process, same id) joins: training goes on, and the
    # preempted task is handed out first.
    again = _take(book, "w-1", 6.0, inc="i2")
    assert again.task == a.task
    assert book.drain_events() == ["grew to 2 workers (w-1 joined)", "2 workers here (at least 2): training goes on"]


def test_min_workers_is_at_least_one() -> None:
    with pytest.raises(SpecError, match="min_workers"):
        _book(min_workers=0)


def test_the_history_records_the_jobs_size_at_each_join_and_preemption_for_the_report() -> None:
    book = _book()
    _take(book, "w-0", 0.0)
    _take(book, "w-1", 0.0)
    book.worker_left("w-1", 1.0, preempted_by="")
    sizes = [(h["workers"], h["event"]) for h in book.results.history if h["kind"] == "workers"]
    assert sizes == [(1, "joined"), (2, "joined"), (1, "preempted")]
