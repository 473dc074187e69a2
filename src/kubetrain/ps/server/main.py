"""`python -m kubetrain.ps.server`: one parameter-server shard.

Start-up order: listen (health NOT_SERVING), load this shard's newest checkpoint (or repartition
one written for another shard count), record the generation, then turn SERVING. Every
`--checkpoint-every` versions the shard writes a checkpoint; `Shutdown` (from the master at the
end of the job) and SIGTERM write a last one. `Shutdown` then exits 0, SIGTERM `ExitCode.CANCELLED`
(the pod is going mid-job: preempted, evicted, deleted), so that its Job makes a new pod, which
restores the checkpoint, instead of counting the shard complete. Every call needs the job's token
(`jobtoken`, checked by the server's interceptor); a malformed request (wrong byte count, bad
shape, duplicate or unknown names, non-finite values, a negative batch or a version from the
future) is answered INVALID_ARGUMENT.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import queue
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from kubetrain.errors import ExitCode, KubetrainError, SpecError
from kubetrain.ps.common.embedding import TableConfig
from kubetrain.ps.common.errors import PSConfigError
from kubetrain.ps.common.jobtoken import ensure_token
from kubetrain.ps.common.optimizers import OPTIMIZERS, OptimizerSpec
from kubetrain.ps.common.procs import default_bind, env_int, process_main, stop_on_signals
from kubetrain.ps.common.rpc import HealthReporter, bind, make_server
from kubetrain.ps.common.tasks import MODES
from kubetrain.ps.common.tensors import from_rows, from_tensor, to_rows, to_tensor
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc
from kubetrain.ps.server import checkpoint as ckpt
from kubetrain.ps.server.store import F32, I64, ParameterShard, ShardConfig, ShardSnapshot

__all__ = ["ParameterServerServicer", "build_parser", "main"]

log = logging.getLogger("kubetrain.ps.server")
SERVICE = "kubetrain.ps.ParameterServer"


class _Checkpointer:
    """Writes snapshots on a background thread so pushes never wait on the disk."""

    def __init__(self, directory: Path, keep: int) -> None:
        self._dir = directory
        self._keep = keep
        # The newest version on disk (set to the restored one at start-up).
        self.written = -1
        self._queue: queue.Queue[ShardSnapshot | None] = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._run, name="checkpointer", daemon=True)
        self._thread.start()

    def submit(self, snap: ShardSnapshot) -> None:
        """Queue `snap`, replacing a queued one not yet written (only the newest matters)."""
        with contextlib.suppress(queue.Empty):
            self._queue.get_nowait()
        self._queue.put_nowait(snap)

    def write_now(self, snap: ShardSnapshot) -> None:
        """Write `snap` synchronously (flush, shutdown)."""
        ckpt.save_snapshot(self._dir, snap, keep=self._keep)
        self.written = max(self.written, snap.version)

    def _run(self) -> None:
        while (snap := self._queue.get()) is not None:
            try:
                self.write_now(snap)
            except KubetrainError as e:  # keep serving; the next checkpoint may succeed
                log.error("checkpoint at version %d failed: %s", snap.version, e)

    def close(self) -> None:
        """Stop the writer thread after the queued snapshot is written."""
        self._queue.put(None)
        self._thread.join(timeout=60)


class ParameterServerServicer(pb_grpc.ParameterServerServicer):  # type: ignore[misc]
    """The gRPC face of one ParameterShard."""

    def __init__(self, shard: ParameterShard, *, stop: threading.Event, checkpointer: _Checkpointer) -> None:
        self._shard = shard
        self._generations: list[int] = []
        self._ready = threading.Event()
        self._stop = stop
        self._checkpointer = checkpointer
        self.shutdown_requested = False  # the master ended the job (Shutdown), not a signal

    def set_ready(self, generations: Sequence[int]) -> None:
        """The checkpoint is loaded: start answering (calls before this get UNAVAILABLE)."""
        self._generations = list(generations)
        self._ready.set()

    def _check_ready(self, context: grpc.ServicerContext) -> None:
        if not self._ready.is_set():
            # Retryable: clients back off and ask again once the checkpoint is loaded.
            context.abort(grpc.StatusCode.UNAVAILABLE, "loading checkpoint")

    def state(self) -> pb.ShardState:
        """The shard's state message."""
        cfg = self._shard.config
        return pb.ShardState(
            shard_index=cfg.shard_index,
            num_shards=cfg.num_shards,
            version=self._shard.version,
            generation=len(self._generations),
            restored_versions=self._generations,
            initialized=self._shard.initialized,
            mode=cfg.mode,
            checkpointed_version=self._checkpointer.written,
        )

    def InitModel(self, request: pb.InitModelRequest, context: grpc.ServicerContext) -> pb.ShardState:  # noqa: N802 - gRPC method name
        """Take the first worker's initial parameters (later calls change nothing)."""
        self._check_ready(context)
        try:
            dense = _dense(request.dense, "dense")
            _unique([t.name for t in request.tables], "tables")
            tables = [TableConfig(t.name, t.dim, t.init_scale) for t in request.tables]
        except KubetrainError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if self._shard.init_model(dense, tables, int(request.seed)):
            log.info("initialised: %d dense tensors, tables %s", len(dense), [t.name for t in tables])
        return self.state()

    def Pull(self, request: pb.PullRequest, context: grpc.ServicerContext) -> pb.PullResponse:  # noqa: N802 - gRPC method name
        """Dense tensors and embedding rows (created lazily)."""
        self._check_ready(context)
        try:
            _unique([e.table for e in request.embeddings], "embeddings")
            lookups = {e.table: np.asarray(e.ids, np.int64) for e in request.embeddings}
            _, dense, rows = self._shard.pull(dense=request.dense, lookups=lookups)
        except KubetrainError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return pb.PullResponse(
            state=self.state(),
            dense=[to_tensor(k, v) for k, v in dense.items()],
            rows=[to_rows(k, lookups[k], v) for k, v in rows.items()],
        )

    def Push(self, request: pb.PushRequest, context: grpc.ServicerContext) -> pb.PushResponse:  # noqa: N802 - gRPC method name
        """Apply or aggregate one worker's gradients."""
        self._check_ready(context)
        generation = len(self._generations)
        if request.generation != generation:
            return pb.PushResponse(
                state=self.state(),
                accepted=False,
                applied_version=self._shard.version,
                reject_reason=f"generation: pulled from {request.generation}, shard is at {generation} (it restarted)",
            )
        try:
            if request.batch_size < 0:
                raise SpecError("batch_size", request.batch_size, ">= 0")
            dense = _dense(request.dense_grads, "dense_grads")
            sparse = _sparse(request.sparse_grads)
            result = self._shard.push(version=int(request.version), dense=dense, sparse=sparse)
        except KubetrainError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return pb.PushResponse(
            state=self.state(),
            accepted=result.accepted,
            applied_version=result.applied_version,
            reject_reason=result.reject_reason,
        )

    def Flush(self, request: pb.FlushRequest, context: grpc.ServicerContext) -> pb.ShardState:  # noqa: N802 - gRPC method name
        """Apply a partial sync aggregate and checkpoint."""
        del request
        self._check_ready(context)
        self._shard.flush()
        if self._shard.initialized:
            self._checkpointer.write_now(self._shard.snapshot())
        return self.state()

    def DumpModel(  # noqa: N802 - gRPC method name
        self, request: pb.DumpModelRequest, context: grpc.ServicerContext
    ) -> pb.DumpModelResponse:
        """Every dense tensor and initialised row."""
        del request
        self._check_ready(context)
        snap = self._shard.snapshot()
        return pb.DumpModelResponse(
            state=self.state(),
            dense=[to_tensor(k, v) for k, v in snap.dense.items()],
            rows=[to_rows(k, np.asarray(d["ids"], np.int64), d["values"]) for k, d in snap.rows.items()],
        )

    def GetState(self, request: pb.GetStateRequest, context: grpc.ServicerContext) -> pb.ShardState:  # noqa: N802 - gRPC method name
        """Version, generation history and mode."""
        del request
        self._check_ready(context)
        return self.state()

    def Shutdown(self, request: pb.ShutdownRequest, context: grpc.ServicerContext) -> pb.ShardState:  # noqa: N802 - gRPC method name
        """Checkpoint, then exit 0 once the answer is sent."""
        self._check_ready(context)
        log.info("shutdown requested: %s", request.reason[:200] or "(no reason)")
        state = self.state()
        self.shutdown_requested = True
        self._stop.set()
        return state


