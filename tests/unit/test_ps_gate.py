"""The harness's gate in front of the master: held workers get WAIT and stay alive; all else passes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kubetrain.ps.common.rpc import make_channel, make_server
from kubetrain.ps.common.tasks import BookConfig
from kubetrain.ps.harness.gate import MasterGate
from kubetrain.ps.harness.localrun import free_port
from kubetrain.ps.master.service import JobSettings, MasterCore, MasterServicer
from kubetrain.ps.master.state import StateStore
from kubetrain.ps.master.taskbook import TaskBook
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"
TOKEN = "t" * 64
SETTINGS = JobSettings(
    model="mlp", model_args_json="{}", batch_size=8, mode="async", num_ps=1, seed=0,
    heartbeat_interval_s=0.5, sync_retries=4,
)  # fmt: skip


@pytest.fixture
def master(tmp_path: Path) -> Iterator[tuple[str, MasterCore]]:
    """The real master service over a book of 4 tasks, in this process."""
    config = BookConfig(epochs=1, records_per_task=10, train_shards=(40,), test_shards=(10,), eval_records_per_task=10)
    store = StateStore(tmp_path)
    store.claim()
    core = MasterCore(TaskBook(config=config), store, {})
    server = make_server(token=TOKEN)
    pb_grpc.add_MasterServicer_to_server(MasterServicer(core, SETTINGS), server)
    port = free_port(HOST)
    server.add_insecure_port(f"{HOST}:{port}")
    server.start()
    yield f"{HOST}:{port}", core
    server.stop(grace=None).wait()


def _ref(worker: str) -> pb.WorkerRef:
    return pb.WorkerRef(worker_id=worker, incarnation="i1")


def test_a_held_worker_waits_heartbeating_and_takes_work_once_released(master: tuple[str, MasterCore]) -> None:
    addr, core = master
    gate = MasterGate(addr, HOST, token=TOKEN)
    try:
        with make_channel(gate.addr, token=TOKEN) as channel:
            stub = pb_grpc.MasterStub(channel)
            gate.hold("w0")
            assert stub.GetJobInfo(_ref("w0"), timeout=10).batch_size == 8  # forwarded while held
            assert stub.GetTask(_ref("w0"), timeout=10).directive == pb.WAIT
            assert stub.Heartbeat(pb.HeartbeatRequest(worker=_ref("w0")), timeout=10).directive == pb.RUN_TASK
            # The master knows the held worker alive, but was never asked for work for it.
            assert not core.book.doing and core.book.next_lease == 1
            assert core.book.workers["w0"].alive
            assert gate.tasks_given("w0") == 0

            other = stub.GetTask(_ref("w1"), timeout=10)  # a worker not held is not delayed
            assert other.directive == pb.RUN_TASK and gate.tasks_given("w1") == 1
            assert len(core.book.queues.todo) == 3  # work is queued, and w0 is still held from it
            assert stub.GetTask(_ref("w0"), timeout=10).directive == pb.WAIT

            gate.release("w0")
            resp = stub.GetTask(_ref("w0"), timeout=10)
            assert resp.directive == pb.RUN_TASK and core.book.doing[resp.task.lease].worker_id == "w0"
            assert gate.tasks_given("w0") == 1
            report = pb.ReportTaskRequest(
                worker=_ref("w0"), task_id=resp.task.task_id, lease=resp.task.lease, success=True, records=10
            )
            assert stub.ReportTask(report, timeout=10).accepted  # the report reaches the master
            assert core.book.counters["tasks_done"] == 1
    finally:
        gate.close()


def test_a_master_that_is_down_is_unavailable_through_the_gate() -> None:
    # The worker must hear UNAVAILABLE (retried through a master restart), not some other error.
    gate = MasterGate(f"{HOST}:{free_port(HOST)}", HOST, token=TOKEN)
    try:
        with make_channel(gate.addr, token=TOKEN) as channel, pytest.raises(grpc.RpcError) as info:
            pb_grpc.MasterStub(channel).GetJobInfo(_ref("w0"), timeout=10)
        assert isinstance(info.value, grpc.Call) and info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        gate.close()
