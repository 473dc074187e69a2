"""The master's roster of workers: who is there, which process each is, who has gone, and the
workers' time, for the task book (which owns it, and alone decides what a worker's coming or
going does to the work).

A worker is its id (the pod's host name) and an *incarnation*, a random token its process draws
at start: a new incarnation under a known id is a restarted process. A worker the pod watch
reports preempted or removed (`leave`) is *gone*: that process may still talk for its grace
period, and nothing it says counts; a new process under the same id is welcome again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubetrain.ps.common.tasks import WorkerInfo

__all__ = ["Roster", "pod_of"]


def pod_of(incarnation: str) -> str:
    """The pod UID an incarnation names (`<pod uid>/<random>`), "" for one that names none."""
    pod, sep, _ = incarnation.partition("/")
    return pod if sep else ""


@dataclass
class Roster:
    """Workers by id, the gone processes (id -> incarnation), the summed live-worker seconds."""

    known: dict[str, WorkerInfo] = field(default_factory=dict)
    gone: dict[str, str] = field(default_factory=dict)
    # The pods reported preempted or removed, by UID: every process of such a pod is gone, even one
    # that registers only after the report (a pod's process talks on through its grace period, and
    # under its worker id, which its replacement shares). A worker's incarnation is `<pod uid>/<random>`.
    gone_pods: set[str] = field(default_factory=set)
    worker_seconds: float = 0.0
    max_alive: int = 0
    _clock: float | None = field(default=None, init=False)

    def is_gone(self, worker_id: str, incarnation: str) -> bool:
        """Whether this process of the worker has been reported preempted or removed."""
        return self.gone.get(worker_id) == incarnation or pod_of(incarnation) in self.gone_pods

    def touch(self, worker_id: str, incarnation: str, now: float) -> tuple[WorkerInfo, bool]:
        """The worker, marked alive and seen at `now`; and whether it is a new process of a known id."""
        w = self.known.get(worker_id)
        restarted = False
        if w is None:
            w = self.known[worker_id] = WorkerInfo(incarnation, now)
            self.gone.pop(worker_id, None)  # reported gone before it ever registered
        elif w.incarnation != incarnation:
            restarted = True
            w.incarnation = incarnation
            self.gone.pop(worker_id, None)
        w.last_seen = now
        w.alive = True
        self.max_alive = max(self.max_alive, self.alive())
        return w, restarted

    def alive(self) -> int:
        """How many workers are alive."""
        return sum(1 for w in self.known.values() if w.alive)

    def silent(self, now: float, timeout_s: float) -> list[str]:
        """Mark dead, and return, the live workers not heard from for more than `timeout_s`."""
        lost = [k for k, w in self.known.items() if w.alive and now - w.last_seen > timeout_s]
        for k in lost:
            self.known[k].alive = False
        return lost

    def leave(self, worker_id: str, pod_uid: str = "") -> bool:
        """The worker's pod (`pod_uid`, when the watch knows it) was preempted or removed: its current
        process is gone, and so is any process of that pod (a pod that never registered: "" stands
        for its process). False if the watch had said so already."""
        w = self.known.get(worker_id)
        incarnation = w.incarnation if w is not None else ""
        if pod_uid and w is not None and pod_of(incarnation) not in ("", pod_uid):
            # The worker id's current process is another pod's (the replacement): it stays.
            self.gone_pods.add(pod_uid)
            return False
        if self.gone.get(worker_id) == incarnation and (not pod_uid or pod_uid in self.gone_pods):
            return False
        if pod_uid:
            self.gone_pods.add(pod_uid)
        self.gone[worker_id] = incarnation
        if w is not None:
            w.alive = False
        return True

    def claim_slot(self, worker_id: str, static_slots: int) -> int:
        """Static sharding: the worker's slot, the first one no live worker holds if it has none."""
        w = self.known[worker_id]
        if static_slots and w.slot < 0:
            taken = {x.slot for k, x in self.known.items() if x.alive and k != worker_id}
            w.slot = next((s for s in range(static_slots) if s not in taken), -1)
        return w.slot

    def account_time(self, now: float) -> None:
        """Add the live workers' time since the last call to `worker_seconds`. The clock is the
        master's own: a restarted master starts it again, so the time between two masters is not counted."""
        if self._clock is not None and now > self._clock:
            self.worker_seconds += (now - self._clock) * self.alive()
        self._clock = now if self._clock is None else max(self._clock, now)