def _unique(names: Sequence[str], what: str) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(what, dupes, "each name once")


def _finite(name: str, a: np.ndarray[Any, Any]) -> None:
    if not np.isfinite(a).all():
        raise SpecError(f"tensor {name}", f"{int((~np.isfinite(a)).sum())} non-finite values", "finite values")


def _dense(tensors: Sequence[pb.Tensor], what: str) -> dict[str, F32]:
    """Named tensors: each name once, the byte count matching the shape, every value finite."""
    _unique([t.name for t in tensors], what)
    out = {t.name: from_tensor(t) for t in tensors}
    for name, a in out.items():
        _finite(name, a)
    return out


def _sparse(rows: Sequence[pb.SparseRows]) -> dict[str, tuple[I64, F32]]:
    _unique([r.table for r in rows], "sparse_grads")
    out = {r.table: from_rows(r) for r in rows}
    for table, (_, values) in out.items():
        _finite(table, values)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The server's flags."""
    p = argparse.ArgumentParser(prog="python -m kubetrain.ps.server", description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bind", default=None, help="listen address (default $KUBETRAIN_BIND_ADDRESS or 0.0.0.0)")
    p.add_argument(
        "--shard-index",
        type=int,
        default=None,
        help="default $KUBETRAIN_PS_INDEX, then $JOB_COMPLETION_INDEX",
    )
    p.add_argument("--num-shards", type=int, required=True)
    p.add_argument("--checkpoint-dir", type=Path, required=True)
    p.add_argument(
        "--job-token-file",
        type=Path,
        required=True,
        help="the job's token on its volume (created if absent), required on every call but health checks",
    )
    p.add_argument("--mode", choices=MODES, default="async")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument(
        "--lr-half-life",
        type=int,
        default=0,
        help="versions over which the learning rate halves (0: constant)",
    )
    p.add_argument("--grads-to-wait", type=int, default=1, help="sync: gradients per version")
    p.add_argument("--checkpoint-every", type=int, default=100, help="versions between checkpoints")
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument(
        "--lr-staleness-modulation",
        action="store_true",
        help="async: divide each gradient's learning rate by its staleness (default: the full rate)",
    )
    p.add_argument("--log-level", default="INFO")
    return p


def _config(args: argparse.Namespace) -> ShardConfig:
    index = args.shard_index
    if index is None:
        index = env_int(["KUBETRAIN_PS_INDEX", "JOB_COMPLETION_INDEX"])
    if index is None:
        index = -1  # ShardConfig names the field and the accepted range
    return ShardConfig(
        shard_index=index,
        num_shards=args.num_shards,
        mode=args.mode,
        optimizer=OptimizerSpec(name=args.optimizer, lr=args.lr, momentum=args.momentum),
        grads_to_wait=args.grads_to_wait,
        lr_staleness_modulation=args.lr_staleness_modulation,
        lr_half_life=args.lr_half_life,
    )


def serve(args: argparse.Namespace) -> int:
    """Run one shard until Shutdown (exit 0) or SIGTERM (CANCELLED: the Job makes a new pod)."""
    config = _config(args)
    if args.checkpoint_every < 1:
        raise PSConfigError(f"--checkpoint-every: got {args.checkpoint_every}; expected >= 1")
    directory = ckpt.shard_dir(args.checkpoint_dir, config.shard_index, config.num_shards)
    checkpointer = _Checkpointer(directory, args.keep_checkpoints)

    def on_version(s: ParameterShard) -> None:
        if s.version % args.checkpoint_every == 0:
            checkpointer.submit(s.snapshot())

    shard = ParameterShard(config, on_version=on_version)
    stop = threading.Event()
    stop_on_signals(stop)
    server = make_server(token=ensure_token(args.job_token_file))
    health = HealthReporter(server)
    servicer = ParameterServerServicer(shard, stop=stop, checkpointer=checkpointer)
    pb_grpc.add_ParameterServerServicer_to_server(servicer, server)
    host = args.bind or default_bind()
    bind(server, host, args.port)
    server.start()
    log.info("shard %d/%d listening on %s:%d", config.shard_index, config.num_shards, host, args.port)

    snap = ckpt.latest_snapshot(args.checkpoint_dir, config.shard_index, config.num_shards)
    if snap is not None:
        shard.restore(snap)
    generations = ckpt.record_generation(directory, snap.version if snap else -1)
    log.info("generation %d, restored version %s", len(generations), snap.version if snap else "none")
    checkpointer.written = generations[-1]
    servicer.set_ready(generations)
    health.serving()
    stop.wait()
    health.not_serving()
    if shard.initialized:
        checkpointer.write_now(shard.snapshot())
    checkpointer.close()
    server.stop(grace=2).wait()
    if servicer.shutdown_requested:
        log.info("stopped at version %d", shard.version)
        return 0
    # A signal mid-job: the pod is going (preempted, evicted, deleted). Exit 0 would make the pod
    # Succeeded (restartPolicy OnFailure) and its Job Complete, the shard gone for the rest of
    # the job; a failure makes the Job create a new pod, which restores this checkpoint.
    log.info("stopped by signal at version %d; a restart resumes from the checkpoint", shard.version)
    return int(ExitCode.CANCELLED)


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 once the master's Shutdown stopped it, CANCELLED on a signal, else the error's exit code."""
    return process_main("ps", build_parser(), serve, argv, log=log)


if __name__ == "__main__":
    sys.exit(main())
