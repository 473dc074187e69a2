"""Pod logs for the launcher: the primary pod's log followed live, and failed replicas' log tails.

What the old launchers and SDKs got wrong, and what this module does instead:
- they skipped Pending pods, so a follow started right after create printed nothing: here the
  follower waits while the pod is Pending and attaches when its container starts;
- they read the log without a container name, which breaks when Istio adds a sidecar: every read
  names the replica container (the backend's PodInfo carries it);
- after a crash the current container's log is empty or gone: the follower reads the previous
  container's log (`previous=True`), and a failed job's tails do the same for restarted pods;
- a dropped log stream is re-read from the start, skipping the lines already written, so the
  launcher's log has each line once;
- the followed pod is index 0 of the most primary replica the job has (`primary_pod`); while that
  replica has no pod yet (an MPI TrainJob's launcher, created once its nodes are Ready) the
  follower waits for it rather than attaching to another pod whose log may never end (sshd).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable

from kubetrain.backends.base import Backend, JobRef, LogStream, PodInfo
from kubetrain.errors import BackendError
from kubetrain.launcher.progress import LogSink, describe_pod

logger = logging.getLogger(__name__)

TERMINAL_POD_PHASES = ("Succeeded", "Failed")


def primary_pod(ref: JobRef, pods: Iterable[PodInfo], replicas: Collection[str]) -> PodInfo | None:
    """The pod whose log is the job's log: index 0 of the most primary replica the job has.

    `replicas` are the job's replica types as far as it has named them (JobStatus.replica_names).
    The kind lists its primary replicas in order (`JobKind.primary_replica`: a TrainJob's launcher,
    else its node); one the job has but that has no pod yet is waited for (None), never skipped:
    an MPI TrainJob's launcher pod is created only once every node is Ready, and a node runs
    sshd, whose log never ends, so following node 0 would never show mpirun's output. For the same
    reason no pod is chosen before the job has named its replicas. A job with none of the kind's
    primary replicas (a JobSet with other names) gets the first pod by (replica type, index).
    """
    known = {name.lower() for name in replicas}
    if not known:
        return None
    candidates = sorted(pods, key=lambda p: (p.replica_type.lower(), p.index, p.name))
    for rtype in ref.kind.primary_replica:
        for pod in candidates:
            if pod.replica_type.lower() == rtype.lower() and pod.index == 0:
                return pod
        if rtype.lower() in known:
            return None  # the job has this replica; its pod is still to come
    return candidates[0] if candidates else None


def guess_primary_pod(ref: JobRef, pods: Iterable[PodInfo]) -> PodInfo | None:
    """The primary pod judged from the pods alone (the job never named its replicas): index 0 of
    the first of the kind's primary replicas that has a pod, else the first pod."""
    candidates = sorted(pods, key=lambda p: (p.replica_type.lower(), p.index, p.name))
    for rtype in ref.kind.primary_replica:
        for pod in candidates:
            if pod.replica_type.lower() == rtype.lower() and pod.index == 0:
                return pod
    return candidates[0] if candidates else None


def choose_primary(ref: JobRef, pods: Iterable[PodInfo], replicas: Collection[str], *, final: bool) -> PodInfo | None:
    """`primary_pod`; once the job has ended (`final`) without naming its replicas, the best guess."""
    if replicas:
        return primary_pod(ref, pods, replicas)
    # Nothing will block any more: at the end every log is read without following.
    return guess_primary_pod(ref, pods) if final else None


