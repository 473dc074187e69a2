"""Tasks: contiguous record ranges inside one shard of a split, and how epochs are cut into them.

A task's id names what it covers (`train/e3/s0/128-160`), so the same range in the same epoch
always has the same id: re-queued, re-dispatched or re-reported, it is recognised. Each hand-out
of a task is a *lease* with its own number; a report names the lease, which makes reports
idempotent (a report retried through a master restart is counted once).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubetrain.errors import SpecError

__all__ = [
    "DONE",
    "FAILED",
    "FINAL_EVAL",
    "FINISHING",
    "MODES",
    "TRAINING",
    "BookConfig",
    "Directive",
    "DoneEntry",
    "Lease",
    "Loss",
    "TaskRange",
    "WorkerInfo",
    "cut_epoch",
    "cut_split",
    "task_from_id",
]

# How the shards apply gradients: as they come (async) or once per round of every worker (sync).
MODES = ("async", "sync")
# The job's phases as the master's task book records them (and its outcome file reports).
TRAINING, FINAL_EVAL, FINISHING, DONE, FAILED = "training", "final_eval", "finishing", "done", "failed"
TRAIN = "train"
EVAL = "eval"


@dataclass(frozen=True)
class TaskRange:
    """Records [start, end) of shard `shard` of `split`, for one epoch or evaluation round."""

    kind: str
    split: str
    shard: int
    start: int
    end: int
    epoch: int = 0
    eval_round: int = 0
    slot: int = -1  # static sharding: the worker slot that owns it (-1: any worker)

    def __post_init__(self) -> None:
        if self.kind not in (TRAIN, EVAL):
            raise SpecError("task kind", self.kind, f"{TRAIN!r} or {EVAL!r}")
        if not 0 <= self.start < self.end:
            raise SpecError("task range", (self.start, self.end), "0 <= start < end")

    @property
    def task_id(self) -> str:
        """A stable id naming what the task covers."""
        scope = f"e{self.epoch}" if self.kind == TRAIN else f"r{self.eval_round}"
        return f"{self.kind}/{scope}/{self.split}/s{self.shard}/{self.start}-{self.end}"

    @property
    def records(self) -> int:
        """How many records the task covers."""
        return self.end - self.start

    def to_json(self) -> list[Any]:
        """A compact JSON form (for the master's state file)."""
        return [
            self.kind,
            self.split,
            self.shard,
            self.start,
            self.end,
            self.epoch,
            self.eval_round,
            self.slot,
        ]

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> TaskRange:
        """Inverse of to_json."""
        kind, split, shard, start, end, epoch, eval_round, slot = raw
        return cls(kind, split, int(shard), int(start), int(end), int(epoch), int(eval_round), int(slot))


@dataclass
class Lease:
    """One hand-out of a task to one worker process."""

    lease: int
    task: TaskRange
    worker_id: str
    incarnation: str
    started: float  # monotonic seconds; re-armed when a restarted master loads its state
    progress: int = 0  # records the worker says it has trained so far

    def to_json(self) -> dict[str, Any]:
        """JSON form (without the monotonic start time, which means nothing to another process)."""
        return {
            "lease": self.lease,
            "task": self.task.to_json(),
            "worker": self.worker_id,
            "incarnation": self.incarnation,
            "progress": self.progress,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], now: float) -> Lease:
        """Inverse of to_json; the timer starts again at `now`."""
        return cls(
            lease=int(raw["lease"]),
            task=TaskRange.from_json(raw["task"]),
            worker_id=str(raw["worker"]),
            incarnation=str(raw["incarnation"]),
            started=now,
            progress=int(raw.get("progress", 0)),
        )


@dataclass
class DoneEntry:
    """A trained task: the lease that finished it and where its gradients landed per shard."""

    lease: int
    records: int
    # shard -> (generation, highest applied version) of the finishing lease's pushes.
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)

    def to_json(self) -> list[Any]:
        """Compact JSON form."""
        return [self.lease, self.records, [[s, g, v] for s, (g, v) in self.versions.items()]]

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> DoneEntry:
        """Inverse of to_json."""
        lease, records, versions = raw
        return cls(int(lease), int(records), {int(s): (int(g), int(v)) for s, g, v in versions})


def cut_split(
    shard_records: Sequence[int],
    records_per_task: int,
    *,
    kind: str,
    split: str,
    epoch: int = 0,
    eval_round: int = 0,
) -> list[TaskRange]:
    """Every record of a split in tasks of at most `records_per_task`, never crossing shards."""
    if records_per_task < 1:
        raise SpecError("records_per_task", records_per_task, "an integer >= 1")
    out = []
    for shard, n in enumerate(shard_records):
        for start in range(0, n, records_per_task):
            end = min(start + records_per_task, n)
            out.append(TaskRange(kind, split, shard, start, end, epoch, eval_round))
    return out


