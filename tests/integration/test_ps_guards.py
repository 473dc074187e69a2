"""The PS servers against malformed and hostile calls, over real gRPC on loopback (issue 33, items 4, 10).

A shard and a master are served in this process; clients call them as a pod of the namespace
could. Malformed requests get INVALID_ARGUMENT (NOT_FOUND for an unknown task) with a message,
never UNKNOWN; every call but a health check needs the job's token (UNAUTHENTICATED without
it, whatever the call); a report counts only from the process
holding the lease with the task's exact record count; a diverging model fails the job.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kubetrain.data.download import download
from kubetrain.manifests.kinds import PS_FINAL_EXIT_CODE
from kubetrain.ps.common.jobtoken import ensure_token, token_metadata
from kubetrain.ps.common.optimizers import OptimizerSpec
from kubetrain.ps.common.rpc import HealthReporter, bind, make_channel, make_server
from kubetrain.ps.common.tasks import FAILED, BookConfig
from kubetrain.ps.common.tensors import to_tensor
from kubetrain.ps.harness.localrun import LocalPSJob, free_port
from kubetrain.ps.master.service import JobSettings, MasterCore, MasterServicer
from kubetrain.ps.master.state import StateStore
from kubetrain.ps.master.taskbook import TaskBook
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc
from kubetrain.ps.server.main import ParameterServerServicer, _Checkpointer
from kubetrain.ps.server.store import ParameterShard, ShardConfig

HOST = "127.0.0.1"


class Shard:
    """One shard served on loopback, initialised with w (2x2) and b (2)."""

    def __init__(self, tmp: Path) -> None:
        self.token = ensure_token(tmp / "job-token")
        self.stop = threading.Event()
        shard = ParameterShard(ShardConfig(0, 1, optimizer=OptimizerSpec("sgd", lr=0.1)))
        self.servicer = ParameterServerServicer(shard, stop=self.stop, checkpointer=_Checkpointer(tmp / "ckpt", keep=2))
        self.server = make_server(4, token=self.token)
        HealthReporter(self.server).serving()
        pb_grpc.add_ParameterServerServicer_to_server(self.servicer, self.server)
        port = bind(self.server, HOST, free_port(HOST))
        self.server.start()
        self.servicer.set_ready([-1])
        self.addr = f"{HOST}:{port}"
        self.channel = make_channel(self.addr, token=self.token)
        self.stub = pb_grpc.ParameterServerStub(self.channel)
        self.stub.InitModel(
            pb.InitModelRequest(dense=[to_tensor("w", np.ones((2, 2))), to_tensor("b", np.zeros(2))]), timeout=10
        )

    def close(self) -> None:
        self.channel.close()
        self.server.stop(None)


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[Shard]:
    s = Shard(tmp_path)
    yield s
    s.close()


def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


def _push(**kw: Any) -> pb.PushRequest:
    base: dict[str, Any] = {
        "worker_id": "w0",
        "version": 0,
        "generation": 1,
        "batch_size": 4,
        "dense_grads": [to_tensor("w", np.full((2, 2), 0.5))],
    }
    base.update(kw)
    return pb.PushRequest(**base)


def _raw(name: str, shape: list[int], nbytes: int) -> pb.Tensor:
    return pb.Tensor(name=name, shape=shape, data=b"\0" * nbytes)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (_push(dense_grads=[_raw("w", [2, 2], 15)]), "15 bytes for shape (2, 2); expected 16"),
        (_push(dense_grads=[_raw("w", [-2, -2], 16)]), "shape (-2, -2); expected sizes >= 0"),
        (_push(dense_grads=[_raw("w", [2**62, 2**62, 4], 16)]), "16 bytes for shape (4611686018427387904, 4611686018427387904, 4)"),
        (_push(dense_grads=[to_tensor("w", np.full((2, 2), np.nan))]), "tensor w: got '4 non-finite values'"),
        (_push(dense_grads=[to_tensor("w", np.ones((2, 2))), to_tensor("w", np.ones((2, 2)))]), "dense_grads: got ['w']"),
        (_push(batch_size=-1), "batch_size: got -1; expected >= 0"),
        (_push(version=5), "version: got 5; expected a version this shard has had (0..0)"),
        (_push(dense_grads=[to_tensor("nope", np.ones(2))]), "dense gradient: got 'nope'"),
    ],
)  # fmt: skip
def test_a_malformed_push_is_invalid_argument_with_a_message(
    shard: Shard, request_: pb.PushRequest, message: str
) -> None:
    code, details = _code(lambda: shard.stub.Push(request_, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert message in details
    # Nothing was applied: the parameters are as initialised.
    state = shard.stub.GetState(pb.GetStateRequest(), timeout=10)
    assert state.version == 0


def test_a_malformed_init_or_pull_is_invalid_argument(tmp_path: Path) -> None:
    s = Shard(tmp_path)
    try:
        bad_inits = [
            pb.InitModelRequest(dense=[to_tensor("x", np.ones(2)), to_tensor("x", np.ones(2))]),
            pb.InitModelRequest(dense=[to_tensor("x", np.array([np.inf, 1.0]))]),
            pb.InitModelRequest(dense=[_raw("x", [3], 4)]),
        ]
        for req in bad_inits:
            code, details = _code(lambda req=req: s.stub.InitModel(req, timeout=10))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details, details
        pull = pb.PullRequest(embeddings=[pb.SparseIds(table="t", ids=[1]), pb.SparseIds(table="t", ids=[2])])
        code, details = _code(lambda: s.stub.Pull(pull, timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "embeddings" in details
    finally:
        s.close()


def test_a_good_push_still_lands(shard: Shard) -> None:
    answer = shard.stub.Push(_push(), timeout=10)
    assert answer.accepted and answer.applied_version == 1


SHARD_CALLS = [
    ("InitModel", pb.InitModelRequest(dense=[to_tensor("x", np.ones(2))])),
    ("Pull", pb.PullRequest(dense=True)),
    ("Push", _push()),
    ("Flush", pb.FlushRequest()),
    ("DumpModel", pb.DumpModelRequest()),
    ("GetState", pb.GetStateRequest()),
    ("Shutdown", pb.ShutdownRequest(reason="intruder")),
]
# No token, another job's token, the right one cut short, the right one under another key.
WRONG = ["none", "other", "prefix", "other-key"]


def _wrong_metadata(kind: str, token: str) -> tuple[tuple[str, str], ...]:
    return {
        "none": (),
        "other": token_metadata("f" * 64),
        "prefix": token_metadata(token[:-1]),
        "other-key": (("authorization", f"Bearer {token}"),),
    }[kind]


def _refused(channel: grpc.Channel, service: str, method: str, request: Any, metadata: Any) -> None:
    call = channel.unary_unary(
        f"/kubetrain.ps.{service}/{method}",
        request_serializer=type(request).SerializeToString,
        response_deserializer=lambda b: b,
    )
    code, details = _code(lambda: call(request, timeout=10, metadata=metadata))
    assert code == grpc.StatusCode.UNAUTHENTICATED, details
    # One line naming the call, and nothing of what was sent.
    assert (
        details == f"/kubetrain.ps.{service}/{method}: missing or wrong job token; only the job's own pods may call it"
    )


@pytest.mark.parametrize("wrong", WRONG)
@pytest.mark.parametrize(("method", "request_"), SHARD_CALLS, ids=[m for m, _ in SHARD_CALLS])
def test_every_shard_call_without_the_jobs_token_is_unauthenticated(
    shard: Shard, method: str, request_: Any, wrong: str
) -> None:
    with grpc.insecure_channel(shard.addr) as intruder:
        _refused(intruder, "ParameterServer", method, request_, _wrong_metadata(wrong, shard.token))
    # Nothing happened: the shard runs on, at version 0, as initialised.
    assert not shard.stop.is_set()
    state = shard.stub.GetState(pb.GetStateRequest(), timeout=10)
    assert state.version == 0
    dense = {t.name for t in shard.stub.Pull(pb.PullRequest(dense=True), timeout=10).dense}
    assert dense == {"w", "b"}


def test_with_the_jobs_token_flush_and_shutdown_work_and_health_needs_none(shard: Shard) -> None:
    with grpc.insecure_channel(shard.addr) as bare:
        health = health_pb2_grpc.HealthStub(bare).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING  # the kubelet's probes send no token
    shard.stub.Flush(pb.FlushRequest(), timeout=10)
    shard.stub.Shutdown(pb.ShutdownRequest(reason="test"), timeout=10)
    assert shard.stop.is_set()


class Master:
    """A master's service over a 2-epoch book of 100 records in tasks of 50."""

    def __init__(self, tmp: Path) -> None:
        config = BookConfig(epochs=1, records_per_task=50, train_shards=(100,), test_shards=(20,),
                            eval_records_per_task=20, heartbeat_timeout_s=60, min_task_timeout_s=60)  # fmt: skip
        self.book = TaskBook(config=config)
        store = StateStore(tmp / "state")
        store.claim()
        self.core = MasterCore(self.book, store, {"started_at": time.time()})
        settings = JobSettings("mlp", "{}", 32, "async", 1, 0, 1.0, 8)
        self.token = ensure_token(tmp / "job-token")
        self.server = make_server(4, token=self.token)
        pb_grpc.add_MasterServicer_to_server(MasterServicer(self.core, settings), self.server)
        port = bind(self.server, HOST, free_port(HOST))
        self.server.start()
        self.addr = f"{HOST}:{port}"
        self.channel = make_channel(self.addr, token=self.token)
        self.stub = pb_grpc.MasterStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.server.stop(None)


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path)
    yield m
    m.close()


