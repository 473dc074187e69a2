"""A PS job's servers against calls without its token that hold on or send a lot (issue 48.2).

Real gRPC servers and clients on loopback: the master's and a shard's servers as the jobs build
them (`make_server`, the default thread pool), and a shard as its own process for memory. A pod
of the namespace without the job's token opens calls and never sends their request (half-open),
or sends one request of hundreds of megabytes; the job's own calls must still be answered, and
the server must not read what it refuses.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2

from kubetrain.ps.common.jobtoken import ensure_token, token_metadata
from kubetrain.ps.common.optimizers import OptimizerSpec
from kubetrain.ps.common.rpc import HealthReporter, bind, make_server, wait_serving
from kubetrain.ps.common.tasks import BookConfig
from kubetrain.ps.common.tensors import to_tensor
from kubetrain.ps.harness.localrun import free_port
from kubetrain.ps.master.service import JobSettings, MasterCore, MasterServicer
from kubetrain.ps.master.state import StateStore
from kubetrain.ps.master.taskbook import TaskBook
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc
from kubetrain.ps.server.main import ParameterServerServicer, _Checkpointer
from kubetrain.ps.server.store import ParameterShard, ShardConfig

pytestmark = pytest.mark.timeout(120)
HOST = "127.0.0.1"
# More half-open calls than the server has threads (make_server's default pool is 16), per method.
HALF_OPEN = 24
# How long the job's own calls may take at most; they answer in milliseconds when not starved.
CALL_TIMEOUT_S = 15
HEALTH = "/grpc.health.v1.Health/Check"


def _silent(release: threading.Event) -> Iterator[bytes]:
    """A request stream that sends nothing until released: a call opened and held half-open."""
    release.wait()
    yield from ()


def _hold_half_open(channel: grpc.Channel, methods: list[str], release: threading.Event) -> list[tuple[str, Any]]:
    """HALF_OPEN calls per method, without the token, whose request never comes."""
    held = []
    for method in methods:
        call = channel.stream_unary(method, request_serializer=None, response_deserializer=None)
        for _ in range(HALF_OPEN):
            held.append((method, call.future(_silent(release), timeout=60)))
    return held


def _answers(held: list[tuple[str, Any]]) -> dict[str, set[str]]:
    """Per method, how the held calls ended (a status code name, or 'SERVING' for health)."""
    end = time.monotonic() + CALL_TIMEOUT_S
    for _, f in held:
        with contextlib.suppress(grpc.FutureTimeoutError):
            f.exception(timeout=max(0.0, end - time.monotonic()))
    out: dict[str, set[str]] = {}
    for method, f in held:
        if not f.done():
            answer = "still waiting"
        elif f.exception() is not None:
            answer = f.code().name
        else:
            answer = health_pb2.HealthCheckResponse.ServingStatus.Name(
                health_pb2.HealthCheckResponse.FromString(f.result()).status
            )
        out.setdefault(method, set()).add(answer)
    return out


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[tuple[str, str]]:
    token = ensure_token(tmp_path / "job-token")
    servicer = ParameterServerServicer(
        ParameterShard(ShardConfig(0, 1, optimizer=OptimizerSpec("sgd", lr=0.1))),
        stop=threading.Event(),
        checkpointer=_Checkpointer(tmp_path / "ckpt", keep=2),
    )
    server = make_server(token=token)
    HealthReporter(server).serving()
    pb_grpc.add_ParameterServerServicer_to_server(servicer, server)
    port = bind(server, HOST, free_port(HOST))
    server.start()
    servicer.set_ready([-1])
    yield f"{HOST}:{port}", token
    server.stop(None)


def test_a_shard_serves_its_job_while_calls_without_the_token_are_held_half_open(shard: tuple[str, str]) -> None:
    addr, token = shard
    auth = token_metadata(token)
    release = threading.Event()
    # One connection for all: the half-open calls reach the server before the job's own calls.
    with grpc.insecure_channel(addr) as channel:
        stub = pb_grpc.ParameterServerStub(channel)
        try:
            held = _hold_half_open(channel, ["/kubetrain.ps.ParameterServer/Push", HEALTH], release)
            stub.InitModel(
                pb.InitModelRequest(dense=[to_tensor("w", np.ones(2))]), timeout=CALL_TIMEOUT_S, metadata=auth
            )
            grads = [to_tensor("w", np.full(2, 0.5))]
            for version in range(3):
                push = pb.PushRequest(worker_id="w0", version=version, generation=1, batch_size=4, dense_grads=grads)
                assert stub.Push(push, timeout=CALL_TIMEOUT_S, metadata=auth).accepted
            state = stub.GetState(pb.GetStateRequest(), timeout=CALL_TIMEOUT_S, metadata=auth)
            assert state.version == 3
            answers = _answers(held)
        finally:
            release.set()
    # Refused at once, without waiting for the request that never came; health answered the same way.
    assert answers == {"/kubetrain.ps.ParameterServer/Push": {"UNAUTHENTICATED"}, HEALTH: {"SERVING"}}


def test_a_master_serves_its_job_while_calls_without_the_token_are_held_half_open(tmp_path: Path) -> None:
    config = BookConfig(epochs=1, records_per_task=50, train_shards=(100,), test_shards=(20,),
                        eval_records_per_task=20, heartbeat_timeout_s=60, min_task_timeout_s=60)  # fmt: skip
    store = StateStore(tmp_path / "state")
    store.claim()
    core = MasterCore(TaskBook(config=config), store, {"started_at": time.time()})
    token = ensure_token(tmp_path / "job-token")
    server = make_server(token=token)
    pb_grpc.add_MasterServicer_to_server(
        MasterServicer(core, JobSettings("mlp", "{}", 32, "async", 1, 0, 1.0, 8)), server
    )
    port = bind(server, HOST, free_port(HOST))
    server.start()
    auth = token_metadata(token)
    release = threading.Event()
    worker = pb.WorkerRef(worker_id="w0", incarnation="a1")
    try:
        with grpc.insecure_channel(f"{HOST}:{port}") as channel:
            stub = pb_grpc.MasterStub(channel)
            try:
                held = _hold_half_open(
                    channel, ["/kubetrain.ps.Master/GetTask", "/kubetrain.ps.Master/ReportTask"], release
                )
                done = 0
                while (answer := stub.GetTask(worker, timeout=CALL_TIMEOUT_S, metadata=auth)).directive == pb.RUN_TASK:
                    t = answer.task
                    report = pb.ReportTaskRequest(worker=worker, task_id=t.task_id, lease=t.lease, success=True,
                                                  records=t.end - t.start, loss_sum=1.0)  # fmt: skip
                    assert stub.ReportTask(report, timeout=CALL_TIMEOUT_S, metadata=auth).accepted
                    done += 1
                answers = _answers(held)
            finally:
                release.set()
    finally:
        server.stop(None)
    assert done >= 2 and core.book.counters["tasks_done"] == 2
    assert answers == {
        "/kubetrain.ps.Master/GetTask": {"UNAUTHENTICATED"},
        "/kubetrain.ps.Master/ReportTask": {"UNAUTHENTICATED"},
    }


# Far more than gRPC's flow-control window, far less than this machine's memory.
BIG = 128 * 1024 * 1024


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


@pytest.mark.slow
def test_a_large_call_without_the_token_is_refused_unread(tmp_path: Path) -> None:
    port = free_port(HOST)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubetrain.ps.server", "--port", str(port), "--num-shards", "1",
         "--checkpoint-dir", str(tmp_path / "ckpt"), "--job-token-file", str(tmp_path / "job-token")],
        env={**os.environ, "KUBETRAIN_BIND_ADDRESS": HOST, "KUBETRAIN_PS_INDEX": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    addr = f"{HOST}:{port}"
    try:
        wait_serving(addr, deadline_s=60)
        push = pb.PushRequest(
            worker_id="w0",
            generation=1,
            batch_size=4,
            dense_grads=[pb.Tensor(name="w", shape=[BIG // 4], data=bytes(BIG))],
        )
        big = push.SerializeToString()
        del push
        before = _peak_rss(proc.pid)
        options = [("grpc.max_send_message_length", -1)]
        with grpc.insecure_channel(addr, options=options) as intruder:
            codes = []
            for method in ("/kubetrain.ps.ParameterServer/Push", HEALTH):
                call: Any = intruder.unary_unary(method, request_serializer=None, response_deserializer=None)
                for _ in range(2):
                    try:
                        call(big, timeout=60)
                        codes.append("OK")
                    except grpc.RpcError as e:
                        codes.append(e.code().name)
        grown = _peak_rss(proc.pid) - before
        # The server still answers its job.
        token = (tmp_path / "job-token").read_text()
        with grpc.insecure_channel(addr) as channel:
            state = pb_grpc.ParameterServerStub(channel).GetState(
                pb.GetStateRequest(), timeout=CALL_TIMEOUT_S, metadata=token_metadata(token)
            )
    finally:
        proc.kill()
        proc.wait()
    # Push refused, health answered (its request is never read either).
    assert codes == ["UNAUTHENTICATED", "UNAUTHENTICATED", "OK", "OK"]
    assert state.shard_index == 0
    # None of the 4 x 128 MB was read: the peak grew by less than a quarter of one request.
    assert grown < BIG // 4, f"the server's peak memory grew by {grown / 2**20:.0f} MiB"
