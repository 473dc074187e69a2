"""The master's outputs: the final model (from the PS shards) and `metrics.json`."""

from __future__ import annotations

import io
import json
import logging
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from kubetrain.errors import KubetrainError
from kubetrain.fileio import atomic_write_bytes
from kubetrain.ps.common.errors import DivergedError
from kubetrain.ps.common.tasks import FAILED
from kubetrain.ps.common.tensors import from_rows, from_tensor
from kubetrain.ps.master.config import MasterConfig
from kubetrain.ps.master.service import JobSettings, MasterCore
from kubetrain.ps.master.shard_clients import ShardStubs
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb

__all__ = ["metrics", "write_model", "write_outputs"]

log = logging.getLogger("kubetrain.ps.master")


def write_model(shards: ShardStubs, settings: JobSettings, config: MasterConfig, *, deadline_s: float) -> int:
    """Gather every shard's parameters into `model.npz` (+ `model.json`); returns the version.

    DivergedError, and nothing written, if a parameter is not finite.
    """
    dumps = shards.all_with_retry(
        "DumpModel",
        lambda s: s.DumpModel(pb.DumpModelRequest(), timeout=60),
        deadline_s=deadline_s,
    )
    arrays: dict[str, npt.NDArray[Any]] = {}
    tables: dict[str, int] = {}
    for d in dumps:
        for t in d.dense:
            arrays[f"dense/{t.name}"] = from_tensor(t)
        for r in d.rows:
            ids, values = from_rows(r)
            tables[r.table] = values.shape[1] if values.ndim == 2 else 0
            for key, a in (("ids", ids), ("values", values)):
                k = f"embedding/{r.table}/{key}"
                arrays[k] = a if k not in arrays else np.concatenate([arrays[k], a])
    for table in tables:  # rows sorted by id, whichever shard held them
        order = np.argsort(arrays[f"embedding/{table}/ids"], kind="stable")
        for key in ("ids", "values"):
            arrays[f"embedding/{table}/{key}"] = arrays[f"embedding/{table}/{key}"][order]
    for key, a in arrays.items():
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise DivergedError(
                f"the model diverged: parameter {key} holds {int((~np.isfinite(a)).sum())} non-finite values; "
                "lower the learning rate"
            )
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(config.output / "model.npz", buf.getvalue())
    version = max((int(d.state.version) for d in dumps), default=0)
    desc = {
        "format": "kubetrain-ps-model/1",
        "model": settings.model,
        "model_args": json.loads(settings.model_args_json),
        "version": version,
        "shard_versions": [int(d.state.version) for d in dumps],
        "dense": sorted(k.removeprefix("dense/") for k in arrays if k.startswith("dense/")),
        "tables": tables,
    }
    atomic_write_bytes(config.output / "model.json", (json.dumps(desc, indent=2) + "\n").encode())
    return version


def metrics(core: MasterCore, settings: JobSettings, config: MasterConfig) -> dict[str, Any]:
    """The metrics.json content from the book and the recorded times."""
    book, times = core.book, core.times
    now = time.time()
    c = book.counters
    first = times.get("first_task_at", times.get("started_at", now))
    train_s = max(times.get("training_done_at", now) - first, 1e-9)
    out: dict[str, Any] = {
        "test_accuracy": book.results.final_metrics.get("test_accuracy"),
        "test_loss": book.results.final_metrics.get("test_loss"),
        "train_loss": book.results.final_metrics.get("train_loss"),
        "samples_per_second": c["records_trained"] / train_s,
        # Workers that finished training tasks, not every client that asked for work.
        "world_size": sum(1 for w in book.workers.values() if w.records_trained > 0),
        "wall_seconds": now - times.get("started_at", now),
        "train_seconds": train_s,
        "epochs": book.config.epochs,
        "global_step": book.results.model_version,
        "history": book.results.history,
        "mode": settings.mode,
        "model": settings.model,
        "num_ps": settings.num_ps,
        "sharding": "static" if book.config.static_slots else "dynamic",
        "records_per_epoch": book.config.records_per_epoch,
        "records_untrained": _untrained(core),
        "master_generation": core.store.generation,
        "ps_generations": {str(k): len(v) for k, v in book.ledger.ps_history.items()},
        "status": "failed" if book.phase == FAILED else "succeeded",
        # Elastic scheduling (with the counters preemptions, workers_left, tasks_requeued, tasks_reissued).
        "max_workers_seen": book.roster.max_alive,
        "worker_seconds": round(book.roster.worker_seconds, 3),
        **c,
    }
    if "test_auc" in book.results.final_metrics:
        out["test_auc"] = book.results.final_metrics["test_auc"]
    if book.failure_reason:
        out["failure_reason"] = book.failure_reason
    return out


def _untrained(core: MasterCore) -> int:
    """Records of any epoch not covered by a finished (or dropped) task: 0 on success."""
    book = core.book
    covered = book.ledger.records() + sum(book.dropped.values())
    return book.config.records_per_epoch * book.config.epochs - covered


def write_outputs(
    core: MasterCore,
    shards: ShardStubs,
    settings: JobSettings,
    config: MasterConfig,
    *,
    failed: bool = False,
) -> None:
    """Write the model (unless the job failed and the shards are gone) and metrics.json."""
    try:
        # A failed job may have lost its shards: do not wait long for them.
        write_model(shards, settings, config, deadline_s=10.0 if failed else config.ps_deadline)
    except KubetrainError as e:
        if not failed:
            raise
        log.warning("no final model: %s", e)
    with core.lock:
        data = metrics(core, settings, config)
    atomic_write_bytes(config.output / "metrics.json", (json.dumps(data, indent=2) + "\n").encode())
    log.info("wrote %s", config.output / "metrics.json")