W0 = pb.WorkerRef(worker_id="w0", incarnation="a1b2")

MASTER_CALLS = [
    ("GetJobInfo", W0),
    ("GetTask", W0),
    ("ReportTask", pb.ReportTaskRequest(worker=W0, task_id="train/e0/train/s0/0-50", lease=1, success=True, records=0)),
    ("Heartbeat", pb.HeartbeatRequest(worker=W0, lease=1, records_done=50)),
]


@pytest.mark.parametrize("wrong", WRONG)
@pytest.mark.parametrize(("method", "request_"), MASTER_CALLS, ids=[m for m, _ in MASTER_CALLS])
def test_every_master_call_without_the_jobs_token_is_unauthenticated(
    master: Master, method: str, request_: Any, wrong: str
) -> None:
    task = master.stub.GetTask(W0, timeout=10).task  # the job's own worker holds a lease
    with grpc.insecure_channel(master.addr) as intruder:
        _refused(intruder, "Master", method, request_, _wrong_metadata(wrong, master.token))
    # The intruder changed nothing: the lease is still held, no task is done, no worker was added.
    assert [lease.task.task_id for lease in master.book.doing.values()] == [task.task_id]
    assert master.book.counters["tasks_done"] == 0
    assert set(master.book.workers) == {"w0"}


