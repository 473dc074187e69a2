"""A gate in front of the master: tests decide when a worker may take its next task.

Fault tests need a state of the job, not a race towards it: "the replacement worker registers
while work is still queued" must hold however slowly a loaded machine starts a process. A
worker pointed at the gate instead of the master is a normal worker: every call is forwarded
as it is (its heartbeats keep it alive, its reports are counted), except that while the worker
is held its GetTask is answered WAIT, as the master answers when it has nothing to hand out, so
the held worker finishes the task it has and then waits, heartbeating. Releasing it lets its
next GetTask through. The gate counts the tasks the master handed to each worker through it, so
a test can wait for "this worker has work" as an event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import grpc

from kubetrain.ps.common.rpc import bind, make_channel, make_server
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc

__all__ = ["MasterGate"]

T = TypeVar("T")
# How soon a held worker asks again; short, so that a release takes effect at once.
HELD_RETRY_S = 0.1
# A forwarded call without a deadline of its own gets this one (the workers all set one).
FORWARD_TIMEOUT_S = 30.0


class _Forwarder(pb_grpc.MasterServicer):  # type: ignore[misc]
    """The Master service, forwarded to the real master except for held workers' GetTask."""

    def __init__(
        self, master: pb_grpc.MasterStub, is_held: Callable[[str], bool], handed: Callable[[str], None]
    ) -> None:
        self._master = master
        self._is_held = is_held
        self._handed = handed

    def _forward(self, call: Callable[..., T], request: object, context: grpc.ServicerContext) -> T:
        left = context.time_remaining()
        try:
            return call(request, timeout=FORWARD_TIMEOUT_S if left is None else max(0.1, left))
        except grpc.RpcError as e:
            # The worker must see what the master said (UNAVAILABLE while it restarts: retried).
            code = e.code() if isinstance(e, grpc.Call) else grpc.StatusCode.UNAVAILABLE
            details = e.details() if isinstance(e, grpc.Call) else repr(e)
            context.abort(code, details or "")
            raise  # abort raises; this line only tells type checkers the call does not return

    def GetJobInfo(self, request: pb.WorkerRef, context: grpc.ServicerContext) -> pb.JobInfo:  # noqa: N802 - gRPC method name
        """Forwarded."""
        return self._forward(self._master.GetJobInfo, request, context)

    def GetTask(self, request: pb.WorkerRef, context: grpc.ServicerContext) -> pb.GetTaskResponse:  # noqa: N802 - gRPC method name
        """WAIT while the worker is held, else forwarded."""
        if self._is_held(request.worker_id):
            return pb.GetTaskResponse(directive=pb.WAIT, retry_after_s=HELD_RETRY_S, message="held by the test")
        resp: pb.GetTaskResponse = self._forward(self._master.GetTask, request, context)
        if resp.directive == pb.RUN_TASK:
            self._handed(request.worker_id)
        return resp

    def ReportTask(  # noqa: N802 - gRPC method name
        self, request: pb.ReportTaskRequest, context: grpc.ServicerContext
    ) -> pb.ReportTaskResponse:
        """Forwarded."""
        return self._forward(self._master.ReportTask, request, context)

    def Heartbeat(  # noqa: N802 - gRPC method name
        self, request: pb.HeartbeatRequest, context: grpc.ServicerContext
    ) -> pb.HeartbeatResponse:
        """Forwarded: a held worker stays alive in the master's books."""
        return self._forward(self._master.Heartbeat, request, context)


class MasterGate:
    """A Master service on `host` (a free port) forwarding to `master_addr`; workers held by id."""

    def __init__(self, master_addr: str, host: str, *, token: str) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()
        self._given: dict[str, int] = {}
        # One of the job's processes: it needs the job's token from its workers and shows it the master.
        self._channel = make_channel(master_addr, token=token)
        self._server = make_server(token=token)
        forwarder = _Forwarder(pb_grpc.MasterStub(self._channel), self.is_held, self._count)
        pb_grpc.add_MasterServicer_to_server(forwarder, self._server)
        self.addr = f"{host}:{bind(self._server, host, 0)}"
        self._server.start()

    def hold(self, worker_id: str) -> None:
        """From now on, answer the worker's GetTask with WAIT (its current task goes on)."""
        with self._lock:
            self._held.add(worker_id)

    def release(self, worker_id: str) -> None:
        """Let the worker's next GetTask through to the master."""
        with self._lock:
            self._held.discard(worker_id)

    def is_held(self, worker_id: str) -> bool:
        """Whether the worker is held now."""
        with self._lock:
            return worker_id in self._held

    def tasks_given(self, worker_id: str) -> int:
        """How many tasks the master has handed to the worker through the gate so far."""
        with self._lock:
            return self._given.get(worker_id, 0)

    def _count(self, worker_id: str) -> None:
        with self._lock:
            self._given[worker_id] = self._given.get(worker_id, 0) + 1

    def close(self) -> None:
        """Stop serving and drop the channel to the master."""
        self._server.stop(grace=None).wait()
        self._channel.close()
