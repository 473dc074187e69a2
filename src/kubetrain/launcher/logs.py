"""Pod logs for the launcher: the primary pod's log followed live, and failed replicas' log tails.

What the old launchers and SDKs got wrong, and what this module does instead:
- they skipped Pending pods, so a follow started right after create printed nothing: here the
  follower waits while the pod is Pending and attaches when its container starts;
- they read the log without a container name, which breaks when Istio adds a sidecar: every read
  names the replica container (the backend's PodInfo carries it);
- after a crash the current container's log is empty or gone: the follower reads the previous
  container's log (`previous=True`), and a failed job's tails do the same for restarted pods;
- a dropped log stream is re-read from the start, skipping the lines already written, so the
  launcher's log has each line once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from kubetrain.backends.base import Backend, JobRef, PodInfo
from kubetrain.errors import BackendError
from kubetrain.launcher.progress import LogSink, describe_pod

logger = logging.getLogger(__name__)

TERMINAL_POD_PHASES = ("Succeeded", "Failed")


def primary_pod(ref: JobRef, pods: Iterable[PodInfo]) -> PodInfo | None:
    """The pod whose log is the job's log: rank 0 of the kind's primary replica (Master, Launcher, ...).

    Falls back to the first pod by (replica type, index) for jobs without such a replica (a JobSet
    whose replicated jobs have other names).
    """
    candidates = sorted(pods, key=lambda p: (p.replica_type.lower(), p.index, p.name))
    for rtype in ref.kind.primary_replica:
        for pod in candidates:
            if pod.replica_type.lower() == rtype.lower() and pod.index == 0:
                return pod
    return candidates[0] if candidates else None


def failed_pods(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """Pods that failed or whose container crashed at least once (their log explains the failure)."""
    return [
        p
        for p in pods
        if p.phase == "Failed" or (p.exit_code not in (None, 0)) or (p.restart_count > 0 and p.phase != "Succeeded")
    ]


def capture_failure_tails(backend: Backend, ref: JobRef, pods: Iterable[PodInfo], tail_lines: int) -> dict[str, str]:
    """The last `tail_lines` lines of each failed pod's log, keyed `pod/container`.

    Called before any deletion (the old launchers deleted failed jobs first, and the logs with
    them). A pod still running after a crash contributes its previous container's log. A log that
    cannot be read is reported as such rather than silently missing.
    """
    tails: dict[str, str] = {}
    for pod in failed_pods(pods):
        previous = pod.phase not in TERMINAL_POD_PHASES and pod.restart_count > 0
        key = f"{pod.name}/{pod.container}"
        try:
            lines = list(backend.pod_log(ref, pod, follow=False, tail_lines=tail_lines, previous=previous))
        except BackendError as e:
            tails[key] = f"<log unavailable: {e}>"
            continue
        tails[key] = "\n".join(line.rstrip("\n") for line in lines[-tail_lines:])
    return tails


class LogFollower(threading.Thread):
    """Follows the primary pod's log into the sink until the pod ends or the launcher stops it.

    It waits for news rather than for a clock: the launcher calls :meth:`notify` whenever the job's
    status changes (a pod started, the job ended), and `poll_seconds` only bounds the wait for
    changes nobody reports (a pod that restarts while the job stays Running). `job_done` asks it to
    read what is left of the log once more, without following, and return; `stop` asks it to return
    at the next line. It never raises: a log that cannot be read is a line in the sink, not a failed job.
    """

    def __init__(
        self,
        backend: Backend,
        ref: JobRef,
        sink: LogSink,
        *,
        poll_seconds: float,
        job_done: threading.Event,
        stop: threading.Event,
        kubectl_hint: bool = False,
    ) -> None:
        super().__init__(name=f"kubetrain-logs-{ref.name}", daemon=True)
        self._backend = backend
        self._ref = ref
        self._sink = sink
        self._poll = poll_seconds
        self._job_done = job_done
        self._stop_event = stop
        self._hint = kubectl_hint
        self._emitted: dict[tuple[str, int], int] = {}  # (pod, restart count) -> lines written
        self._done: set[tuple[str, int]] = set()  # container instances read to their end
        self._news = threading.Event()
        self.lines = 0

    def notify(self) -> None:
        """Something changed (the job's status, its end, a stop request): look at the pods again now."""
        self._news.set()

    def run(self) -> None:
        """Thread body: follow, and report (not raise) whatever goes wrong."""
        try:
            self._follow()
        except BackendError as e:
            self._sink(f"log streaming stopped: {e}")

    def _wait(self) -> bool:
        """Wait for news (or one poll interval); False when the follower should return."""
        if self._stop_event.is_set():
            return False
        self._news.wait(self._poll)
        return not self._stop_event.is_set()

    def _follow(self) -> None:
        announced: str | None = None
        while not self._stop_event.is_set():
            # Cleared before looking, so news that arrives while we look cuts the next wait short.
            self._news.clear()
            # The job has ended: this pass reads what is left of the log, and is the last.
            final = self._job_done.is_set()
            try:
                pod = primary_pod(self._ref, self._backend.pods(self._ref))
            except BackendError as e:
                logger.debug("listing pods for logs failed: %s", e)
                pod = None
            if pod is None or (pod.phase == "Pending" and pod.restart_count == 0):
                if final or not self._wait():
                    return
                continue
            if announced != pod.name:
                hint = (
                    f" (kubectl -n {self._ref.namespace} logs -f {pod.name} -c {pod.container})" if self._hint else ""
                )
                self._sink(f"following the log of {describe_pod(pod)}, container {pod.container}{hint}")
                announced = pod.name
            if pod.restart_count > 0 and (pod.name, pod.restart_count - 1) not in self._done:
                # The container crashed since we last read it (or before we attached): its log
                # lives on only as the previous container's.
                self._read(pod, instance=(pod.name, pod.restart_count - 1), previous=True, follow=False)
            current = (pod.name, pod.restart_count)
            if current in self._done or pod.phase == "Pending":
                if final or pod.phase in TERMINAL_POD_PHASES or not self._wait():
                    return
                continue
            follow = pod.phase not in TERMINAL_POD_PHASES and not final
            new_lines = self._read(pod, instance=current, previous=False, follow=follow)
            if final or (not follow and current in self._done):
                return
            if new_lines == 0 and not self._wait():
                return

    def _read(self, pod: PodInfo, *, instance: tuple[str, int], previous: bool, follow: bool) -> int:
        """Write the instance's lines not written yet; returns how many were new."""
        skip = self._emitted.get(instance, 0)
        count = new = 0
        prefix = f"[{pod.name}{' (previous)' if previous else ''}] "
        try:
            for line in self._backend.pod_log(self._ref, pod, follow=follow, previous=previous):
                count += 1
                if count <= skip:
                    continue
                self._sink(prefix + line.rstrip("\n"))
                new += 1
                self.lines += 1
                self._emitted[instance] = count
                if self._stop_event.is_set():
                    return new
        except BackendError as e:
            # ContainerCreating, a rotated log, a dropped stream: try again on the next round.
            logger.debug("reading the log of %s failed: %s", pod.name, e)
            return new
        if not follow or previous:
            self._done.add(instance)
        return new
