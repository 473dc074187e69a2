"""How many workers the master asks for: the grow-and-shrink decision of an elastic PS job.

Paddle EDL's "master that adds and removes capacity", on Kubernetes' own pieces: the master only
decides a size; the pod watch tells it what runs and whether a new pod can be placed, and the
JobSet's worker replicas carry the size out (the lead's part: the watch, the scaling call and its
narrow permission). Pure logic, so every rule is tested:

- never fewer than `min_workers` asked for, never more than `max_workers`;
- capacity went (pods cannot be placed: the scheduler leaves them Pending as Unschedulable, or
  preempted the job's pods): ask for what runs, at least `min_workers`. The pending pods that
  cannot be placed are given up rather than kept waiting; below the minimum the job waits for its
  minimum, as a static job waits for all of its pods;
- capacity is there and nothing is pending: one worker more, until `max_workers`. One at a time,
  so that the job grows only as fast as pods really start, never asking for pods that would only
  sit Pending (and be given up again on the next decision);
- otherwise (pods still starting where there is room): keep the size.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubetrain.errors import SpecError

__all__ = ["Capacity", "Scaler", "desired_workers"]


@dataclass(frozen=True)
class Capacity:
    """What the pod watch saw of the job's workers: running, pending, and whether a new worker pod
    can be placed now (False once the scheduler leaves one Unschedulable or a worker is preempted)."""

    alive: int
    pending: int
    placeable: bool


def _check_bounds(min_workers: int, max_workers: int) -> None:
    if not 1 <= min_workers <= max_workers:
        raise SpecError("min_workers, max_workers", (min_workers, max_workers), "1 <= min_workers <= max_workers")


def desired_workers(*, min_workers: int, max_workers: int, seen: Capacity) -> int:
    """The number of workers to ask for, given the bounds and what the watch saw."""
    _check_bounds(min_workers, max_workers)
    if seen.alive < 0 or seen.pending < 0:
        raise SpecError("alive, pending", (seen.alive, seen.pending), "counts >= 0")

    def bounded(n: int) -> int:
        return max(min_workers, min(max_workers, n))

    if not seen.placeable:
        return bounded(seen.alive)
    if seen.pending == 0:
        return bounded(seen.alive + 1)
    return bounded(seen.alive + seen.pending)


@dataclass
class Scaler:
    """The size asked for so far, and the one-line events when it changes."""

    min_workers: int
    max_workers: int
    asked: int = 0

    def __post_init__(self) -> None:
        _check_bounds(self.min_workers, self.max_workers)
        self.asked = self.asked or self.min_workers

    def decide(self, seen: Capacity) -> tuple[int, str | None]:
        """(the size to ask for now, the event line if it changed, e.g. `grew to 4 workers`)."""
        size = desired_workers(min_workers=self.min_workers, max_workers=self.max_workers, seen=seen)
        if size == self.asked:
            return size, None
        verb = "grew" if size > self.asked else "shrank"
        self.asked = size
        return size, f"{verb} to {size} worker{'' if size == 1 else 's'}"
