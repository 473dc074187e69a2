"""Stubs for every PS shard, and the calls the master makes on all of them at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent import futures
from typing import TypeVar

import grpc

from kubetrain.ps.common.rpc import call_with_retry, make_channel
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc

__all__ = ["ShardStubs"]

T = TypeVar("T")


class ShardStubs:
    """One channel and stub per PS address; shard i is `addrs[i]`."""

    def __init__(self, addrs: Sequence[str], *, token: str) -> None:
        self.addrs = list(addrs)
        self._channels = [make_channel(a, token=token) for a in self.addrs]
        self.stubs = [pb_grpc.ParameterServerStub(c) for c in self._channels]
        self._pool = futures.ThreadPoolExecutor(max_workers=max(2, len(self.addrs)))

    def __len__(self) -> int:
        return len(self.stubs)

    def map(self, fn: Callable[[int, pb_grpc.ParameterServerStub], T]) -> list[T]:
        """Run `fn(shard, stub)` for every shard in parallel; results in shard order."""
        jobs = [self._pool.submit(fn, i, s) for i, s in enumerate(self.stubs)]
        return [j.result() for j in jobs]

    def poll_states(self, timeout_s: float = 1.0) -> list[pb.ShardState | None]:
        """Each shard's state, or None for a shard that did not answer in time."""

        def one(i: int, stub: pb_grpc.ParameterServerStub) -> pb.ShardState | None:
            del i
            try:
                state: pb.ShardState = stub.GetState(pb.GetStateRequest(), timeout=timeout_s)
                return state
            except grpc.RpcError:
                return None

        return self.map(one)

    def all_with_retry(
        self,
        what: str,
        call: Callable[[pb_grpc.ParameterServerStub], T],
        *,
        deadline_s: float,
    ) -> list[T]:
        """`call(stub)` on every shard, each retried through restarts until `deadline_s`."""

        def one(i: int, stub: pb_grpc.ParameterServerStub) -> T:
            return call_with_retry(lambda: call(stub), what=f"{what} on PS {self.addrs[i]}", deadline_s=deadline_s)

        return self.map(one)

    def close(self) -> None:
        """Close the channels and the thread pool."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        for c in self._channels:
            c.close()