def _report(task: pb.Task, worker: pb.WorkerRef = W0, **kw: Any) -> pb.ReportTaskRequest:
    base: dict[str, Any] = {
        "success": True,
        "records": task.end - task.start,
        "loss_sum": 0.5 * (task.end - task.start),
    }
    base.update(kw)
    return pb.ReportTaskRequest(worker=worker, task_id=task.task_id, lease=task.lease, **base)


def test_a_report_counts_only_from_the_lease_holder_with_every_record(master: Master) -> None:
    task = master.stub.GetTask(W0, timeout=10).task
    held = dict(master.book.doing)
    # Another pod, or the same worker id from another process, claiming the task done: refused.
    for other in (pb.WorkerRef(worker_id="intruder", incarnation="x"), pb.WorkerRef(worker_id="w0", incarnation="x")):
        answer = master.stub.ReportTask(_report(task, other), timeout=10)
        assert not answer.accepted and "not held by worker" in answer.note
        assert master.book.doing == held
        failed = master.stub.ReportTask(_report(task, other, success=False, error="x"), timeout=10)
        assert not failed.accepted and master.book.doing == held
    # The holder with records=0: refused, and the task goes back to the queue.
    answer = master.stub.ReportTask(_report(task, records=0), timeout=10)
    assert not answer.accepted and "reported 0 records; the task has 50" in answer.note
    assert not master.book.doing and master.book.queues.todo[0].task_id == task.task_id
    assert master.book.counters["tasks_done"] == 0
    # Done properly, it counts; the client that trained nothing is not in world_size.
    task = master.stub.GetTask(W0, timeout=10).task
    assert master.stub.ReportTask(_report(task), timeout=10).accepted
    master.stub.GetTask(pb.WorkerRef(worker_id="idle", incarnation="i"), timeout=10)
    assert [k for k, w in master.book.workers.items() if w.records_trained] == ["w0"]


def test_a_preempted_workers_calls_are_answered_as_gone_and_its_task_goes_to_another(master: Master) -> None:
    task = master.stub.GetTask(W0, timeout=10).task
    # What the pod watch does when the API server marks w0's pod DisruptionTarget (preempted).
    assert master.core.mutate(lambda b: b.worker_left("w0", time.monotonic(), preempted_by="online/web-1")) == 1
    assert json.loads(master.core.store.path.read_text(encoding="utf-8"))["book"]["gone"] == {"w0": W0.incarnation}
    # w0's process, still running in its grace period: told to abandon, given nothing, its result dropped.
    beat = master.stub.Heartbeat(pb.HeartbeatRequest(worker=W0, lease=task.lease, records_done=20), timeout=10)
    assert beat.abandon_lease
    assert not master.stub.GetTask(W0, timeout=10).HasField("task")
    answer = master.stub.ReportTask(_report(task), timeout=10)
    assert not answer.accepted and "preempted or removed" in answer.note
    # Another worker gets the same task at once and its report counts.
    w1 = pb.WorkerRef(worker_id="w1", incarnation="c3d4")
    again = master.stub.GetTask(w1, timeout=10).task
    assert again.task_id == task.task_id and again.lease != task.lease
    assert master.stub.ReportTask(_report(again, w1), timeout=10).accepted
    assert master.book.counters["tasks_done"] == 1 and master.book.counters["preemptions"] == 1


