"""The master's book of work: todo / doing / done per epoch, leases, failures, eval rounds' tasks.

Pure logic with no I/O and no clock of its own (callers pass `now`), so every rule is unit-tested:

- a task is done only when the worker process holding its lease reports all its records trained,
  never when it was handed out or read, nor on another client's word (`reports`); a non-finite
  loss fails the job;
- a task held by a worker that fails, restarts, stops heartbeating or overruns the adaptive task
  timeout goes back to the front of the queue; a task failing `max_task_failures` times is
  dropped and counted, and the job fails once dropped records pass `max_dropped_fraction`;
- a finished task whose gradients landed on a PS shard past the checkpoint that shard restarted
  from is put back too: its update was lost (the PS failover ElasticDL designed, never built);
- a worker the pod watch reports preempted or removed (`worker_left`) gives its leases back at
  once, not as failures, and nothing its going process still sends counts; a straggling task is
  handed out a second time to an idle worker (`stragglers`), the first result counting, once;
- evaluation tasks have their own queue and are handed out first;
- what the finished work produced (losses, history, final metrics) goes to `results`;
- the whole book round-trips through JSON (`master_state`), so a restarted master carries on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubetrain.ps.common.errors import UnknownTaskError
from kubetrain.ps.common.evaluation import EvalResult, EvalRound
from kubetrain.ps.common.tasks import (
    DONE,
    EVAL,
    FAILED,
    FINAL_EVAL,
    FINISHING,
    TRAIN,
    TRAINING,
    BookConfig,
    Directive,
    DoneEntry,
    Lease,
    TaskRange,
    WorkerInfo,
    cut_split,
    task_from_id,
)
from kubetrain.ps.master.ledger import Ledger, restart_event
from kubetrain.ps.master.queues import TaskQueues
from kubetrain.ps.master.reports import count_problem, divergence
from kubetrain.ps.master.results import POINTS_PER_EPOCH, TrainingResults
from kubetrain.ps.master.stragglers import TaskTimes, pick_straggler
from kubetrain.ps.master.workers import Roster

__all__ = ["COUNTERS", "TaskBook"]

COUNTERS = (
    "records_trained",
    "records_trained_twice",
    "tasks_done",
    "tasks_failed",
    "tasks_requeued",
    "tasks_dropped",
    "records_dropped",
    "tasks_retrained_after_ps_restore",
    "workers_lost",
    "duplicate_reports",
    "preemptions",
    "workers_left",
    "tasks_reissued",
)


@dataclass
class TaskBook:
    """All of the master's bookkeeping; not thread-safe (the master holds one lock around it)."""

    config: BookConfig
    phase: str = TRAINING
    failure_reason: str = ""
    queues: TaskQueues = field(init=False)
    doing: dict[int, Lease] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    next_lease: int = 1
    roster: Roster = field(default_factory=Roster)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    max_task_seconds: float = 0.0
    results: TrainingResults = field(default_factory=TrainingResults)
    ledger: Ledger = field(init=False)
    # Leases taken back (lease -> worker, incarnation, task id): only their own holder may still
    # report them. Not persisted: after a master restart such a late report is refused, and the
    # task is simply trained again.
    released: dict[int, Lease] = field(default_factory=dict)
    task_times: TaskTimes = field(default_factory=TaskTimes)
    events: list[str] = field(default_factory=list)  # one-line events for the log (drain_events)
    _waiting_for_workers: bool = field(default=False, init=False)  # below min_workers, said so

    def __post_init__(self) -> None:
        c = self.config
        self.ledger = Ledger(c.train_shards, c.records_per_task)
        self.queues = TaskQueues(c)
        self._tasks_per_epoch = len(cut_split(c.train_shards, c.records_per_task, kind=TRAIN, split="train"))
        self._tasks_per_point = -(-self._tasks_per_epoch // POINTS_PER_EPOCH)

    @property
    def workers(self) -> dict[str, WorkerInfo]:
        """The workers the master has heard from, by id."""
        return self.roster.known

    # ----------------------------------------------------------------------------- hand-out

    def training_complete(self) -> bool:
        """Every epoch is cut and no training task is queued or held."""
        held = any(lease.task.kind == TRAIN for lease in self.doing.values())
        return self.queues.all_cut() and not self.queues.train_queued() and not held

    def _end_directive(self) -> int | None:
        return {DONE: Directive.JOB_DONE, FAILED: Directive.JOB_FAILED}.get(self.phase)

    def get_task(self, worker_id: str, incarnation: str, now: float) -> tuple[int, Lease | None]:
        """The next lease for a worker, or WAIT / JOB_DONE / JOB_FAILED."""
        if self.roster.is_gone(worker_id, incarnation):
            return Directive.WAIT, None  # its pod is going: no new work for it
        w = self._touch(worker_id, incarnation, now)
        end = self._end_directive()
        if end is not None:
            return end, None
        # A worker asks only when it holds nothing: a lease still on it lost its answer.
        self._release_worker(worker_id, failure=False, reason="worker asked again")
        if self.queues.eval_todo:
            return Directive.RUN_TASK, self._lease(self.queues.eval_todo.popleft(), worker_id, w, now)
        if self.phase == TRAINING:
            if self._below_minimum():
                return Directive.WAIT, None
            queue = self.queues.train_queue(self.roster.claim_slot(worker_id, self.config.static_slots))
            if queue:
                return Directive.RUN_TASK, self._lease(queue.popleft(), worker_id, w, now)
            late = pick_straggler(self.doing.values(), self.task_times, self.config, worker_id=worker_id, now=now)
            if late is not None:
                self.counters["tasks_reissued"] += 1
                self.events.append(late.event())
                return Directive.RUN_TASK, self._lease(late.lease.task, worker_id, w, now)
        return Directive.WAIT, None

    def _lease(self, task: TaskRange, worker_id: str, w: WorkerInfo, now: float) -> Lease:
        lease = Lease(self.next_lease, task, worker_id, w.incarnation, now)
        self.next_lease += 1
        self.doing[lease.lease] = lease
        return lease

    # ----------------------------------------------------------------------------- workers

    def _below_minimum(self) -> bool:
        """Fewer workers than min_workers: training waits (said once each time it starts waiting)."""
        alive, minimum = self.roster.alive(), self.config.min_workers
        waiting = alive < minimum
        if waiting and not self._waiting_for_workers:
            self.events.append(f"waiting for workers: {alive} of at least {minimum} here; training pauses")
        elif not waiting and self._waiting_for_workers:
            self.events.append(f"{alive} workers here (at least {minimum}): training goes on")
        self._waiting_for_workers = waiting
        return waiting

    def _touch(self, worker_id: str, incarnation: str, now: float) -> WorkerInfo:
        # New to the job, or the replacement of a worker whose pod was preempted or removed.
        joining = worker_id not in self.roster.known or worker_id in self.roster.gone
        w, restarted = self.roster.touch(worker_id, incarnation, now)
        if joining:
            self._note_workers("joined")
        if joining and len(self.ledger) > 0:
            # A worker joined once training had begun (a pod placed when room appeared).
            self.events.append(f"grew to {_count(self.roster.alive(), 'worker')} ({worker_id} joined)")
        if restarted:
            # The same worker id with a new process: the old one died holding its leases.
            self._release_worker(worker_id, failure=True, reason="worker restarted")
        return w

    def _release_worker(self, worker_id: str, *, failure: bool, reason: str) -> None:
        for lease in [x for x in self.doing.values() if x.worker_id == worker_id]:
            self._requeue(lease, failure=failure, reason=reason)

    def heartbeat(self, worker_id: str, incarnation: str, lease: int, progress: int, now: float) -> tuple[int, bool]:
        """(directive, abandon): abandon means the named lease is no longer the worker's."""
        if self.roster.is_gone(worker_id, incarnation):
            return Directive.WAIT, lease != 0
        self._touch(worker_id, incarnation, now)
        held = self.doing.get(lease)
        if held is not None and (held.worker_id, held.incarnation) == (worker_id, incarnation):
            held.progress = max(held.progress, min(max(progress, 0), held.task.records))
        abandon = lease != 0 and (held is None or held.worker_id != worker_id)
        end = self._end_directive()
        return (Directive.RUN_TASK if end is None else end), abandon

    def expire(self, now: float) -> list[str]:
        """Time passes: count the live workers' time, re-queue the leases of silent workers and of
        overdue tasks; returns what happened."""
        self.roster.account_time(now)
        events = []
        for worker_id in self.roster.silent(now, self.config.heartbeat_timeout_s):
            self.counters["workers_lost"] += 1
            events.append(f"worker {worker_id} missed heartbeats")
            self._release_worker(worker_id, failure=True, reason="missed heartbeats")
        timeout = self.task_timeout()
        for lease in list(self.doing.values()):
            if now - lease.started > timeout:
                events.append(f"lease {lease.lease} ({lease.task.task_id}) over {timeout:.0f}s")
                self._requeue(lease, failure=True, reason=f"task timeout {timeout:.0f}s")
        return events

    def worker_left(
        self, worker_id: str, now: float, *, preempted_by: str | None = None, how: str | None = None, pod_uid: str = ""
    ) -> int:
        """The pod watch saw a worker's pod preempted (`preempted_by`: the pod that took its place,
        "" if unknown) or removed by a shrink, an eviction or a deletion (None; `how` says which,
        e.g. "evicted (EvictionByEvictionAPI)"): its leases go back to the front of the queue
        at once, not after a missed heartbeat, and without counting as the tasks' failures; what
        that process still sends is dropped. Returns how many leases were re-queued; the watch
        telling the same twice (the pod's DisruptionTarget, then its deletion) changes nothing."""
        self.roster.account_time(now)
        if not self.roster.leave(worker_id, pod_uid):
            return 0
        n = sum(1 for x in self.doing.values() if x.worker_id == worker_id)
        self._release_worker(worker_id, failure=False, reason="worker left")
        self.counters["workers_left" if preempted_by is None else "preemptions"] += 1
        self._note_workers("preempted" if preempted_by is not None else "left")
        by = f" (by {preempted_by})" if preempted_by else ""
        how = how or ("left (job shrank)" if preempted_by is None else f"preempted{by}")
        left = f"{_count(n, 'task')} re-queued; {_count(self.roster.alive(), 'worker')} left"
        self.events.append(f"worker {worker_id} {how}; {left}")
        return n

    def _note_workers(self, event: str) -> None:
        """A history entry of the workers there now and why it changed, at the current model
        version: the report draws the job's size over its steps and marks the preemptions."""
        entry = {"kind": "workers", "step": self.results.model_version, "workers": self.roster.alive(), "event": event}
        self.results.history.append(entry)

    def drain_events(self) -> list[str]:
        """The one-line events since the last call (preemptions, re-issued tasks), oldest first."""
        out, self.events = self.events, []
        return out

    def task_timeout(self) -> float:
        """ElasticDL's adaptive timeout: max(minimum, factor x the slowest task so far)."""
        c = self.config
        return max(c.min_task_timeout_s, c.task_timeout_factor * self.max_task_seconds)

    # ----------------------------------------------------------------------------- failures

    def forget_lease(self, lease: Lease) -> None:
        """Take `lease` back from its worker; only its own holder may still report it."""
        del self.doing[lease.lease]
        self.released[lease.lease] = lease
        if lease.task.kind == TRAIN and lease.progress:
            # Records trained by an unfinished lease get trained again by the next one.
            self.counters["records_trained"] += lease.progress
            self.counters["records_trained_twice"] += lease.progress

    def _twins(self, lease: Lease) -> list[Lease]:
        """The other leases of the same task (a straggler's backup, or the straggler)."""
        return [x for x in self.doing.values() if x.task.task_id == lease.task.task_id and x.lease != lease.lease]

    def _requeue(self, lease: Lease, *, failure: bool, reason: str) -> None:
        self.forget_lease(lease)
        task = lease.task
        if self._twins(lease):
            return  # another lease of the task carries on with it
        if failure:
            self.counters["tasks_failed"] += 1
            n = self.failures[task.task_id] = self.failures.get(task.task_id, 0) + 1
            if n >= self.config.max_task_failures:
                self._drop(task, reason)
                return
        self.counters["tasks_requeued"] += 1
        self.queues.push_front(task)

    def fail(self, reason: str) -> None:
        """End the job as failed (the first reason stays)."""
        if self.phase != FAILED:
            self.phase = FAILED
            self.failure_reason = reason

    def _drop(self, task: TaskRange, reason: str) -> None:
        c = self.counters
        c["tasks_dropped"] += 1
        if task.kind == EVAL:
            self._closed(self.results.evals.drop(task.task_id))
            return
        self.dropped[task.task_id] = task.records
        c["records_dropped"] += task.records
        limit = self.config.max_dropped_fraction * self.config.records_per_epoch * self.config.epochs
        if c["records_dropped"] > limit and self.phase != FAILED:
            self.phase = FAILED
            self.failure_reason = (
                f"{c['records_dropped']} training records dropped (task {task.task_id} failed "
                f"{self.config.max_task_failures} times, last: {reason}); the limit is "
                f"{self.config.max_dropped_fraction:.1%} of all epochs' records ({limit:.0f})"
            )

    # ----------------------------------------------------------------------------- reports

    def report(
        self,
        *,
        worker_id: str,
        incarnation: str,
        task_id: str,
        lease: int,
        success: bool,
        error: str = "",
        records: int = 0,
        loss_sum: float = 0.0,
        versions: Mapping[int, tuple[int, int]] | None = None,
        eval_result: EvalResult | None = None,
        now: float,
    ) -> tuple[bool, str]:
        """Take a worker's report on a lease; (accepted, note). Idempotent per lease.

        Only the process the lease went to may report it; UnknownTaskError if no such task exists.
        """
        if self.roster.is_gone(worker_id, incarnation):
            # Its leases went back to the queue when its pod went; another worker trains them.
            return False, f"worker {worker_id} left (preempted or removed); its report of {task_id} is dropped"
        held = self.doing.get(lease)
        owner = held if held is not None else self.released.get(lease)
        if owner is None or (owner.worker_id, owner.incarnation, owner.task.task_id) != (
            worker_id,
            incarnation,
            task_id,
        ):
            if not self._task_known(task_id):
                raise UnknownTaskError(f"task_id: got {task_id!r}; no such task in this job")
            entry = self.ledger.get(task_id)
            if success and entry is not None and entry.lease == lease:
                return True, "already counted"  # a retried report (its answer was lost): changes nothing
            return False, f"lease {lease} of task {task_id} is not held by worker {worker_id} (this process); refused"
        self._touch(worker_id, incarnation, now)
        reason = divergence(task_id, worker_id, loss_sum=loss_sum, eval_result=eval_result, error=error)
        if reason is not None:
            if held is not None:
                self.forget_lease(held)
            self.fail(reason)
            return False, reason
        if not success:
            if held is None:
                return False, "lease no longer held; failure ignored"
            self._requeue(held, failure=True, reason=error or "worker reported failure")
            return True, "dropped" if task_id in self.dropped else "re-queued"
        task: TaskRange | None
        if held is not None:
            problem = count_problem(held.task, records=records, eval_result=eval_result)
            if problem is not None:
                self._requeue(held, failure=True, reason=problem)
                return False, f"{problem}; re-queued"
            del self.doing[lease]
            task, counted = held.task, 0
            self.max_task_seconds = max(self.max_task_seconds, now - held.started)
            if task.kind == TRAIN:
                self.task_times.add(now - held.started)
            for twin in self._twins(held):
                self.forget_lease(twin)  # the first result counts; the other lease is told to abandon
        else:
            # The master took the lease back meanwhile (timeout, worker restart): its own late report.
            problem = count_problem(owner.task, records=records, eval_result=eval_result)
            if problem is not None:
                return False, problem
            del self.released[lease]
            task, counted = self._take_back(task_id), owner.progress

        if task_id.startswith(EVAL):
            if eval_result is not None:
                self._closed(self.results.evals.record(task_id, eval_result))
            return True, "evaluated"
        accepted, note = self._report_train(task, task_id, lease, records, counted, loss_sum, dict(versions or {}))
        if note == "done":
            self.workers[worker_id].records_trained += records
        return accepted, note

    def _task_known(self, task_id: str) -> bool:
        """Whether `task_id` names a task of this job that was ever cut."""
        if task_id in self.ledger or task_id in self.dropped or self.queues.holds(task_id):
            return True
        if task_id.startswith(EVAL):
            try:
                return 0 < self.results.evals.round_of(task_id) < self.results.evals.next_round
            except (IndexError, ValueError):
                return False
        return any(x.task.task_id == task_id for x in (*self.doing.values(), *self.released.values()))

    def _take_back(self, task_id: str) -> TaskRange | None:
        """A task re-queued, re-leased or dropped meanwhile, reclaimed for a late report that finishes it."""
        task = self.queues.remove(task_id)
        if task is not None:
            return task
        for other in list(self.doing.values()):
            if other.task.task_id == task_id:
                self.forget_lease(other)  # its worker is told to abandon at its next heartbeat
                return other.task
        if task_id in self.dropped:
            self.counters["records_dropped"] -= self.dropped.pop(task_id)
            self.counters["tasks_dropped"] -= 1
            return task_from_id(task_id)
        return None

    def _report_train(
        self,
        task: TaskRange | None,
        task_id: str,
        lease: int,
        records: int,
        counted: int,
        loss_sum: float,
        versions: dict[int, tuple[int, int]],
    ) -> tuple[bool, str]:
        """`counted`: the records of this lease already counted as trained when it was taken back."""
        c = self.counters
        if task is None:
            if task_id not in self.ledger:
                return False, f"unknown task {task_id}"
            c["records_trained"] += records - counted
            c["records_trained_twice"] += records - counted
            c["duplicate_reports"] += 1
            return True, "duplicate: the task was already done"
        c["records_trained"] += records - counted
        entry = DoneEntry(lease, records, versions)
        if self.ledger.lost(entry):
            c["tasks_retrained_after_ps_restore"] += 1
            c["records_trained_twice"] += records - counted
            self.queues.push_front(task)
            return True, "re-queued: a PS shard restarted from a checkpoint older than this update"
        self.ledger.add(task_id, entry)
        c["records_trained_twice"] -= counted  # taken back as to be trained again; this report trained them
        self.failures.pop(task_id, None)
        c["tasks_done"] += 1
        self.results.add_trained(task.epoch, loss_sum, records, versions, tasks_per_point=self._tasks_per_point)
        epoch = task.epoch
        if epoch not in self.results.epochs_logged and self.ledger.done_in_epoch(epoch) >= self._tasks_per_epoch:
            self.results.log_epoch(epoch)
        return True, "done"

    # ----------------------------------------------------------------------------- PS restarts

    def note_ps_state(self, shard: int, restored_versions: Sequence[int], checkpointed_version: int) -> int:
        """A shard's generation record and newest checkpoint: re-queue finished tasks whose
        updates a restart lost, fold the durable ones; returns how many were re-queued. A restart
        seen (a generation past the one known, and past the first) is an event, whatever it lost:
        the master may first reach a shard after its restart (its channel still backing off)."""
        known = len(self.ledger.ps_history.get(shard, []))
        lost = self.ledger.note_ps_state(shard, restored_versions, checkpointed_version)
        slots = self.queues.slots_by_id() if lost and self.config.static_slots else {}
        for tid, entry in lost:
            self.counters["tasks_retrained_after_ps_restore"] += 1
            self.counters["records_trained_twice"] += entry.records
            self.counters["tasks_done"] -= 1
            self.queues.push_front(task_from_id(tid, slots.get(tid, -1)))
        if max(known, 1) < len(restored_versions):
            self.events.append(restart_event(shard, restored_versions, requeued=len(lost)))
        return len(lost)

    # ----------------------------------------------------------------------------- evaluation

    def start_round(self, *, version: int, final: bool, epoch: int | None = None) -> int:
        """Cut the test split into a new evaluation round (its tasks go out before training);
        `epoch`: the finished epoch it evaluates (default: the newest one handed out)."""
        rid = self.queues.open_eval_round(self.results.evals, version=version, final=final, epoch=epoch)
        if final:
            self.phase = FINAL_EVAL
        return rid

    def _closed(self, r: EvalRound | None) -> None:
        if self.results.close_round(r) and self.phase == FINAL_EVAL:
            self.phase = FINISHING


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
