"""Stragglers: a training task held far longer than the others is handed out again to an idle worker.

Paddle's write-up names slow trainers blocking the whole job as what a static job lacks; ElasticDL's
adaptive timeout only re-queues a task once it has overrun 3x the slowest task, by which time the
job has waited. Here a task held longer than `straggler_factor` x the median time of the recently
finished training tasks gets a second lease (a *backup*) when a worker asks for work and the
queues are empty: the first of the two results to arrive counts, the other is dropped (the book).

Guards, so that noise does not double the work: no decision before `straggler_min_samples` tasks
have finished (the median means nothing before), never under `straggler_floor_s` (tiny tasks
finish in milliseconds, and twice a few milliseconds is no straggler), one backup a task, never
the asking worker's own task, and none under static sharding (a slot owns its tasks).
Pure logic: the book passes the clock.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kubetrain.ps.common.tasks import TRAIN, BookConfig, Lease

__all__ = ["TASK_TIMES_KEPT", "Straggler", "TaskTimes", "pick_straggler"]

# Finished-task times the median is taken over: recent ones, so a job that speeds up or slows
# down (more workers, a busier node) is judged by its present pace.
TASK_TIMES_KEPT = 99


@dataclass
class TaskTimes:
    """How long recent training tasks took, from hand-out to report."""

    recent: deque[float] = field(default_factory=lambda: deque(maxlen=TASK_TIMES_KEPT))

    def add(self, seconds: float) -> None:
        """A training task finished after `seconds`."""
        self.recent.append(max(seconds, 0.0))

    def median(self) -> float | None:
        """The median of the recent times (None before any)."""
        return statistics.median(self.recent) if self.recent else None

    def threshold(self, config: BookConfig) -> tuple[float, float] | None:
        """(seconds a task may be held before it is a straggler, the median it comes from); None
        when the rule is off or too few tasks have finished to judge."""
        median = self.median()
        if config.straggler_factor <= 0 or config.static_slots or median is None:
            return None
        if len(self.recent) < config.straggler_min_samples:
            return None
        return max(config.straggler_floor_s, config.straggler_factor * median), median


@dataclass(frozen=True)
class Straggler:
    """A lease to back up, how long it has been held and the median it is judged against."""

    lease: Lease
    held_s: float
    median_s: float

    def event(self) -> str:
        """The one-line event for the job's log."""
        return f"task {self.lease.task.task_id} re-issued (held {self.held_s:.0f} s; median {self.median_s:.0f} s)"


def pick_straggler(
    leases: Iterable[Lease], times: TaskTimes, config: BookConfig, *, worker_id: str, now: float
) -> Straggler | None:
    """The longest-held training lease past the threshold that has no backup yet and is not
    `worker_id`'s own; None if there is none (or the rule does not apply)."""
    judged = times.threshold(config)
    if judged is None:
        return None
    threshold, median = judged
    leases = list(leases)
    holders: dict[str, int] = {}
    for x in leases:
        holders[x.task.task_id] = holders.get(x.task.task_id, 0) + 1
    candidates = [
        x
        for x in leases
        if x.task.kind == TRAIN
        and holders[x.task.task_id] == 1
        and x.worker_id != worker_id
        and now - x.started > threshold
    ]
    if not candidates:
        return None
    oldest = min(candidates, key=lambda x: (x.started, x.lease))
    return Straggler(oldest, now - oldest.started, median)
