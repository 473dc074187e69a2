"""The master's durable state: the whole TaskBook as JSON on the shared volume.

Written after every change, atomically (temp file, fsync, rename), so a master killed at any
moment restarts from the last complete state (Paddle's master snapshotted to etcd on every
GetTask / TaskFinished; ElasticDL kept its queues in memory and lost them). A fencing
generation, bumped by every master start and checked before every write, stops an old master
that is still running from overwriting the state of its replacement.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kubetrain.fileio import atomic_write_bytes
from kubetrain.ps.common.errors import CheckpointError, PSConfigError, StaleStateError
from kubetrain.ps.common.evaluation import EvalBook
from kubetrain.ps.common.tasks import BookConfig, Lease, Loss, TaskRange, WorkerInfo
from kubetrain.ps.master.queues import TaskQueues
from kubetrain.ps.master.taskbook import TaskBook

__all__ = ["STATE_FILE", "StateStore", "book_from_json", "book_to_json"]

STATE_FILE = "master_state.json"
OWNER_FILE = "master_owner.json"
FORMAT = 1
# Settings that shape the work: a restarted master must agree with its state on these.
_WORK_FIELDS = (
    "epochs",
    "records_per_task",
    "train_shards",
    "test_shards",
    "eval_records_per_task",
    "seed",
    "static_slots",
)


def book_to_json(book: TaskBook) -> dict[str, Any]:
    """The book as a JSON-ready dict."""
    return {
        "config": asdict(book.config),
        "phase": book.phase,
        "failure_reason": book.failure_reason,
        "epoch_created": book.queues.epoch_created,
        "todo": [t.to_json() for t in book.queues.todo],
        "slot_todo": {str(s): [t.to_json() for t in q] for s, q in book.queues.slot_todo.items()},
        "eval_todo": [t.to_json() for t in book.queues.eval_todo],
        "doing": [lease.to_json() for lease in book.doing.values()],
        "ledger": book.ledger.to_json(),
        "failures": book.failures,
        "dropped": book.dropped,
        "next_lease": book.next_lease,
        "evals": book.results.evals.to_json(),
        "model_version": book.results.model_version,
        "workers": {k: [w.incarnation, w.slot, w.alive, w.records_trained] for k, w in book.workers.items()},
        "gone": book.roster.gone,
        "gone_pods": sorted(book.roster.gone_pods),
        "worker_seconds": book.roster.worker_seconds,
        "max_workers_seen": book.roster.max_alive,
        "task_times": list(book.task_times.recent),
        "counters": book.counters,
        "epoch_loss": {str(k): [v.total, v.records] for k, v in book.results.epoch_loss.items()},
        "window_loss": [book.results.window_loss.total, book.results.window_loss.records],
        "point_loss": [book.results.point_loss.total, book.results.point_loss.records, book.results.point_tasks],
        "history": book.results.history,
        "final_metrics": book.results.final_metrics,
        "max_task_seconds": book.max_task_seconds,
        "epochs_logged": sorted(book.results.epochs_logged),
    }


def book_from_json(config: BookConfig, raw: Mapping[str, Any], now: float) -> TaskBook:
    """Rebuild a book; leases and worker heartbeats are re-armed at `now`."""
    saved = raw["config"]
    for name in _WORK_FIELDS:
        theirs = saved.get(name)
        ours = getattr(config, name)
        if (list(ours) if isinstance(ours, tuple) else ours) != theirs:
            raise PSConfigError(
                f"the master state holds a job with {name}={theirs!r}, this master has "
                f"{ours!r}; restart with the same settings or use a fresh --state-dir"
            )
    book = TaskBook(config=config)
    book.phase = str(raw["phase"])
    book.failure_reason = str(raw.get("failure_reason", ""))
    book.queues = TaskQueues(
        config,
        epoch_created=int(raw["epoch_created"]),
        todo=deque(TaskRange.from_json(t) for t in raw["todo"]),
        slot_todo={int(s): deque(TaskRange.from_json(t) for t in q) for s, q in raw["slot_todo"].items()},
        eval_todo=deque(TaskRange.from_json(t) for t in raw["eval_todo"]),
    )
    leases = [Lease.from_json(x, now) for x in raw["doing"]]
    book.doing = {x.lease: x for x in leases}
    book.ledger.load_json(raw["ledger"])
    book.failures = {k: int(v) for k, v in raw["failures"].items()}
    book.dropped = {k: int(v) for k, v in raw["dropped"].items()}
    book.next_lease = int(raw["next_lease"])
    results = book.results
    results.evals = EvalBook.from_json(raw["evals"])
    results.model_version = int(raw["model_version"])
    book.roster.known = {
        k: WorkerInfo(
            incarnation=str(v[0]),
            last_seen=now,
            slot=int(v[1]),
            alive=bool(v[2]),
            records_trained=int(v[3]) if len(v) > 3 else 0,
        )
        for k, v in raw["workers"].items()
    }
    # Absent in a state written before elastic scheduling.
    book.roster.gone = {str(k): str(v) for k, v in raw.get("gone", {}).items()}
    book.roster.gone_pods = {str(uid) for uid in raw.get("gone_pods", ())}
    book.roster.worker_seconds = float(raw.get("worker_seconds", 0.0))
    book.roster.max_alive = int(raw.get("max_workers_seen", 0))
    book.task_times.recent.extend(float(x) for x in raw.get("task_times", ()))
    book.counters.update({k: int(v) for k, v in raw["counters"].items()})
    results.epoch_loss = {int(k): Loss(float(v[0]), int(v[1])) for k, v in raw["epoch_loss"].items()}
    results.window_loss = Loss(float(raw["window_loss"][0]), int(raw["window_loss"][1]))
    point = raw.get("point_loss", (0.0, 0, 0))  # absent in a state written before the loss points
    results.point_loss, results.point_tasks = Loss(float(point[0]), int(point[1])), int(point[2])
    results.history = list(raw["history"])
    results.final_metrics = {k: float(v) for k, v in raw["final_metrics"].items()}
    book.max_task_seconds = float(raw["max_task_seconds"])
    results.epochs_logged = {int(e) for e in raw.get("epochs_logged", ())}
    return book


class StateStore:
    """The state file and the owner (fencing) file in the master's state dir."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / STATE_FILE
        self._owner = self.dir / OWNER_FILE
        self.generation = 0

    def _read_json(self, path: Path) -> dict[str, Any] | None:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{path}: unreadable master state: {e}") from e
        if not isinstance(raw, dict):
            raise CheckpointError(f"{path}: expected a JSON object")
        return raw

    def claim(self) -> dict[str, Any] | None:
        """Become the owner (generation + 1) and return the saved state, if any."""
        owner = self._read_json(self._owner) or {}
        self.generation = int(owner.get("generation", 0)) + 1
        self._write(self._owner, {"generation": self.generation})
        raw = self._read_json(self.path)
        if raw is not None and raw.get("format") != FORMAT:
            raise CheckpointError(f"{self.path}: format {raw.get('format')!r}, expected {FORMAT}")
        return raw

    def save(self, state: Mapping[str, Any]) -> None:
        """Write the state, unless a newer master has claimed the dir (StaleStateError)."""
        owner = self._read_json(self._owner) or {}
        current = int(owner.get("generation", 0))
        if current != self.generation:
            raise StaleStateError(
                f"{self._owner}: generation {current} owns the state, this master is "
                f"{self.generation}; another master replaced this one"
            )
        self._write(self.path, {"format": FORMAT, "generation": self.generation, **state})

    def _write(self, path: Path, data: Mapping[str, Any]) -> None:
        try:
            atomic_write_bytes(path, json.dumps(data, separators=(",", ":")).encode())
        except OSError as e:
            raise CheckpointError(f"{path}: cannot write master state: {e}") from e
