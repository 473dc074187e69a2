"""Progress lines of the launcher: one per job status transition, pod phase change or new warning.

The old launchers printed "Current condition is X" on every poll (or nothing); a KFP step log full
of identical lines hides the one that matters. Here a line is written only when something changed:
the job's phase, a pod's phase or waiting reason (ImagePullBackOff, Unschedulable, ...), a pod's
restart count, or a new Warning event. Pending pods say how long they have been pending.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from kubetrain.backends.base import EventInfo, JobRef, PodInfo
from kubetrain.status import JobPhase, JobStatus

LogSink = Callable[[str], None]


# Set once stderr's reader is gone; nothing is written after that.
_output_lost = threading.Event()


def _write_line(text: str) -> None:
    # One write per line: `print` writes the text and the newline separately, and the log
    # follower thread's lines then land inside the main thread's.
    if _output_lost.is_set():
        return
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        # The reader is gone. On the KFP backend the step's output goes through a pipe to KFP's
        # launcher, which a terminated run's SIGTERM (sent to the whole process group) kills at
        # once; a write raising BrokenPipeError here ended the step before the same SIGTERM could
        # delete its job, and the job trained on. So no line may fail the launcher.
        _output_lost.set()


def stderr_sink(line: str) -> None:
    """The default sink: one line to stderr, flushed (KFP shows the step's stderr live)."""
    _write_line(line)


def timestamped_stderr_sink(line: str) -> None:
    """One line to stderr behind the wall-clock time (a KFP step's log has no timestamps of its own)."""
    now = datetime.now().astimezone()
    _write_line(f"{now:%H:%M:%S}.{now.microsecond // 1000:03d} {line}")


WallClock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, timezone-aware (pod timestamps from the API server are UTC)."""
    return datetime.now(UTC)


def _seconds(delta_start: datetime | None, now: datetime) -> float | None:
    if delta_start is None:
        return None
    start = delta_start if delta_start.tzinfo else delta_start.replace(tzinfo=UTC)
    return max(0.0, (now - start).total_seconds())


def describe_pod(pod: PodInfo) -> str:
    """`name [Type index]`, the form every pod line starts with."""
    return f"pod {pod.name} [{pod.replica_type} {pod.index}]"


class ProgressReporter:
    """Remembers what it last reported and writes a line for each change.

    Thread-safe: job statuses and events come from the await loop, pod sets from the pod tracker.
    """

    def __init__(self, ref: JobRef, sink: LogSink, *, clock: WallClock = utc_now) -> None:
        self._lock = threading.RLock()
        self._ref = ref
        self._sink = sink
        self._clock = clock
        self._phase: JobPhase | None = None
        self._restarts = 0
        self._pods: dict[str, tuple[str, str, int]] = {}
        self._pending_since: dict[str, datetime] = {}
        # The latest message of each pending pod (the scheduler's, the image pull's) for the start-timeout
        # summary; kept apart from the reported state so a changing count in it prints no new line.
        self._pending_message: dict[str, str] = {}
        self._events: set[tuple[str, str, str]] = set()
        self._notes: set[str] = set()

    @property
    def job_label(self) -> str:
        """`Kind namespace/name`, the prefix of job lines."""
        return f"{self._ref.kind.kind} {self._ref.namespace}/{self._ref.name}"

    def job(self, status: JobStatus) -> bool:
        """Report a phase change or a new restart of the job; True when something was written."""
        with self._lock:
            return self._job(status)

    def _job(self, status: JobStatus) -> bool:
        changed = False
        if status.phase != self._phase:
            before = self._phase.value if self._phase else "submitted"
            detail = ": ".join(part for part in (status.reason, status.message) if part)
            self._sink(f"{self.job_label}: {before} → {status.phase.value}" + (f" ({detail})" if detail else ""))
            self._phase = status.phase
            changed = True
        if status.restarts > self._restarts:
            self._sink(f"{self.job_label}: restarted (restart {status.restarts})")
            self._restarts = status.restarts
            changed = True
        return changed

    def pods(self, pods: Iterable[PodInfo]) -> None:
        """Report every pod whose phase, waiting reason or restart count changed, and pods that went."""
        with self._lock:
            self._report_pods(pods)

    def _report_pods(self, pods: Iterable[PodInfo]) -> None:
        now = self._clock()
        seen: set[str] = set()
        for pod in pods:
            seen.add(pod.name)
            if pod.phase == "Pending" and pod.message:
                self._pending_message[pod.name] = pod.message
            else:
                self._pending_message.pop(pod.name, None)
            state = (pod.phase, pod.reason, pod.restart_count)
            old = self._pods.get(pod.name)
            if old == state:
                continue
            self._pods[pod.name] = state
            if pod.phase == "Pending":
                self._pending_since.setdefault(pod.name, pod.created or now)
            self._sink(self._pod_line(pod, old, now))
            if pod.phase != "Pending":
                self._pending_since.pop(pod.name, None)
        for gone in sorted(set(self._pods) - seen):
            self._sink(f"pod {gone}: deleted")
            del self._pods[gone]
            self._pending_since.pop(gone, None)
            self._pending_message.pop(gone, None)

    def _pod_line(self, pod: PodInfo, old: tuple[str, str, int] | None, now: datetime) -> str:
        head = describe_pod(pod)
        old_phase = old[0] if old else None
        if old is not None and pod.restart_count > old[2]:
            exit_part = f", last exit code {pod.exit_code}" if pod.exit_code is not None else ""
            return f"{head}: container restarted (restart {pod.restart_count}{exit_part}); now {self._state(pod)}"
        if pod.phase == "Pending":
            pending = _seconds(self._pending_since.get(pod.name), now)
            took = f", pending {pending:.0f}s" if pending is not None else ""
            arrow = f"{old_phase} → " if old_phase and old_phase != "Pending" else ""
            return f"{head}: {arrow}{self._state(pod)}{took}"
        arrow = f"{old_phase} → " if old_phase and old_phase != pod.phase else ""
        line = f"{head}: {arrow}{self._state(pod)}"
        if old_phase == "Pending":
            pending = _seconds(self._pending_since.get(pod.name), now)
            if pending is not None:
                line += f" after {pending:.0f}s pending"
        return line

    @staticmethod
    def _state(pod: PodInfo) -> str:
        out = pod.phase
        detail = ", ".join(
            part
            for part in (
                pod.reason,
                f"exit code {pod.exit_code}" if pod.exit_code is not None and pod.phase == "Failed" else "",
            )
            if part
        )
        if detail:
            out += f" ({detail})"
        if pod.message and pod.phase in ("Pending", "Failed"):
            out += f": {pod.message}"
        return out

    def pending_pods(self) -> list[str]:
        """The pods last seen Pending, longest pending first (their Warning events are worth a look)."""
        with self._lock:
            names = [name for name, state in self._pods.items() if state[0] == "Pending"]
            return sorted(names, key=lambda n: (self._pending_since.get(n) is None, self._pending_since.get(n), n))

    def still_pending(self) -> bool:
        """Whether some pod was last seen Pending (the launcher then looks more often)."""
        with self._lock:
            return any(state[0] == "Pending" for state in self._pods.values())

    def pending_summary(self) -> str:
        """`pod: reason (message), pending Ns` for every pod last seen Pending (for a start-timeout message).

        The message is what says what to fix: the scheduler's (which resource no node has, which
        taint), or the image that does not pull.
        """
        now = self._clock()
        parts = []
        with self._lock:
            for name, (phase, reason, _) in sorted(self._pods.items()):
                if phase == "Pending":
                    pending = _seconds(self._pending_since.get(name), now)
                    took = f", pending {pending:.0f}s" if pending is not None else ""
                    message = self._pending_message.get(name)
                    detail = f" ({message})" if message else ""
                    parts.append(f"{name}: {reason or 'Pending'}{detail}{took}")
        return "; ".join(parts)

    def any_pods(self) -> bool:
        """Whether any pod of the job has been seen."""
        with self._lock:
            return bool(self._pods)

    def note(self, line: str) -> int:
        """Report `line` unless it was reported before; 1 if it was new, else 0."""
        with self._lock:
            if line in self._notes:
                return 0
            self._notes.add(line)
            self._sink(line)
            return 1

    def events(self, events: Iterable[EventInfo]) -> int:
        """Report Warning events not reported before (FailedScheduling, FailedMount, BackOff, ...); how many."""
        with self._lock:
            return self._report_events(events)

    def _report_events(self, events: Iterable[EventInfo]) -> int:
        reported = 0
        for event in events:
            key = (event.involved_object, event.reason, event.message)
            if event.type != "Warning" or key in self._events:
                continue
            self._events.add(key)
            count = f" (x{event.count})" if event.count > 1 else ""
            self._sink(f"event on {event.involved_object}: {event.reason}: {event.message}{count}")
            reported += 1
        return reported
