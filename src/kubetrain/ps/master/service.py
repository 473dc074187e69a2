"""The master's gRPC service: GetJobInfo, GetTask, ReportTask, Heartbeat over one TaskBook.

Every handler takes the one lock, changes the book and, if anything that must survive a restart
changed, writes the whole state before answering: a worker never hears of a lease or an
accepted report that a restarted master would not know.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from kubetrain.errors import KubetrainError, SpecError
from kubetrain.ps.common.errors import UnknownTaskError
from kubetrain.ps.common.evaluation import EvalResult
from kubetrain.ps.common.tasks import EVAL, Directive, Lease, task_from_id
from kubetrain.ps.master.state import StateStore, book_to_json
from kubetrain.ps.master.taskbook import TaskBook
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc

__all__ = ["JobSettings", "MasterCore", "MasterServicer"]

log = logging.getLogger("kubetrain.ps.master")
T = TypeVar("T")


@dataclass(frozen=True)
class JobSettings:
    """What workers learn from GetJobInfo."""

    model: str
    model_args_json: str
    batch_size: int
    mode: str
    num_ps: int
    seed: int
    heartbeat_interval_s: float
    sync_retries: int


class MasterCore:
    """The book, its lock, the state store and wall-clock times, shared by service and loop."""

    def __init__(self, book: TaskBook, store: StateStore, times: dict[str, float]) -> None:
        self.book = book
        self.store = store
        self.times = times
        self.lock = threading.RLock()
        self.told_end: set[str] = set()
        self.fatal: BaseException | None = None

    def _signature(self) -> tuple[Any, ...]:
        b = self.book
        return (
            b.phase,
            b.next_lease,
            len(b.doing),
            tuple(b.counters.values()),
            len(b.ledger.open),
            len(b.queues.todo),
            len(b.queues.eval_todo),
            len(b.workers),
        )

    def mutate(self, fn: Callable[[TaskBook], T], *, always_save: bool = False) -> T:
        """Run `fn(book)` under the lock and persist if the book changed."""
        with self.lock:
            before = self._signature()
            result = fn(self.book)
            if always_save or self._signature() != before:
                self.save()
            return result

    def save(self) -> None:
        """Write the state now (caller holds the lock)."""
        try:
            self.store.save({"book": book_to_json(self.book), "times": self.times})
        except KubetrainError as e:  # CheckpointError / StaleStateError: stop serving
            self.fatal = e
            raise


def _task_msg(lease: Lease) -> pb.Task:
    t = lease.task
    return pb.Task(
        task_id=t.task_id,
        lease=lease.lease,
        kind=pb.EVALUATE if t.kind == EVAL else pb.TRAIN,
        epoch=t.epoch,
        split=t.split,
        shard=t.shard,
        start=t.start,
        end=t.end,
        eval_round=t.eval_round,
    )


class MasterServicer(pb_grpc.MasterServicer):  # type: ignore[misc]
    """The master's RPCs."""

    def __init__(self, core: MasterCore, settings: JobSettings) -> None:
        self._core = core
        self._settings = settings

    def _guard(self, context: grpc.ServicerContext, worker: pb.WorkerRef | None = None) -> None:
        if self._core.fatal is not None:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"master stopping: {self._core.fatal}")
        if worker is not None and not (worker.worker_id and worker.incarnation):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "worker: worker_id and incarnation are required")

    def GetJobInfo(self, request: pb.WorkerRef, context: grpc.ServicerContext) -> pb.JobInfo:  # noqa: N802 - gRPC method name
        """The model, batch size and mode every worker uses."""
        del request
        self._guard(context)
        s = self._settings
        return pb.JobInfo(
            model=s.model,
            batch_size=s.batch_size,
            mode=s.mode,
            num_ps=s.num_ps,
            seed=s.seed,
            heartbeat_interval_s=s.heartbeat_interval_s,
            model_args_json=s.model_args_json,
            sync_retries=s.sync_retries,
        )

    def GetTask(self, request: pb.WorkerRef, context: grpc.ServicerContext) -> pb.GetTaskResponse:  # noqa: N802 - gRPC method name
        """The next task, or wait / the job's end."""
        self._guard(context, request)
        now = time.monotonic()

        def fn(book: TaskBook) -> tuple[int, Lease | None]:
            return book.get_task(request.worker_id, request.incarnation, now)

        directive, lease = self._core.mutate(fn)
        if directive in (Directive.JOB_DONE, Directive.JOB_FAILED):
            self._core.told_end.add(request.worker_id)
        if lease is None:
            return pb.GetTaskResponse(
                directive=directive,
                retry_after_s=0.2,
                message=self._core.book.failure_reason,
            )
        with self._core.lock:
            self._core.times.setdefault("first_task_at", time.time())
        return pb.GetTaskResponse(directive=pb.RUN_TASK, task=_task_msg(lease))

    def ReportTask(  # noqa: N802 - gRPC method name
        self, request: pb.ReportTaskRequest, context: grpc.ServicerContext
    ) -> pb.ReportTaskResponse:
        """A task's outcome; idempotent per lease. NOT_FOUND for a task the job never had."""
        self._guard(context, request.worker)
        problem = _report_problem(request)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        now = time.monotonic()
        versions = {int(v.shard): (int(v.generation), int(v.version)) for v in request.shard_versions}
        result = None
        if request.HasField("eval"):
            e = request.eval
            result = EvalResult(
                float(e.loss_sum),
                int(e.correct),
                int(e.count),
                tuple(float(x) for x in e.scores),
                tuple(int(x) for x in e.labels),
            )

        def fn(book: TaskBook) -> tuple[bool, str]:
            return book.report(
                worker_id=request.worker.worker_id,
                incarnation=request.worker.incarnation,
                task_id=request.task_id,
                lease=int(request.lease),
                success=request.success,
                error=request.error,
                records=int(request.records),
                loss_sum=float(request.loss_sum),
                versions=versions,
                eval_result=result,
                now=now,
            )

        try:
            accepted, note = self._core.mutate(fn, always_save=True)
        except UnknownTaskError as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        if not request.success:
            log.warning(
                "worker %s failed %s: %s -> %s",
                request.worker.worker_id,
                request.task_id,
                request.error,
                note,
            )
        return pb.ReportTaskResponse(accepted=accepted, note=note)

    def Heartbeat(  # noqa: N802 - gRPC method name
        self, request: pb.HeartbeatRequest, context: grpc.ServicerContext
    ) -> pb.HeartbeatResponse:
        """Liveness and progress; tells a worker to drop a lease it no longer holds."""
        self._guard(context, request.worker)
        if request.lease < 0 or request.records_done < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "lease and records_done must be >= 0")
        now = time.monotonic()

        def fn(book: TaskBook) -> tuple[int, bool]:
            return book.heartbeat(
                request.worker.worker_id,
                request.worker.incarnation,
                int(request.lease),
                int(request.records_done),
                now,
            )

        directive, abandon = self._core.mutate(fn)
        if directive in (Directive.JOB_DONE, Directive.JOB_FAILED):
            self._core.told_end.add(request.worker.worker_id)
        return pb.HeartbeatResponse(directive=directive, abandon_lease=abandon)


def _report_problem(request: pb.ReportTaskRequest) -> str:
    """What makes a report malformed ("" when nothing)."""
    if request.lease < 1:
        return f"lease: got {request.lease}; expected the lease number GetTask gave (>= 1)"
    try:
        task_from_id(request.task_id)
    except SpecError as bad_id:
        return str(bad_id)
    if request.records < 0:
        return f"records: got {request.records}; expected >= 0"
    if request.HasField("eval"):
        e = request.eval
        if e.count < 0 or not 0 <= e.correct <= e.count:
            return f"eval: got correct={e.correct} of count={e.count}; expected 0 <= correct <= count"
        if len(e.scores) != len(e.labels):
            return f"eval: {len(e.scores)} scores but {len(e.labels)} labels"
    return ""