def test_an_unknown_task_or_a_malformed_report_is_refused_with_a_status(master: Master) -> None:
    master.stub.GetTask(W0, timeout=10)
    bad = pb.ReportTaskRequest(worker=W0, task_id="train/e9/train/s0/0-50", lease=1, success=True, records=50)
    code, details = _code(lambda: master.stub.ReportTask(bad, timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND and "no such task" in details
    for req in (
        pb.ReportTaskRequest(worker=W0, task_id="x", lease=-1, success=True),
        pb.ReportTaskRequest(worker=W0, task_id="x", lease=1, records=-5, success=True),
        pb.ReportTaskRequest(worker=pb.WorkerRef(), task_id="x", lease=1, success=True),
    ):
        code, details = _code(lambda req=req: master.stub.ReportTask(req, timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details
    code, _ = _code(lambda: master.stub.Heartbeat(pb.HeartbeatRequest(worker=W0, lease=-1), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# Ids no GetTask ever gave: not a task id at all, or one naming a shard, an epoch or a range of
# no task (a shard past the data set's, an eval round's test shard past the training shards).
ODD_TASK_IDS = ["x", "a/b/c/d/e", "train/eX/train/s0/0-50", "train/e0/train/s-1/0-50", "train/e0/train/s0/50-0",
                "train/e0/train/s0/0-50/", "train/e0/train/s0/0-5" + "0" * 40, "train/e0/train/s0/0-50 "]  # fmt: skip
UNKNOWN_TASK_IDS = ["train/e0/train/s99/0-50", "train/e9/train/s0/0-50", "eval/r1/test/s7/0-20",
                    "train/e0/test/s0/0-50", "eval/r0/train/s0/0-50"]  # fmt: skip


@pytest.mark.parametrize("task_id", ODD_TASK_IDS + UNKNOWN_TASK_IDS)
def test_an_odd_task_id_is_answered_with_a_status_naming_it_never_unknown(master: Master, task_id: str) -> None:
    master.stub.GetTask(W0, timeout=10)
    for success in (True, False):
        bad = pb.ReportTaskRequest(worker=W0, task_id=task_id, lease=1, success=success, records=50)
        code, details = _code(lambda bad=bad: master.stub.ReportTask(bad, timeout=10))
        expected = grpc.StatusCode.INVALID_ARGUMENT if task_id in ODD_TASK_IDS else grpc.StatusCode.NOT_FOUND
        assert code == expected, details
        assert details.startswith(f"task_id: got {task_id!r}"), details
    # The master serves on: its worker's lease is still held and reports on it count.
    assert len(master.book.doing) == 1


def test_a_non_finite_loss_from_the_holder_fails_the_job_with_a_reason(master: Master) -> None:
    task = master.stub.GetTask(W0, timeout=10).task
    answer = master.stub.ReportTask(_report(task, loss_sum=float("nan")), timeout=10)
    assert not answer.accepted
    assert master.book.phase == FAILED and "the model diverged" in master.book.failure_reason
    assert master.stub.GetTask(W0, timeout=10).directive == pb.JOB_FAILED


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_diverging_learning_rate_fails_the_job_with_a_reason(tmp_path: Path) -> None:
    data = tmp_path / "digits"
    download("builtin:digits", data, shards=2, quiet=True)
    with LocalPSJob(
        workdir=tmp_path / "run", data=data, num_workers=2, epochs=2, records_per_task=64,
        master_args=["--batch-size", "32"], ps_args=["--lr", "1e38"],
    ) as job:  # fmt: skip
        job.start_all()
        rc = job.wait_exit("master", deadline_s=240)
        log = job.tail("master", lines=200)
        assert rc == PS_FINAL_EXIT_CODE, log
        written = (tmp_path / "run" / "output" / "metrics.json").read_bytes()
        master_log = job.procs[("master", 0)].log
        before = master_log.read_text(errors="replace")
        # Its Job restarts a failed master (backoffLimit): the restart fails again with the same
        # reason, at once, without waiting on the stopped shards or rewriting the outputs.
        job.start("master")
        rc_again = job.wait_exit("master", deadline_s=120)
        again = master_log.read_text(errors="replace")[len(before) :]
    assert "the model diverged" in log
    metrics = json.loads(written)
    assert metrics["status"] == "failed" and "the model diverged" in metrics["failure_reason"]
    assert rc_again == PS_FINAL_EXIT_CODE, again
    assert "had failed before this restart" in again and "no final model" not in again, again
    assert again.rstrip().endswith(f"JobAbortedError: {metrics['failure_reason']}"), again
    assert (tmp_path / "run" / "output" / "metrics.json").read_bytes() == written
