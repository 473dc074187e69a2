"""The supervisor thread of one local job: the operator's reconcile loop, then the wind-up.

It reconciles whenever it is woken (a container's output closed, a probe changed, a delete or
suspend) and at the latest every `poll_seconds`, publishes the status watchers read, and, however
it ends, stops the job's processes and releases its addresses. A finished job with
`ttlSecondsAfterFinished` is forgotten after that time, as the operators delete it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubetrain.backends.base import JobObject
from kubetrain.backends.local.record import JobRecord


def supervise(record: JobRecord, *, poll_seconds: float, forget: Callable[[JobRecord], None]) -> None:
    """Thread body: run the job's controller to its end, wind up, then apply its TTL."""
    controller = record.controller
    completed = False
    try:
        while not record.delete_requested.is_set():
            controller.reconcile(time.time())
            record.snapshot_pods()
            record.publish()
            if controller.finished:
                break
            record.wake.wait(poll_seconds)
            record.wake.clear()
        completed = True
    finally:
        wind_up(record, completed=completed)
    ttl = ttl_seconds(record.obj)
    if not record.delete_requested.is_set() and ttl is not None and not record.delete_requested.wait(ttl):
        forget(record)


def wind_up(record: JobRecord, *, completed: bool) -> None:
    """Stop the processes and release the job's resources, however the supervisor ended.

    Every step runs even if one before it raised, and `done` is always set, so `delete`,
    `close` and watchers never wait on a supervisor that died of a bug (whose traceback the
    thread prints); such a job then reads as broken (BackendError).
    """
    deleted = record.delete_requested.is_set()
    try:
        record.controller.shutdown("the job was deleted" if deleted else "the job finished")
    finally:
        record.block.release()
        if not completed:
            record.broken = "the local supervisor of this job stopped unexpectedly (see the traceback in the log)"
        try:
            record.snapshot_pods()
            record.publish()
        finally:
            record.done.set()
            if not completed:
                record.end_watches()


def ttl_seconds(obj: JobObject) -> int | None:
    """`ttlSecondsAfterFinished` (top level for JobSet, in `runPolicy` for kubeflow.org jobs)."""
    spec = obj.get("spec") or {}
    value = spec.get("ttlSecondsAfterFinished", (spec.get("runPolicy") or {}).get("ttlSecondsAfterFinished"))
    return None if value is None else int(value)
