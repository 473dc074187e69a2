"""The launcher's look at events while a job or its pods are pending, in a thread of its own.

No watch of the job object says why a pod is stuck (FailedScheduling, FailedMount, an image that
cannot be pulled) or that the mpi-operator rejected an MPIJob (a ValidationError event and never a
condition), so while anything is pending the launcher lists the events of the job and of its
longest-pending pods. It does so beside the job watch, never instead of it: a look that is slow or
throttled (HTTP 429 waits as long as the server says, often half a minute under load) must not
delay noticing that the job ended, and cutting the job watch into short windows to make room for
looks cost a watch request per look. The interval starts at `pending_poll_seconds`, doubles while
looks find nothing new (a thousand waiting launchers must not list every few seconds) up to
`pending_poll_max_seconds`, and starts again when the job's phase changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubetrain.backends.base import Backend, JobRef
from kubetrain.errors import BackendError
from kubetrain.launcher.admission import refusal
from kubetrain.launcher.options import Tuning
from kubetrain.launcher.progress import ProgressReporter
from kubetrain.status import JobPhase, JobStatus

__all__ = ["REJECTION_REASONS", "PendingLook", "next_interval"]

logger = logging.getLogger(__name__)

# Reasons of Warning events that mean "the operator rejected this job and will never set a condition".
REJECTION_REASONS = frozenset({"ValidationError"})


def next_interval(every: float, *, news: int, phase_changed: bool, tuning: Tuning) -> float:
    """The wait before the next look: back to the start when the job's phase changed, the same
    while looks find something new, doubled (up to the maximum) while they find nothing."""
    if phase_changed:
        return tuning.pending_poll_seconds
    if news:
        return every
    return min(every * 2, tuning.pending_poll_max_seconds)


class PendingLook(threading.Thread):
    """Lists events while the job or one of its pods is pending; reports a rejection through `on_rejected`."""

    def __init__(
        self,
        backend: Backend,
        ref: JobRef,
        progress: ProgressReporter,
        tuning: Tuning,
        *,
        on_rejected: Callable[[], None],
    ) -> None:
        super().__init__(name=f"pending-look-{ref.name}", daemon=True)
        self.backend = backend
        self.ref = ref
        self.progress = progress
        self.tuning = tuning
        self.on_rejected = on_rejected
        self.rejected: JobStatus | None = None
        self._status: JobStatus | None = None
        self._stop = threading.Event()

    def job(self, status: JobStatus) -> None:
        """The job's latest status, as the launcher's watch delivered it."""
        self._status = status

    def stop(self) -> None:
        """No further look (one under way finishes on its own; what it finds is not reported)."""
        self._stop.set()

    def run(self) -> None:
        every = self.tuning.pending_poll_seconds
        last_phase: JobPhase | None = None
        while not self._stop.wait(every):
            status = self._status
            if status is None or not self.eager(status):
                every = self.tuning.pending_poll_seconds
                continue
            try:
                news = self._look(status)
            except BackendError as e:
                # A look is worth having, not worth failing the job over: the watch decides.
                logger.debug("looking at the events of %s failed: %s", self.ref.name, e)
                news = 0
            if self.rejected is not None:
                return
            changed = last_phase is not None and status.phase != last_phase
            every = next_interval(every, news=news, phase_changed=changed, tuning=self.tuning)
            last_phase = status.phase

    def eager(self, status: JobStatus) -> bool:
        """Whether events deserve a look: the job has not started, or one of its pods is pending."""
        if status.phase in (JobPhase.PENDING, JobPhase.CREATED, JobPhase.RESTARTING):
            return True
        return status.phase == JobPhase.RUNNING and (self.progress.still_pending() or not self.progress.any_pods())

    def _look(self, status: JobStatus) -> int:
        """Report the events not seen before; set `rejected` when the operator rejected the job, or
        when the API server refused its pods for a reason no wait can change (launcher.admission)."""
        events = self.backend.events(self.ref, pods=self.progress.pending_pods())
        if self._stop.is_set():
            return 0
        news = self.progress.events(events)
        for event in events:
            if event.type != "Warning":
                continue
            verdict = refusal(event.reason, event.message, namespace=self.ref.namespace)
            if verdict is None:
                continue
            if verdict.final:
                self.rejected = JobStatus(phase=JobPhase.FAILED, reason="PodsRefused", message=verdict.line)
                self.on_rejected()
                return news
            news += self.progress.note(verdict.line)
        if status.phase != JobPhase.PENDING:
            return news
        for event in events:
            # mpi-operator validates in its controller: an invalid MPIJob gets this event and no
            # condition, ever. Without this check the launcher would wait until its timeout.
            if event.type == "Warning" and event.reason in REJECTION_REASONS and self._about_job(event.involved_object):
                self.rejected = JobStatus(phase=JobPhase.FAILED, reason=event.reason, message=event.message)
                self.on_rejected()
                break
        return news

    def _about_job(self, involved_object: str) -> bool:
        """Whether an event's object (`Kind/name` or `name`) is the job itself, not one of its pods."""
        kind, _, name = involved_object.rpartition("/")
        return name == self.ref.name and kind in ("", self.ref.kind.kind)
