"""The worker's view of the PS shards: pull what a batch needs, push what it computed.

Dense tensors are fetched from the shard their name hashes to; embedding ids are de-duplicated
and each unique id is fetched from shard `id % P`, all shards in parallel. Every call is retried
through shard restarts (backoff, deadline). A shard answering with another generation than the
one the current task started against has restarted: the caller restarts the task.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from kubetrain.errors import TrainingError
from kubetrain.ps.common.embedding import TableConfig
from kubetrain.ps.common.placement import partition_dense, row_owner
from kubetrain.ps.common.rpc import call_with_retry, make_channel
from kubetrain.ps.common.tensors import from_rows, from_tensor, to_rows, to_tensor
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc

__all__ = ["PSClient", "Pulled", "PushOutcome"]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
T = TypeVar("T")


@dataclass
class Pulled:
    """Parameters as of one pull: per shard its version and generation."""

    versions: list[int]
    generations: list[int]
    initialized: list[bool]
    dense: dict[str, F32] = field(default_factory=dict)
    rows: dict[str, F32] = field(default_factory=dict)  # aligned with the unique ids asked


@dataclass(frozen=True)
class PushOutcome:
    """One shard's answer to a push."""

    shard: int
    accepted: bool
    applied_version: int
    generation: int
    reason: str


class PSClient:
    """Channels to every shard and the placement of the model's parameters."""

    def __init__(
        self,
        addrs: Sequence[str],
        *,
        dense_names: Sequence[str],
        deadline_s: float,
        token: str,
        stop: threading.Event | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self.addrs = list(addrs)
        self.num_shards = len(self.addrs)
        self._channels = [make_channel(a, token=token) for a in self.addrs]
        self._stubs = [pb_grpc.ParameterServerStub(c) for c in self._channels]
        self.dense_by_shard = partition_dense(dense_names, self.num_shards)
        self._deadline = deadline_s
        self._stop = stop
        self._on_retry = on_retry  # may end the retries (the job already ended, see ps.outcome)
        self._pool = futures.ThreadPoolExecutor(max_workers=max(2, self.num_shards))

    def _call(self, shard: int, what: str, fn: Callable[[], T]) -> T:
        return call_with_retry(
            fn,
            what=f"{what} on PS {self.addrs[shard]}",
            deadline_s=self._deadline,
            stop=self._stop,
            on_retry=self._on_retry,
        )

    def ensure_initialized(self, dense: Mapping[str, F32], tables: Sequence[TableConfig], seed: int) -> None:
        """Offer each shard its dense tensors and the tables; shards already set ignore it."""

        def init(shard: int) -> None:
            req = pb.InitModelRequest(
                dense=[to_tensor(n, dense[n]) for n in self.dense_by_shard[shard]],
                tables=[pb.TableSpec(name=t.name, dim=t.dim, init_scale=t.init_scale) for t in tables],
                seed=seed,
            )
            self._call(shard, "InitModel", lambda: self._stubs[shard].InitModel(req, timeout=30))

        list(self._pool.map(init, range(self.num_shards)))

    def pull(self, lookups: Mapping[str, I64], *, dense: bool = True) -> Pulled:
        """Dense tensors (if asked) and the rows of `lookups` (unique ids per table)."""
        owners = {t: row_owner(ids, self.num_shards) for t, ids in lookups.items()}

        def one(shard: int) -> pb.PullResponse:
            req = pb.PullRequest(
                dense=dense and bool(self.dense_by_shard[shard]),
                embeddings=[
                    pb.SparseIds(table=t, ids=ids[owners[t] == shard].tolist())
                    for t, ids in lookups.items()
                    if np.any(owners[t] == shard)
                ],
            )
            resp: pb.PullResponse = self._call(shard, "Pull", lambda: self._stubs[shard].Pull(req, timeout=60))
            return resp

        answers = list(self._pool.map(one, range(self.num_shards)))
        out = Pulled(
            versions=[int(a.state.version) for a in answers],
            generations=[int(a.state.generation) for a in answers],
            initialized=[bool(a.state.initialized) for a in answers],
        )
        for table, ids in lookups.items():
            out.rows[table] = np.zeros((len(ids), 0), np.float32)
        for shard, a in enumerate(answers):
            for t in a.dense:
                out.dense[t.name] = from_tensor(t)
            for r in a.rows:
                got_ids, values = from_rows(r)
                table = r.table
                if out.rows[table].shape[1] != values.shape[1]:
                    out.rows[table] = np.zeros((len(lookups[table]), values.shape[1]), np.float32)
                mask = owners[table] == shard
                # The shard answers in the order asked, so the mask's positions line up.
                if not np.array_equal(got_ids, lookups[table][mask]):
                    raise TrainingError(f"PS {self.addrs[shard]} answered other ids for {table}")
                out.rows[table][mask] = values
        return out

    def push(
        self,
        pulled: Pulled,
        *,
        worker_id: str,
        dense_grads: Mapping[str, F32],
        sparse_grads: Mapping[str, tuple[I64, F32]],
        batch_size: int,
        shards: Sequence[int] | None = None,
    ) -> list[PushOutcome]:
        """Push each shard its part of the gradients (only `shards`, if given; skip empty)."""
        targets = range(self.num_shards) if shards is None else shards
        requests: dict[int, pb.PushRequest] = {}
        for shard in targets:
            dense = [to_tensor(n, dense_grads[n]) for n in self.dense_by_shard[shard] if n in dense_grads]
            sparse = []
            for table, (ids, grads) in sparse_grads.items():
                mask = row_owner(ids, self.num_shards) == shard
                if np.any(mask):
                    sparse.append(to_rows(table, ids[mask], grads[mask]))
            if dense or sparse:
                requests[shard] = pb.PushRequest(
                    worker_id=worker_id,
                    version=pulled.versions[shard],
                    generation=pulled.generations[shard],
                    dense_grads=dense,
                    sparse_grads=sparse,
                    batch_size=batch_size,
                )

        def one(shard: int) -> PushOutcome:
            req = requests[shard]
            resp: pb.PushResponse = self._call(shard, "Push", lambda: self._stubs[shard].Push(req, timeout=60))
            return PushOutcome(
                shard,
                bool(resp.accepted),
                int(resp.applied_version),
                int(resp.state.generation),
                resp.reject_reason,
            )

        return list(self._pool.map(one, list(requests)))

    def close(self) -> None:
        """Close channels and threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        for c in self._channels:
            c.close()