def cut_epoch(
    shard_records: Sequence[int],
    records_per_task: int,
    *,
    epoch: int,
    seed: int,
    slots: int = 0,
) -> list[TaskRange]:
    """One epoch's training tasks in a seeded random order (a fresh order every epoch).

    With `slots` > 0 (static sharding) the tasks are first dealt into `slots` contiguous blocks,
    the same every epoch, each owned by one worker slot, like a DistributedSampler's fixed part.
    """
    tasks = cut_split(shard_records, records_per_task, kind=TRAIN, split="train", epoch=epoch)
    if slots > 0:
        # Contiguous blocks balanced by records: a task goes to the slot its first record falls in.
        total = sum(t.records for t in tasks)
        dealt, before = [], 0
        for t in tasks:
            dealt.append(TaskRange(t.kind, t.split, t.shard, t.start, t.end, t.epoch, 0, before * slots // total))
            before += t.records
        tasks = dealt
    random.Random(seed * 1_000_003 + epoch).shuffle(tasks)
    return tasks


class Directive:
    """What GetTask / Heartbeat tell a worker (the proto enum's values)."""

    RUN_TASK, WAIT, JOB_DONE, JOB_FAILED = 0, 1, 2, 3


def check_straggler_factor(value: float) -> None:
    """The one rule for `straggler_factor`, checked on submission (kubetrain.presets) and by the
    master: 0 never re-issues a task; a factor of 1 or less would re-issue the median task."""
    if not (value == 0 or value > 1):
        raise SpecError("straggler_factor", value, "0 (never re-issue a task) or a number > 1, such as 3")


@dataclass(frozen=True)
class BookConfig:
    """The shape of the job's work and the failure rules."""

    epochs: int
    records_per_task: int
    train_shards: tuple[int, ...]
    test_shards: tuple[int, ...]
    eval_records_per_task: int
    seed: int = 0
    max_task_failures: int = 3
    max_dropped_fraction: float = 0.01
    static_slots: int = 0
    heartbeat_timeout_s: float = 15.0
    min_task_timeout_s: float = 60.0
    task_timeout_factor: float = 3.0
    # A training task held longer than factor x the median task time goes out again (0: never);
    # see ps.master.stragglers for the guards.
    straggler_factor: float = 3.0
    straggler_min_samples: int = 5
    straggler_floor_s: float = 10.0
    # Training tasks go out only while this many workers are alive (an elastic job's minimum).
    min_workers: int = 1

    def __post_init__(self) -> None:
        for name in ("epochs", "records_per_task", "eval_records_per_task", "max_task_failures", "min_workers"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise SpecError(name, value, "an integer >= 1")
        if not self.train_shards or min(self.train_shards) < 1:
            raise SpecError("train_shards", self.train_shards, "record counts >= 1")
        if not 0 <= self.max_dropped_fraction <= 1:
            raise SpecError("max_dropped_fraction", self.max_dropped_fraction, "a number in [0, 1]")
        if self.static_slots < 0:
            raise SpecError("static_slots", self.static_slots, "0 (dynamic) or a worker count")
        if not (self.heartbeat_timeout_s > 0 and self.min_task_timeout_s > 0):
            raise SpecError("timeouts", (self.heartbeat_timeout_s, self.min_task_timeout_s), "> 0")
        check_straggler_factor(self.straggler_factor)
        if not (self.straggler_min_samples >= 1 and self.straggler_floor_s >= 0):
            raise SpecError(
                "straggler_min_samples, straggler_floor_s",
                (self.straggler_min_samples, self.straggler_floor_s),
                "an integer >= 1 and seconds >= 0",
            )

    @property
    def records_per_epoch(self) -> int:
        """Training records in one epoch."""
        return sum(self.train_shards)


@dataclass
class WorkerInfo:
    """A worker the master has heard from."""

    incarnation: str
    last_seen: float
    slot: int = -1
    alive: bool = True
    records_trained: int = 0  # of tasks this worker finished (metrics count only workers that trained)


@dataclass
class Loss:
    """A running sum of per-record losses."""

    total: float = 0.0
    records: int = 0

    def add(self, loss_sum: float, records: int) -> None:
        """Add a task's loss sum over `records` records."""
        self.total += loss_sum
        self.records += records

    def mean(self) -> float | None:
        """The mean per-record loss, None if nothing was added."""
        return self.total / self.records if self.records else None


# What TaskRange.task_id writes: kind, epoch (train) or round (eval), split, shard, record range.
# Numbers are capped at 18 digits (int64); anything else is no id the master ever gave.
_TASK_ID = re.compile(r"(train/e|eval/r)(\d{1,18})/([A-Za-z0-9_]+)/s(\d{1,18})/(\d{1,18})-(\d{1,18})")


def task_from_id(task_id: str, slot: int = -1) -> TaskRange:
    """The task a `train/e{epoch}/{split}/s{shard}/{start}-{end}` (or `eval/r{round}/...`) id names.

    SpecError naming the id if it is not one that `TaskRange.task_id` could have written.
    """
    m = _TASK_ID.fullmatch(task_id)
    if m is None or int(m.group(5)) >= int(m.group(6)):
        raise SpecError("task_id", task_id, "a task id as GetTask gives it, such as train/e0/train/s0/0-64")
    kind, split = m.group(1).split("/")[0], m.group(3)
    scope, shard, start, end = (int(m.group(i)) for i in (2, 4, 5, 6))
    epoch, eval_round = (scope, 0) if kind == TRAIN else (0, scope)
    return TaskRange(kind, split, shard, start, end, epoch, eval_round, slot)