def failed_pods(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """Pods that failed or whose container crashed at least once (their log explains the failure)."""
    return [
        p
        for p in pods
        if p.phase == "Failed" or (p.exit_code not in (None, 0)) or (p.restart_count > 0 and p.phase != "Succeeded")
    ]


def crash_tail(backend: Backend, ref: JobRef, pod: PodInfo, tail_lines: int) -> str:
    """The last `tail_lines` lines of the pod's crashed (or last) container; BackendError if unreadable.

    A pod still running after a crash (restarted, or in CrashLoopBackOff) contributes its previous
    container's log: the current one is empty or belongs to the next attempt.
    """
    previous = pod.phase not in TERMINAL_POD_PHASES and pod.restart_count > 0
    lines = list(backend.pod_log(ref, pod, follow=False, tail_lines=tail_lines, previous=previous))
    return "\n".join(line.rstrip("\n") for line in lines[-tail_lines:])


def read_tail(backend: Backend, ref: JobRef, pod: PodInfo, tail_lines: int) -> str:
    """`crash_tail`, or why it cannot be read (a failure report names every failed pod)."""
    try:
        return crash_tail(backend, ref, pod, tail_lines)
    except BackendError as e:
        return f"<log unavailable: {e}>"


class LogFollower(threading.Thread):
    """Follows the primary pod's log into the sink until the pod ends or the launcher stops it.

    It is told rather than asking: the pod tracker hands it every new set of the job's pods and
    the await loop the job's replica names (:meth:`notify`); it lists nothing itself. It waits for
    that news; `poll_seconds` only bounds the wait before a log read that failed (a transient API
    error) is tried again. `job_done` asks it to read what is left of the log once more, without
    following, and return; `stop` asks it to return at the next line. It never raises: a log that
    cannot be read is a line in the sink, not a failed job.
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
        self._lock = threading.Lock()
        self._pods_told = threading.Condition(self._lock)
        self._pods_version = 0  # how many pod sets it was told
        self._pods: list[PodInfo] = []
        self._replicas: tuple[str, ...] = ()
        self._stream: LogStream | None = None  # the stream being followed, for end_follow
        self._followed: tuple[str, int] = ("", 0)  # the container instance (pod, restart count) it reads
        self.lines = 0

    def notify(self, *, pods: list[PodInfo] | None = None, replicas: Collection[str] | None = None) -> None:
        """News: the job's pods now, its replica names, or only "look again" (its end, a stop request)."""
        ended: LogStream | None = None
        with self._lock:
            if pods is not None:
                self._pods = list(pods)
                self._pods_version += 1
                name, instance = self._followed
                if self._stream is not None and any(
                    p.name == name and (p.phase in TERMINAL_POD_PHASES or p.restart_count != instance) for p in pods
                ):
                    # The followed container has ended (the pod ended, or it restarted), so its log
                    # is whole: read the rest now rather than wait for the server to end the stream
                    # (kwok never does; a follow asked for just after a restart reads the new
                    # container, which runs on) or for the job's end, minutes later under a busy operator.
                    ended = self._stream
            if replicas is not None:
                self._replicas = tuple(replicas)
            self._pods_told.notify_all()
        if ended is not None:
            ended.close()
        self._news.set()

    def end_follow(self) -> None:
        """The job and its primary pod have ended: stop waiting on the followed stream now.

        The whole log is there to read, so the follower's last pass reads what it has not
        written yet without following. Waiting for the server to end the stream instead would
        cost whatever it takes to (a kubelet ends it when the container exits; kwok never does).
        """
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        self.notify()

    def wrote_whole(self, pod: PodInfo) -> bool:
        """Whether the sink has every line of the container a failure tail of `pod` reads (`crash_tail`'s)."""
        previous = pod.phase not in TERMINAL_POD_PHASES and pod.restart_count > 0
        with self._lock:
            return (pod.name, pod.restart_count - 1 if previous else pod.restart_count) in self._done

    def primary(self, *, final: bool) -> PodInfo | None:
        """The pod this follower follows (or will), from what it was told."""
        with self._lock:
            pods, replicas = self._pods, self._replicas
        return choose_primary(self._ref, pods, replicas, final=final)

    def run(self) -> None:
        """Thread body: follow, and report (not raise) whatever goes wrong."""
        try:
            self._follow()
        except BackendError as e:
            self._sink(f"log streaming stopped: {e}")

    def _wait(self) -> bool:
        """Wait for news (at most one poll interval); False when the follower should return."""
        if self._stop_event.is_set():
            return False
        self._news.wait(self._poll)
        return not self._stop_event.is_set()

    def _wait_for_pods(self, seen: int) -> bool:
        """Wait until told a pod set newer than version `seen` (at most one poll interval); False
        when the follower should return."""
        with self._pods_told:
            self._pods_told.wait_for(
                lambda: self._pods_version != seen or self._stop_event.is_set() or self._job_done.is_set(),
                timeout=self._poll,
            )
        return not self._stop_event.is_set()

    def _follow(self) -> None:
        announced: str | None = None
        while not self._stop_event.is_set():
            # Cleared before looking, so news that arrives while we look cuts the next wait short.
            self._news.clear()
            # The job has ended: this pass reads what is left of the log, and is the last.
            final = self._job_done.is_set()
            pod = self.primary(final=final)
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
                # Read to its end: wait for news (a restart, or a new primary pod after a JobSet
                # restart); being told costs nothing, so only the job's end stops the wait.
                if final or not self._wait():
                    return
                continue
            follow = pod.phase not in TERMINAL_POD_PHASES and not final
            with self._lock:
                seen = self._pods_version
            new_lines = self._read(pod, instance=current, previous=False, follow=follow)
            if final:
                return
            if follow:
                # A followed stream ends when its container does; the pod stream tells why (ended,
                # restarted) a moment later. Wait for that rather than re-read what is known so far
                # (a stream cut while the container runs is re-read after one poll interval, from
                # where it stopped: lines already written are skipped).
                if not self._wait_for_pods(seen):
                    return
            elif new_lines == 0 and not self._wait():
                return

    def _read(self, pod: PodInfo, *, instance: tuple[str, int], previous: bool, follow: bool) -> int:
        """Write the instance's lines not written yet; returns how many were new."""
        skip = self._emitted.get(instance, 0)
        count = new = 0
        prefix = f"[{pod.name}{' (previous)' if previous else ''}] "
        lines: Iterable[str]
        if follow:
            stream = self._backend.follow_log(self._ref, pod)
            with self._lock:
                self._stream, self._followed = stream, instance
            lines = stream
        else:
            lines = self._backend.pod_log(self._ref, pod, follow=False, previous=previous)
        try:
            for line in lines:
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
        finally:
            if follow:
                with self._lock:
                    self._stream = None
        if not follow or previous:
            with self._lock:
                self._done.add(instance)
        return new
