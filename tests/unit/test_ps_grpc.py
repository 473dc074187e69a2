"""A PS shard served over real gRPC in-process: health, init, pulls, pushes, generation fencing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kubetrain.ps.common.embedding import TableConfig
from kubetrain.ps.common.errors import PSConfigError, PSUnavailableError
from kubetrain.ps.common.optimizers import OptimizerSpec
from kubetrain.ps.common.rpc import HealthReporter, bind, make_channel, make_server, parse_addrs, wait_serving
from kubetrain.ps.harness.localrun import free_port
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc
from kubetrain.ps.server.main import SERVICE, ParameterServerServicer, _Checkpointer
from kubetrain.ps.server.store import ParameterShard, ShardConfig
from kubetrain.ps.worker.client import PSClient

HOST = "127.0.0.1"
TOKEN = "t" * 64


# Two shards' addresses, servicers and health reporters.
Shards = tuple[list[str], list[ParameterServerServicer], list[HealthReporter]]


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[Shards]:
    servers, servicers, healths, addrs = [], [], [], []
    for i in range(2):
        shard = ParameterShard(ShardConfig(i, 2, optimizer=OptimizerSpec("sgd", lr=1.0)))
        server = make_server(4, token=TOKEN)
        health = HealthReporter(server)
        servicer = ParameterServerServicer(
            shard, stop=threading.Event(), checkpointer=_Checkpointer(tmp_path / str(i), keep=2)
        )
        pb_grpc.add_ParameterServerServicer_to_server(servicer, server)
        port = bind(server, HOST, free_port(HOST))
        server.start()
        servers.append(server)
        servicers.append(servicer)
        healths.append(health)
        addrs.append(f"{HOST}:{port}")
    yield addrs, servicers, healths
    for s in servers:
        s.stop(None)


def test_health_turns_serving_only_when_ready(shards: Shards) -> None:
    addrs, servicers, healths = shards
    with make_channel(addrs[0], token=TOKEN) as ch:
        check = health_pb2_grpc.HealthStub(ch).Check
        assert (
            check(health_pb2.HealthCheckRequest(service=SERVICE)).status == health_pb2.HealthCheckResponse.NOT_SERVING
        )
        with pytest.raises(grpc.RpcError) as e:  # answers nothing before the checkpoint is loaded
            pb_grpc.ParameterServerStub(ch).GetState(pb.GetStateRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        servicers[0].set_ready([-1, 7])
        healths[0].serving()
        wait_serving(addrs[0], deadline_s=5, service=SERVICE)
        state = pb_grpc.ParameterServerStub(ch).GetState(pb.GetStateRequest(), timeout=5)
        assert (state.generation, list(state.restored_versions)) == (2, [-1, 7])


def test_client_pulls_and_pushes_across_shards(shards: Shards) -> None:
    addrs, servicers, _ = shards
    for s in servicers:
        s.set_ready([-1])
    dense = {f"p{i}": np.full((2,), float(i), np.float32) for i in range(6)}
    client = PSClient(addrs, dense_names=list(dense), deadline_s=10, token=TOKEN)
    try:
        client.ensure_initialized(dense, [TableConfig("emb", 2, 0.1)], seed=3)
        ids = np.array([0, 1, 2, 3, 5, 8], np.int64)
        pulled = client.pull({"emb": ids})
        assert pulled.generations == [1, 1] and all(pulled.initialized)
        assert {k: v.tolist() for k, v in pulled.dense.items()} == {k: v.tolist() for k, v in dense.items()}
        grads = np.ones((6, 2), np.float32)
        outcomes = client.push(
            pulled,
            worker_id="w",
            dense_grads={"p0": np.ones(2, np.float32)},
            sparse_grads={"emb": (ids, grads)},
            batch_size=4,
        )
        assert all(o.accepted and o.applied_version == 1 for o in outcomes)
        again = client.pull({"emb": ids[::-1].copy()})
        assert np.allclose(again.rows["emb"], pulled.rows["emb"][::-1] - 1.0)
        assert np.allclose(again.dense["p0"], -1.0)
        # A push computed against generation 1 after the shard "restarted" is refused.
        servicers[1].set_ready([-1, 1])
        outcomes = client.push(again, worker_id="w", dense_grads={}, sparse_grads={"emb": (ids, grads)}, batch_size=4)
        refused = {o.shard: o for o in outcomes if not o.accepted}
        assert list(refused) == [1] and refused[1].reason.startswith("generation")
    finally:
        client.close()


def test_unreachable_peer_fails_after_the_deadline() -> None:
    client = PSClient([f"{HOST}:{free_port(HOST)}"], dense_names=[], deadline_s=1.0, token=TOKEN)
    try:
        with pytest.raises(PSUnavailableError, match="unreachable"):
            client.pull({})
    finally:
        client.close()


def test_address_validation() -> None:
    assert parse_addrs("a:1, 127.0.0.2:50051 ,[::1]:9") == ["a:1", "127.0.0.2:50051", "[::1]:9"]
    for bad in ("", "host", "host:0", "host:99999", "a b:1"):
        with pytest.raises(PSConfigError):
            parse_addrs(bad)
    server = make_server(1, token=None)
    port = free_port(HOST)
    bind(server, HOST, port)
    with pytest.raises(PSConfigError, match=r"cannot listen"):
        bind(make_server(1, token=None), HOST, port)  # no silent port sharing
