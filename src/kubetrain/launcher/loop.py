"""The await loop every training component runs: submit a job, follow it to its end, clean up.

One loop for both backends (Kubernetes and local), written against :class:`Backend` only:

- submit (the backend adopts a job of the same name that carries this run and task's labels);
- watch the job with bounded windows under one overall deadline, and its pods in a thread of
  their own (`pods.PodTracker`); a line per status transition and per pod change (with reasons
  such as ImagePullBackOff, CrashLoopBackOff and the time spent pending) as it happens; events
  are listed while the job or a pod is pending, in a thread of their own too
  (`pending.PendingLook`), so that no look delays noticing the job's end;
- follow the primary pod's log in a thread (waits while Pending and while the job's primary
  replica has no pod yet, previous container after a crash);
- Succeeded → :class:`JobResult`; Failed → :class:`JobFailedError` with the condition's reason and
  message and the tail of every pod that failed or crashed, read before anything is deleted (for
  a pod its controller deleted meanwhile, the tail read when it crashed); an MPIJob the
  mpi-operator rejected (no condition, only a ValidationError event) is a failure too;
- deadline → delete (or suspend) the job, then :class:`JobTimeoutError`;
- SIGTERM/SIGINT (the KFP run was cancelled) → delete the job, then :class:`JobCancelledError`;
  the delete starts at once in the stopper's thread (`stopper`), not when this loop next looks.

Every old launcher let at least one of these through: failed jobs passing the step, jobs left
running after a timeout, logs deleted with the job, a wait that gave up after 10 minutes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubetrain.backends.base import Backend, JobObject, JobRef, JobWatch, PodInfo
from kubetrain.errors import JobCancelledError, JobFailedError, JobTimeoutError
from kubetrain.launcher.failure_tails import collect_failure_tails
from kubetrain.launcher.logs import TERMINAL_POD_PHASES, LogFollower, choose_primary
from kubetrain.launcher.options import AwaitOptions, spread_window
from kubetrain.launcher.pending import REJECTION_REASONS, PendingLook
from kubetrain.launcher.pods import PodBook, PodListener, PodTracker
from kubetrain.launcher.program_error import program_error
from kubetrain.launcher.progress import LogSink, ProgressReporter, stderr_sink
from kubetrain.launcher.relay import CappedRelay
from kubetrain.launcher.signals import CancelGuard, Cancelled
from kubetrain.launcher.silence import SilenceWatch
from kubetrain.launcher.stopper import Stopper
from kubetrain.manifests.kinds import kind_of
from kubetrain.status import JobPhase, JobResult, JobStatus, parse_job_status

logger = logging.getLogger(__name__)

# Phases that mean the job got going (the start timeout no longer applies).
STARTED = frozenset({JobPhase.RUNNING, JobPhase.RESTARTING, JobPhase.SUCCEEDED, JobPhase.FAILED})
# Bounds the wait for the pod tracker to stop; closing its stream wakes it at once, this only covers
# a read the close cannot wake (it then ends with its window, and what it sees is ignored).
TRACKER_STOP_SECONDS = 5.0


def run_job(
    manifest: Mapping[str, Any],
    *,
    backend: Backend,
    options: AwaitOptions,
    log_sink: LogSink = stderr_sink,
    cancel: threading.Event | None = None,
    on_status: Callable[[JobStatus], None] | None = None,
) -> JobResult:
    """Submit `manifest` on `backend`, follow it to its end as `options` say, and return its result.

    Raises JobFailedError (the job Failed or was rejected), JobTimeoutError (after deleting or
    suspending it), JobCancelledError (SIGTERM/SIGINT or `cancel` set; the job was deleted),
    BackendError (the API failed after retries) or InvalidInputError (nothing was submitted).
    Signal handlers are installed only when called from the main thread, and restored on return;
    from other threads, set `cancel` to cancel. `on_status` is called with every status the watch
    delivers (progress bars, KFP metadata).
    """
    kind_of(manifest)  # refuses unknown kinds before anything is submitted
    started = time.monotonic()
    guard = CancelGuard(cancel or threading.Event())
    with guard, Stopper(backend, guard, log_sink) as stopper:
        if guard.event.is_set():
            raise JobCancelledError("cancelled before the job was submitted; nothing was submitted")
        try:
            # Not interruptible: a stop during the create makes the stopper delete what it created.
            with stopper.submitting():
                ref = backend.submit(manifest)
                stopper.submitted(ref)
        except Cancelled:
            raise JobCancelledError("cancelled before the job was submitted; nothing was submitted") from None
        log_sink(f"{ref.kind.kind} {ref.namespace}/{ref.name} submitted ({backend.name})")
        return _Await(ref, backend, options, log_sink, guard, stopper, on_status).run(started)


class _Await:
    """One submitted job's await, with its log follower thread."""

    def __init__(
        self,
        ref: JobRef,
        backend: Backend,
        opts: AwaitOptions,
        sink: LogSink,
        guard: CancelGuard,
        stopper: Stopper,
        on_status: Callable[[JobStatus], None] | None,
    ) -> None:
        self.ref = ref
        self.stopper = stopper
        self.on_status = on_status
        self.backend = backend
        self.opts = opts
        self.sink = sink
        self.guard = guard
        self.cancel = guard.event
        self.job_done = threading.Event()
        self.stop_logs = threading.Event()
        self.follower: LogFollower | None = None
        self.followed: LogFollower | None = None  # the follower, kept once stopped: which logs it wrote whole
        self.silence: SilenceWatch | None = None
        self.relay: CappedRelay | None = None
        self.tracker: PodTracker | None = None
        self.final_pods: list[PodInfo] | None = None  # the look at the pods once the job ended
        self.replicas: tuple[str, ...] = ()  # the job's replica names, as far as it has said
        self.look: PendingLook | None = None
        self._stream: JobWatch | None = None  # the open job watch, which the look may close
        self._stream_lock = threading.Lock()

    def run(self, start: float) -> JobResult:
        deadline = start + self.opts.timeout_seconds
        start_by = None if self.opts.start_timeout_seconds is None else start + self.opts.start_timeout_seconds
        try:
            self.guard.check()
            silence = self.silence = SilenceWatch(
                self.sink, after_seconds=self.opts.tuning.silence_notice_seconds, logs_followed=self.opts.stream_logs
            )
            silence.start()
            if not self.opts.stream_logs:
                self.sink = silence.line  # no program log to watch: a word from the launcher ends the silence
            progress = ProgressReporter(self.ref, self.sink)
            listeners: list[PodListener] = [progress.pods]
            if self.opts.stream_logs:
                relay = self.relay = CappedRelay(
                    silence.line,
                    max_bytes=self.opts.tuning.max_relayed_log_bytes,
                    heard=silence.heard,
                    where=lambda: self.backend.debug_hint(self.ref),
                )
                follower = self.follower = LogFollower(
                    self.backend,
                    self.ref,
                    relay.line,
                    poll_seconds=self.opts.tuning.pending_poll_seconds,
                    job_done=self.job_done,
                    stop=self.stop_logs,
                    kubectl_hint=self.backend.name == "kubernetes",
                )
                listeners.append(lambda pods: follower.notify(pods=pods))
                follower.start()
            self.tracker = PodTracker(
                self.backend,
                self.ref,
                listeners=listeners,
                sink=self.sink,
                tail_lines=self.opts.tuning.log_tail_lines,
                window_seconds=self.opts.tuning.watch_window_seconds,
            )
            self.tracker.start()
            status, obj = self._await(progress, deadline, start_by)
            return self._finish(status, obj)
        except Cancelled as c:
            self._stop_watchers()
            raise self._cancelled(c.signal_name) from None
        except _Deadline as d:
            self._stop_watchers()
            raise self._timed_out(d) from None
        finally:
            # Whatever happened, no thread keeps reading pods or logs after run_job returns.
            self._stop_watchers()

    # -- waiting ---------------------------------------------------------------------------------

    def _await(
        self, progress: ProgressReporter, deadline: float, start_by: float | None
    ) -> tuple[JobStatus, JobObject | None]:
        status: JobStatus | None = None
        look = self.look = PendingLook(self.backend, self.ref, progress, self.opts.tuning, on_rejected=self._wake)
        look.start()
        while True:
            self.guard.check()
            if start_by is not None and status is not None and status.phase in STARTED:
                start_by = None
            limit = deadline if start_by is None else min(deadline, start_by)
            remaining = limit - time.monotonic()
            if remaining <= 0:
                raise _Deadline(status, not_started=limit != deadline, pods=progress.pending_summary())
            window = spread_window(self.opts.tuning.watch_window_seconds)
            stream = self.backend.watch(self.ref, timeout_seconds=min(remaining, window))
            with self._stream_lock:
                self._stream = stream
                if look.rejected is not None:
                    stream.close()  # the look found the rejection before this window opened
            try:
                with self.guard.interruptible():
                    for obj in stream:
                        status = parse_job_status(obj)
                        look.job(status)
                        progress.job(status)
                        # Which replicas the job has decides which pod's log is its log.
                        self.replicas = tuple(dict.fromkeys((*self.replicas, *status.replica_names)))
                        if self.follower is not None:
                            self.follower.notify(replicas=self.replicas)
                        if self.on_status is not None:
                            self.on_status(status)
                        if status.phase.terminal:
                            self.stopper.release()  # ended: kept or deleted as the options say
                            look.stop()
                            if status.phase == JobPhase.SUCCEEDED and self._log_source_known():
                                # Nothing the pods do now changes a success: no wait, no last listing.
                                if self.tracker is not None:
                                    self.tracker.stop(0)
                            else:
                                self._settle_pods()
                            return status, obj
                        if status.phase in STARTED:
                            start_by = None
                        if self.cancel.is_set() or time.monotonic() >= (deadline if start_by is None else limit):
                            break
            finally:
                with self._stream_lock:
                    self._stream = None
                stream.close()
            if look.rejected is not None:
                progress.job(look.rejected)
                return look.rejected, None

    def _log_source_known(self) -> bool:
        """On success, whether the pods seen so far are enough: the follower knows the primary pod
        and that it ended (the usual case: pods end before their job does). Otherwise one last look
        at the pods, so that a job whose end outran its pods' news still prints its whole log."""
        if self.tracker is None or self.tracker.failed:
            return False
        if self.follower is None:
            return True
        primary = self.follower.primary(final=True)
        return primary is not None and primary.phase in TERMINAL_POD_PHASES

    def _wake(self) -> None:
        """The look found the job rejected: end the job watch's window now (from the look's thread)."""
        with self._stream_lock:
            if self._stream is not None:
                self._stream.close()

    # -- endings ---------------------------------------------------------------------------------

    def _finish(self, status: JobStatus, obj: JobObject | None) -> JobResult:
        self.stopper.release()  # the job has ended (or was rejected): the options decide what stays
        if status.phase == JobPhase.FAILED or obj is None:
            raise self._failed(status)
        # The job succeeded: the primary pod's log is all there (or, if a success policy ended the
        # job before it, all there is); the follower reads the rest without following.
        self._stop_follower(drain=True)
        ref = JobRef.from_object(obj, namespace=self.ref.namespace)
        result = JobResult(
            name=self.ref.name,
            namespace=self.ref.namespace,
            kind=self.ref.kind.kind,
            uid=ref.uid or self.ref.uid,
            phase=status.phase,
            reason=status.reason,
            message=status.message,
            start_time=status.start_time,
            completion_time=status.completion_time,
            restarts=status.restarts,
            backend=self.backend.name,
        )
        took = f" in {result.duration_seconds:.1f}s" if result.duration_seconds is not None else ""
        self.sink(f"{self.ref.kind.kind} {self.ref.namespace}/{self.ref.name} succeeded{took}")
        if self.opts.delete_after in ("success", "always"):
            self._delete("it succeeded and --delete-after is " + self.opts.delete_after)
        return result

    def _failed(self, status: JobStatus) -> JobFailedError:
        """Capture the failed replicas' log tails, then apply the delete policy; return the error."""
        pods = self._settle_pods()
        self._stop_follower(drain=self._primary_ended(pods))
        book = self.tracker.book if self.tracker is not None else PodBook()
        found = collect_failure_tails(self.backend, self.ref, pods, book, lines=self.opts.tuning.log_tail_lines)
        tails, notes = found.tails, found.notes
        label = f"{self.ref.kind.kind} {self.ref.namespace}/{self.ref.name}"
        parts = [f"{label} failed: {status.reason or 'Failed'}" + (f": {status.message}" if status.message else "")]
        program = program_error(found.tailed, kind=self.ref.kind.kind)
        if program is not None:
            parts.append(f"the program's error: {program}")
        whole = {f"{pod.name}/{pod.container}" for pod, _ in found.tailed if self._followed_whole(pod)}
        for key, tail in tails.items():
            if key in whole and tail.strip():
                # Its whole log was followed into the sink already: not its last lines again below it.
                parts.append(f"--- {key}{notes.get(key, '')}: its log is above, followed to its end ---")
                continue
            parts.append(f"--- last {self.opts.tuning.log_tail_lines} lines of {key}{notes.get(key, '')} ---\n{tail}")
        if not tails and status.reason not in REJECTION_REASONS:
            parts.append("(no failed pod left to read logs from; cleanPodPolicy may have removed them)")
        for line in parts:
            self.sink(line)
        if self.opts.delete_after == "always":
            self._delete("it failed and --delete-after is always")
        else:
            kept = f"the job was kept for debugging: {self.backend.debug_hint(self.ref)}"
            self.sink(kept)
            parts.append(kept)
        # Every part went to the sink already: whoever prints the error next prints its first lines only.
        return JobFailedError(
            "\n".join(parts), reason=status.reason, log_tails=tails, program_error=program, shown=True
        )

    def _followed_whole(self, pod: PodInfo) -> bool:
        return self.followed is not None and self.followed.wrote_whole(pod)

    def _timed_out(self, limit: _Deadline) -> JobTimeoutError:
        self.stopper.release()  # deleted or suspended here; a stop now must not undo a suspension
        phase = limit.status.phase.value if limit.status else "unknown"
        if self.opts.on_timeout == "suspend":
            self.backend.suspend(self.ref)
            action = "suspended it (resume by setting suspend to false)"
        else:
            self.backend.delete(self.ref)
            action = "deleted it"
        label = f"{self.ref.kind.kind} {self.ref.namespace}/{self.ref.name}"
        if limit.not_started:
            pods = f"; pods: {limit.pods}" if limit.pods else ""
            message = (
                f"{label} did not start within {self.opts.start_timeout_seconds:g}s (phase {phase}{pods}); {action}"
            )
        else:
            message = f"{label} did not finish within {self.opts.timeout_seconds:g}s (last phase {phase}); {action}"
        self.sink(message)
        return JobTimeoutError(message)

    def _cancelled(self, signal_name: str) -> JobCancelledError:
        # The stopper's thread deletes it (it may have begun when the signal came): wait for that.
        deleted = self.stopper.finish(signal_name)
        label = f"{self.ref.kind.kind} {self.ref.namespace}/{self.ref.name}"
        message = f"cancelled ({signal_name}); " + (f"deleted {label}" if deleted else f"{label} had ended; kept")
        self.sink(message)
        return JobCancelledError(message)

    def _delete(self, why: str) -> None:
        self.backend.delete(self.ref)
        self.sink(f"deleted {self.ref.kind.kind} {self.ref.namespace}/{self.ref.name}: {why}")

    def _settle_pods(self) -> list[PodInfo]:
        """Stop following the pods and take one look at them, the same for the progress lines, the
        log follower and the failure tails (the pod stream may trail the job's terminal status)."""
        if self.final_pods is None:
            if self.tracker is not None:
                self.tracker.stop(TRACKER_STOP_SECONDS)
            pods = self.backend.pods(self.ref)
            if self.tracker is not None:
                self.tracker.settle(pods)
            self.final_pods = pods
        return self.final_pods

    def _primary_ended(self, pods: list[PodInfo]) -> bool:
        """Whether the followed pod has ended, so its log stream ends by itself and is worth draining."""
        primary = choose_primary(self.ref, pods, self.replicas, final=True)
        return primary is not None and primary.phase in TERMINAL_POD_PHASES

    def _stop_watchers(self) -> None:
        """End the look at events, the pod tracker and the log follower (no draining: the job did
        not end by itself)."""
        if self.look is not None:
            self.look.stop()
        if self.tracker is not None:
            self.tracker.stop(TRACKER_STOP_SECONDS)
        self._stop_follower(drain=False)

    def _stop_follower(self, *, drain: bool) -> None:
        self.job_done.set()
        if self.silence is not None:
            self.silence.stop()  # the job has ended: its silence means nothing now
        follower = self.follower
        if follower is None:
            return
        self.followed = follower
        follower.notify()
        if drain:
            # The primary pod has ended, so its whole log can be read: the follower stops following
            # and reads the rest (log_drain_seconds bounds a read that still hangs).
            follower.end_follow()
            follower.join(self.opts.tuning.log_drain_seconds)
        self.stop_logs.set()
        follower.notify()
        if follower.is_alive():
            follower.join(1.0)
        if follower.is_alive():
            logger.debug("log follower still blocked in a read; it is a daemon thread and ends with the process")
        self.follower = None
        if self.relay is not None:
            self.relay.finish()


class _Deadline(Exception):  # noqa: N818 - control flow, never escapes this module
    def __init__(self, status: JobStatus | None, *, not_started: bool = False, pods: str = "") -> None:
        super().__init__("deadline")
        self.status = status
        self.not_started = not_started
        self.pods = pods
