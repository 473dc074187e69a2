"""The master's book: hand-out, done-only-when-reported, re-queues, drops, eval rounds, restarts."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain.errors import SpecError
from kubetrain.ps.common.errors import PSConfigError, StaleStateError
from kubetrain.ps.common.evaluation import EvalResult
from kubetrain.ps.common.tasks import (
    FAILED,
    FINAL_EVAL,
    FINISHING,
    BookConfig,
    Directive,
    Lease,
    cut_epoch,
    cut_split,
    task_from_id,
)
from kubetrain.ps.master.state import StateStore, book_from_json, book_to_json
from kubetrain.ps.master.taskbook import TaskBook


def _config(**kw: Any) -> BookConfig:
    base: dict[str, Any] = {
        "epochs": 2,
        "records_per_task": 10,
        "train_shards": (25, 15),
        "test_shards": (12,),
        "eval_records_per_task": 5,
        "heartbeat_timeout_s": 5.0,
        "min_task_timeout_s": 30.0,
    }
    base.update(kw)
    return BookConfig(**base)


def _take(book: TaskBook, worker: str = "w0", inc: str = "a", now: float = 0.0) -> Lease:
    directive, lease = book.get_task(worker, inc, now)
    assert directive == Directive.RUN_TASK and lease is not None
    return lease


def _finish(book: TaskBook, lease: Lease, worker: str = "w0", inc: str = "a", now: float = 1.0, **kw: Any) -> str:
    ok, note = book.report(
        worker_id=worker,
        incarnation=inc,
        task_id=lease.task.task_id,
        lease=lease.lease,
        success=True,
        records=lease.task.records,
        loss_sum=0.5 * lease.task.records,
        now=now,
        **kw,
    )
    assert ok, note
    return note


def _drain(book: TaskBook, worker: str = "w0") -> list[Lease]:
    done: list[Lease] = []
    while True:
        _, lease = book.get_task(worker, "a", 0.0)
        if lease is None:
            return done
        _finish(book, lease, worker)
        done.append(lease)


@given(
    shards=st.lists(st.integers(1, 60), min_size=1, max_size=4),
    per_task=st.integers(1, 25),
    epoch=st.integers(0, 5),
)
@settings(max_examples=60, deadline=None)
def test_an_epoch_covers_every_record_exactly_once(shards: list[int], per_task: int, epoch: int) -> None:
    tasks = cut_epoch(shards, per_task, epoch=epoch, seed=3)
    covered = Counter((t.shard, i) for t in tasks for i in range(t.start, t.end))
    assert covered == Counter((s, i) for s, n in enumerate(shards) for i in range(n))
    assert all(t.records <= per_task and t.epoch == epoch for t in tasks)
    assert len({t.task_id for t in tasks}) == len(tasks)


def test_a_task_id_names_its_task_and_nothing_else_parses() -> None:
    tasks = [*cut_epoch([100, 30], 16, epoch=3, seed=1), *cut_split([20], 8, kind="eval", split="test", eval_round=2)]
    assert [task_from_id(t.task_id) for t in tasks] == tasks
    for odd in ("", "x", "train/e1/train/s0/16-16", "train/e1/train/s0/16-8", "train/r1/train/s0/0-8",
                "eval/e1/test/s0/0-8", "train/e1/train/s0/0-8\n", "train/e1/train/s+1/0-8"):  # fmt: skip
        with pytest.raises(SpecError, match="task_id: got"):
            task_from_id(odd)


def test_epoch_order_is_shuffled_per_epoch_and_static_slots_are_fixed() -> None:
    a, b = (cut_epoch((100,), 5, epoch=e, seed=0) for e in (0, 1))
    assert [t.start for t in a] != [t.start for t in b]
    s0, s1 = (cut_epoch((100,), 5, epoch=e, seed=0, slots=3) for e in (0, 1))
    assert {(t.start, t.slot) for t in s0} == {(t.start, t.slot) for t in s1}
    assert Counter(t.slot for t in s0) == {0: 7, 1: 7, 2: 6}


def test_all_epochs_are_handed_out_and_only_reports_finish_them() -> None:
    book = TaskBook(config=_config())
    lease = _take(book)
    assert not len(book.ledger) and lease.lease in book.doing  # handed out is not done
    _finish(book, lease)
    leases = [lease, *_drain(book)]
    assert len(leases) == 2 * (3 + 2)
    assert book.training_complete()
    assert book.counters["records_trained"] == 2 * 40
    assert {lease.task.epoch for lease in leases} == {0, 1}
    # One history entry per finished epoch, with the epoch's mean training loss.
    epochs = [h for h in book.results.history if h["kind"] == "epoch"]
    assert [(h["epoch"], h["loss"]) for h in epochs] == [(0, 0.5), (1, 0.5)]


def test_failed_task_goes_back_first_and_is_dropped_after_the_limit() -> None:
    book = TaskBook(config=_config(max_task_failures=3, max_dropped_fraction=0.5))
    lease = _take(book)
    for attempt in range(3):
        assert lease.task.task_id not in book.dropped
        ok, _ = book.report(
            worker_id="w0",
            incarnation="a",
            task_id=lease.task.task_id,
            lease=lease.lease,
            success=False,
            error="bad record",
            now=1.0,
        )
        assert ok
        if attempt < 2:
            nxt = _take(book)
            assert nxt.task.task_id == lease.task.task_id  # re-queued at the front
            lease = nxt
    assert lease.task.task_id in book.dropped
    assert book.counters["tasks_dropped"] == 1 and book.phase != FAILED


def test_dropping_past_the_threshold_fails_the_job() -> None:
    book = TaskBook(config=_config(max_task_failures=1, max_dropped_fraction=0.05))  # limit: 4 records
    lease = _take(book)
    book.report(
        worker_id="w0",
        incarnation="a",
        task_id=lease.task.task_id,
        lease=lease.lease,
        success=False,
        error="poison",
        now=1.0,
    )
    assert book.phase == FAILED and "poison" in book.failure_reason
    assert book.get_task("w1", "b", 2.0) == (Directive.JOB_FAILED, None)


def test_silent_worker_loses_its_lease_and_is_told_to_abandon() -> None:
    book = TaskBook(config=_config(heartbeat_timeout_s=5.0))
    lease = _take(book, "w0", now=0.0)
    book.heartbeat("w0", "a", lease.lease, 4, now=3.0)
    assert book.expire(7.0) == []  # heard 4s ago
    events = book.expire(8.5)
    assert events and "w0" in events[0]
    assert not book.doing
    # Partly trained records count as trained twice once the task is re-done.
    assert book.counters["records_trained_twice"] == 4
    assert _take(book, "w1", "b", now=9.0).task == lease.task
    assert book.heartbeat("w0", "a", lease.lease, 5, now=9.5) == (Directive.RUN_TASK, True)


def test_restarted_worker_releases_the_old_process_leases_at_once() -> None:
    book = TaskBook(config=_config())
    lease = _take(book, "w0", "old")
    nxt = _take(book, "w0", "new", now=1.0)
    assert nxt.task == lease.task and book.counters["tasks_failed"] == 1


def test_asking_again_releases_a_lease_whose_answer_was_lost() -> None:
    book = TaskBook(config=_config())
    lease = _take(book, "w0", "a")
    again = _take(book, "w0", "a", now=1.0)
    assert again.task == lease.task and book.counters["tasks_failed"] == 0


def test_adaptive_task_timeout() -> None:
    book = TaskBook(config=_config(min_task_timeout_s=10.0, task_timeout_factor=3.0))
    lease = _take(book, now=0.0)
    _finish(book, lease, now=6.0)  # a 6s task: timeout becomes 18s
    assert book.task_timeout() == 18.0
    slow = _take(book, now=10.0)
    book.heartbeat("w0", "a", slow.lease, 0, now=27.0)
    assert book.expire(27.0) == []
    assert book.expire(29.0) and slow.lease not in book.doing


def test_reports_are_idempotent_and_late_reports_reclaim_the_task() -> None:
    book = TaskBook(config=_config())
    lease = _take(book)
    _finish(book, lease)
    assert _finish(book, lease) == "already counted"
    assert book.counters["records_trained"] == lease.task.records
    # A lease taken back on timeout, then reported by its worker: the report finishes the task.
    late = _take(book, now=0.0)
    book.expire(100.0)
    assert late.task in book.queues.todo
    _finish(book, late, now=101.0)
    assert late.task not in book.queues.todo and late.task.task_id in book.ledger
    # Another worker holding it meanwhile is told to abandon.
    third = _take(book, "w0", now=102.0)
    book.expire(300.0)
    other = _take(book, "w1", "b", now=301.0)
    assert other.task == third.task
    _finish(book, third, now=302.0)
    assert book.heartbeat("w1", "b", other.lease, 0, now=303.0)[1] is True


def test_duplicate_completion_counts_records_trained_twice() -> None:
    book = TaskBook(config=_config())
    lease = _take(book, now=0.0)
    book.expire(100.0)
    other = _take(book, "w1", "b", now=101.0)
    _finish(book, other, "w1", "b", now=102.0)
    assert _finish(book, lease, now=103.0).startswith("duplicate")
    assert book.counters["records_trained_twice"] == lease.task.records


def test_ps_restart_requeues_tasks_whose_updates_were_lost() -> None:
    book = TaskBook(config=_config())
    early, late = _take(book, "w0"), _take(book, "w1", "b")
    _finish(book, early, versions={0: (1, 5), 1: (1, 5)})
    _finish(book, late, "w1", "b", versions={0: (1, 12), 1: (1, 3)})
    assert book.note_ps_state(0, [-1], 4) == 0
    # Shard 0 restarts (generation 2) from its version-10 checkpoint: version 12 is gone.
    assert book.note_ps_state(0, [-1, 10], 10) == 1
    assert late.task.task_id not in book.ledger and early.task.task_id in book.ledger
    assert book.queues.todo[0].task_id == late.task.task_id
    # A report arriving after the restart with a lost update is re-queued, not counted.
    again = _take(book)
    assert _finish(book, again, versions={0: (1, 11)}).startswith("re-queued")
    assert book.counters["tasks_retrained_after_ps_restore"] == 2


def test_a_ps_restart_is_one_event_line_even_when_it_lost_nothing() -> None:
    book = TaskBook(config=_config())
    _finish(book, _take(book), versions={0: (1, 5), 1: (1, 5)})
    book.note_ps_state(0, [-1], 5)
    book.note_ps_state(1, [-1], 4)  # shard 1's checkpoint is older than the task's update
    assert book.drain_events() == []  # first seen: no restart
    # A preempted server checkpoints on its way out: its successor lost nothing, and says so.
    assert book.note_ps_state(0, [-1, 5], 5) == 0
    assert book.note_ps_state(0, [-1, 5], 5) == 0  # polled again: the same generation, no new line
    assert book.drain_events() == ["PS shard 0 restarted from its checkpoint at version 5 (generation 2); "
                                   "0 finished tasks re-queued"]  # fmt: skip
    assert book.note_ps_state(1, [-1, -1], -1) == 1
    assert book.drain_events() == ["PS shard 1 restarted with no checkpoint (generation 2); 1 finished task re-queued"]
    # A shard the master first reaches after its restart: generation 2 on the first look.
    fresh = TaskBook(config=_config())
    assert fresh.note_ps_state(0, [-1, 7], 7) == 0
    assert fresh.drain_events() == ["PS shard 0 restarted from its checkpoint at version 7 (generation 2); "
                                    "0 finished tasks re-queued"]  # fmt: skip


def test_eval_tasks_come_first_and_results_count_once() -> None:
    book = TaskBook(config=_config())
    train = _take(book)
    rid = book.start_round(version=7, final=False)
    evals = [_take(book, f"e{i}", str(i)) for i in range(3)]
    assert all(e.task.kind == "eval" for e in evals)
    assert sum(e.task.records for e in evals) == 12
    for i, e in enumerate(evals):
        _finish(book, e, f"e{i}", str(i), eval_result=EvalResult(loss_sum=1.0, correct=3, count=e.task.records))
    duplicate = book.report(worker_id="e0", incarnation="0", task_id=evals[0].task.task_id, lease=evals[0].lease,
                            success=True, records=4, eval_result=EvalResult(9.0, 0, 4), now=2.0)  # fmt: skip
    assert duplicate[0] is False  # ignored
    assert rid not in book.results.evals.rounds
    assert book.results.history[-1]["step"] == 7
    assert book.results.history[-1]["test_accuracy"] == pytest.approx(9 / 12)
    assert train.lease in book.doing


def test_final_round_moves_to_finishing_with_metrics() -> None:
    book = TaskBook(config=_config(epochs=1))
    _drain(book)
    book.start_round(version=9, final=True)
    assert book.phase == FINAL_EVAL
    for lease in iter(lambda: book.get_task("w0", "a", 0.0)[1], None):
        _finish(book, lease, eval_result=EvalResult(0.2 * lease.task.records, lease.task.records, lease.task.records))
    assert book.phase == FINISHING
    assert book.results.final_metrics["test_accuracy"] == 1.0
    assert book.results.final_metrics["train_loss"] == pytest.approx(0.5)


def test_each_epoch_and_each_evaluation_is_a_line_of_the_masters_log(caplog: pytest.LogCaptureFixture) -> None:
    # The launcher follows the master's log: a run of any length shows its progress per epoch (issue 49.14).
    caplog.set_level(logging.INFO, logger="kubetrain.ps.master")
    book = TaskBook(config=_config(epochs=2))
    _drain(book)
    book.start_round(version=9, final=False, epoch=0)
    book.start_round(version=12, final=True)
    for lease in iter(lambda: book.get_task("w0", "a", 0.0)[1], None):
        _finish(book, lease, eval_result=EvalResult(0.2 * lease.task.records, lease.task.records, lease.task.records))
    lines = [r.getMessage() for r in caplog.records if r.name == "kubetrain.ps.master"]
    assert lines == [
        "epoch 0 trained: loss 0.5000 at model version 0",
        "epoch 1 trained: loss 0.5000 at model version 0",
        "epoch 0: loss 0.5000 test accuracy 1.0000 (model version 9)",
        "final evaluation: loss 0.5000 test accuracy 1.0000 (model version 12)",
    ]


def test_static_sharding_keeps_each_slot_to_its_block() -> None:
    book = TaskBook(config=_config(static_slots=2, epochs=1))
    a = [lease.task for lease in _drain(book, "w0")]
    assert book.get_task("w0", "a", 0.0) == (Directive.WAIT, None)  # no stealing from slot 1
    b = [lease.task for lease in _drain(book, "w1")]
    assert {t.slot for t in a} == {0} and {t.slot for t in b} == {1}
    assert book.training_complete()


def test_state_round_trip_resumes_where_it_stopped(tmp_path: Path) -> None:
    cfg = _config()
    book = TaskBook(config=cfg)
    done = _take(book)
    _finish(book, done, versions={0: (1, 4)})
    held = _take(book, "w1", "b")
    book.start_round(version=3, final=False)
    store = StateStore(tmp_path)
    assert store.claim() is None
    store.save({"book": book_to_json(book)})
    restarted = StateStore(tmp_path)
    raw = restarted.claim()
    assert raw is not None and restarted.generation == 2
    again = book_from_json(cfg, raw["book"], now=50.0)
    assert json.dumps(book_to_json(again), sort_keys=True) == json.dumps(book_to_json(book), sort_keys=True)
    assert again.doing[held.lease].started == 50.0  # timers re-armed
    with pytest.raises(StaleStateError):
        store.save({"book": book_to_json(book)})  # the old master is fenced off
    with pytest.raises(PSConfigError, match="epochs"):
        book_from_json(_config(epochs=3), raw["book"], now=0.0)


def test_cut_split_for_eval_keeps_shards_apart() -> None:
    tasks = cut_split((7, 5), 4, kind="eval", split="test", eval_round=2)
    assert [(t.shard, t.start, t.end) for t in tasks] == [(0, 0, 4), (0, 4, 7), (1, 0, 4), (1, 4, 5)]
    assert tasks[0].task_id == "eval/r2/test/s0/0-4"


def test_durable_entries_fold_into_bitmaps_and_stay_done() -> None:
    book = TaskBook(config=_config(epochs=1))
    leases = []
    for v, worker in enumerate(("w0", "w1", "w2", "w3", "w4")):
        lease = _take(book, worker, worker)
        _finish(book, lease, worker, worker, versions={0: (1, v + 1), 1: (1, v + 1)})
        leases.append(lease)
    assert len(book.ledger.open) == 5
    book.note_ps_state(0, [-1], 3)
    assert len(book.ledger.open) == 5  # shard 1 has not checkpointed them yet
    book.note_ps_state(1, [-1], 4)
    # Versions 1-3 are in both shards' checkpoints: durable, folded; 4 and 5 are still open.
    assert len(book.ledger.open) == 2 and len(book.ledger) == 5
    assert all(lease.task.task_id in book.ledger for lease in leases)
    assert book.ledger.records() == 40 and book.training_complete()
    assert [h["epoch"] for h in book.results.history if h["kind"] == "epoch"] == [0]
    # A retried report of a folded task (its lease no longer held) counts nothing, never a new task.
    book.report(worker_id="w0", incarnation="w0", task_id=leases[0].task.task_id, lease=leases[0].lease,
                success=True, records=leases[0].task.records, now=2.0)  # fmt: skip
    assert book.counters["tasks_done"] == 5
    assert book.counters["records_trained_twice"] == 0
    # A restart of shard 0 from version 3 loses only the open entries past it.
    assert book.note_ps_state(0, [-1, 3], 3) == 2
    assert len(book.ledger) == 3
    restored = book_from_json(book.config, json.loads(json.dumps(book_to_json(book))), now=0.0)
    assert restored.ledger.folded == book.ledger.folded and len(restored.ledger) == 3


def test_history_steps_follow_the_reported_versions_and_the_final_loss_is_the_last_epochs() -> None:
    book = TaskBook(config=_config(epochs=2))
    version = 0
    for epoch_loss in (0.9, 0.3):
        for _ in range(5):  # tasks per epoch: shards of 25 and 15 records, 10 per task
            lease = _take(book)
            version += 3
            ok, _ = book.report(
                worker_id="w0", incarnation="a", task_id=lease.task.task_id, lease=lease.lease, success=True,
                records=lease.task.records, loss_sum=epoch_loss * lease.task.records,
                versions={0: (1, version), 1: (1, version - 1)}, now=1.0,
            )  # fmt: skip
            assert ok
    # The step of an epoch's entry is the model version its last report produced, so the loss
    # curve is plotted against steps that advance, not against a stale poll of the shards.
    epochs = [h for h in book.results.history if h["kind"] == "epoch"]
    assert [(h["epoch"], h["step"]) for h in epochs] == [(0, 15), (1, 30)]
    book.start_round(version=book.results.model_version, final=True)
    for lease in iter(lambda: book.get_task("w0", "a", 0.0)[1], None):
        _finish(book, lease, eval_result=EvalResult(0.2 * lease.task.records, lease.task.records, lease.task.records))
    final = book.results.history[-1]
    assert final["step"] == 30
    assert final["loss"] == pytest.approx(0.3)
    assert book.results.final_metrics["train_loss"] == pytest.approx(0.3)


def test_only_the_lease_holder_may_report_and_only_with_every_record() -> None:
    book = TaskBook(config=_config())
    lease = _take(book, "w0", "a", now=0.0)
    book.expire(100.0)  # taken back: only w0's own process may still finish it
    ok, note = book.report(worker_id="w1", incarnation="b", task_id=lease.task.task_id, lease=lease.lease,
                           success=True, records=lease.task.records, now=101.0)  # fmt: skip
    assert not ok and "not held by worker w1" in note and lease.task in book.queues.todo
    ok, note = book.report(worker_id="w0", incarnation="a", task_id=lease.task.task_id, lease=lease.lease,
                           success=True, records=1, now=101.0)  # fmt: skip
    assert not ok and "reported 1 records" in note and lease.task in book.queues.todo
    # A heartbeat cannot claim more progress than the task has, nor for another worker's lease.
    held = _take(book, "w2", "c", now=102.0)
    book.heartbeat("w2", "c", held.lease, 10**9, now=103.0)
    book.heartbeat("w3", "d", held.lease, 5, now=103.0)
    assert book.doing[held.lease].progress == held.task.records
    assert book.counters["records_trained"] == 0 and not any(w.records_trained for w in book.workers.values())


def test_every_task_is_a_loss_point_and_each_epoch_but_the_last_awaits_an_evaluation() -> None:
    """Issue 34: the PS report drew 10 loss points for 450 steps and one accuracy dot (final round only)."""
    from kubetrain.kfp_runtime.report import curves

    book = TaskBook(config=_config(epochs=3))
    version = 0
    for epoch in range(3):
        for _ in range(5):  # tasks per epoch: shards of 25 and 15 records, 10 per task
            lease = _take(book)
            version += 2
            _finish(book, lease, versions={0: (1, version)})
        if epoch < 2:
            assert book.results.epoch_to_evaluate(last_epoch=2) == epoch
            book.start_round(version=version, final=False, epoch=epoch)
            assert book.results.epoch_to_evaluate(last_epoch=2) is None  # its round is open
            for _ in range(3):  # the test split: 12 records, 5 per task
                e = _take(book)
                assert e.task.kind == "eval"
                _finish(book, e, eval_result=EvalResult(0.1 * e.task.records, e.task.records - 1, e.task.records))
    assert book.results.epoch_to_evaluate(last_epoch=2) is None  # the last epoch is the final round's
    book.start_round(version=version, final=True)
    for e in iter(lambda: book.get_task("w0", "a", 0.0)[1], None):
        _finish(book, e, eval_result=EvalResult(0.1 * e.task.records, e.task.records, e.task.records))
    loss, accuracy = curves(book.results.history)
    assert [step for step, _ in loss] == list(range(2, 31, 2))  # one point per task, at its model version
    assert [epoch for epoch, _ in accuracy] == [0, 1, 2]  # after each epoch, as DDP's report draws it
    assert accuracy[-1][1] == 1.0 and accuracy[0][1] < 1.0


def test_a_long_epoch_is_drawn_in_at_most_points_per_epoch_loss_points() -> None:
    from kubetrain.ps.master.results import POINTS_PER_EPOCH

    book = TaskBook(config=_config(epochs=1, train_shards=(2000, 1050), records_per_task=10))
    _drain(book)
    points = [h for h in book.results.history if h["kind"] == "step"]
    assert POINTS_PER_EPOCH // 2 <= len(points) <= POINTS_PER_EPOCH
