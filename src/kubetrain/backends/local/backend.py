"""The local Backend: one supervisor per job, its records, and the watch and log plumbing.

What it imitates and how is described in the package docstring (`kubetrain.backends.local`).
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import sys
import threading
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubetrain.backends.base import Backend, EventInfo, JobObject, JobRef, JobWatch, PodInfo, PodWatch
from kubetrain.backends.local.addresses import allocate_block
from kubetrain.backends.local.conditions import rfc3339
from kubetrain.backends.local.env import ensure_python_shims, machine_environment, search_path
from kubetrain.backends.local.logfile import DEFAULT_MAX_LOG_BYTES, read_log
from kubetrain.backends.local.operators.controller import Controller, JobContext
from kubetrain.backends.local.operators.jobset import JobSetController
from kubetrain.backends.local.operators.mpijob import MPIJobController
from kubetrain.backends.local.operators.pytorchjob import PyTorchJobController
from kubetrain.backends.local.operators.trainjob import TrainJobController, runtime_key
from kubetrain.backends.local.podspec import PodContext
from kubetrain.backends.local.process import LineSink
from kubetrain.backends.local.record import JobRecord, RecordJobWatch, RecordPodWatch, stop_all
from kubetrain.backends.local.supervisor import supervise
from kubetrain.backends.local.validate import validate_manifest
from kubetrain.backends.local.watchdog import Watchdog
from kubetrain.errors import BackendError, InvalidInputError, JobConflictError, ManifestError
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB, TRAINJOB
from kubetrain.manifests.runtimes import kubetrain_mpi_runtime, torch_distributed_runtime
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from kubetrain.presets import CHAINERMN_IMAGE

log = logging.getLogger(__name__)
ROOT_ENV = "KUBETRAIN_LOCAL_ROOT"
_CONTROLLERS: dict[str, type[Controller]] = {
    PYTORCHJOB.kind: PyTorchJobController,
    MPIJOB.kind: MPIJobController,
    JOBSET.kind: JobSetController,
}


def default_root() -> Path:
    """`$KUBETRAIN_LOCAL_ROOT`, else `~/.kubetrain/local`."""
    return Path(os.environ.get(ROOT_ENV) or Path.home() / ".kubetrain" / "local")


def claim_directory(root: Path | None, claim: str) -> Path:
    """Where PersistentVolumeClaim `claim` lives for a local backend with `root` (None: the default root)."""
    return (root if root is not None else default_root()) / "claims" / claim


_PRINT_LOCK = threading.Lock()


def _shut_down(records: dict[tuple[str, str, str], JobRecord], watchdog: list[Watchdog]) -> None:
    """Stop every job, then release the watchdog (a finalizer: must not reference the backend)."""
    stop_all(records)
    for dog in watchdog:
        dog.close()


def _print_line(line: str) -> None:
    # One write per line under a lock: replicas' reader threads print concurrently.
    with _PRINT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class LocalBackend(Backend):
    """Runs job manifests as local processes, imitating the Kubeflow and JobSet operators."""

    name = "local"

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        stream_logs: bool = False,
        log_sink: LineSink | None = None,
        namespace: str = "default",
        max_grace_seconds: float = 3.0,
        restart_backoff_seconds: float = 1.0,
        poll_interval_seconds: float = 0.05,
        probe_period_seconds: float = 0.25,
        secrets: Mapping[str, Mapping[str, str]] | None = None,
        config_maps: Mapping[str, Mapping[str, str]] | None = None,
        lock_dir: Path | None = None,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        runtimes: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """`stream_logs` prints every replica's lines as `[master-0] ...` (or hands them to `log_sink`).

        `max_grace_seconds` caps a pod's terminationGracePeriodSeconds (30 s by default on a
        cluster) so that stopping a job takes seconds; `restart_backoff_seconds` scales the
        kubelet's restart back-off (10 s, 20 s, ... on a cluster). `secrets` and `config_maps`
        (name → key → value) supply what secretKeyRef/configMapKeyRef env and volumes read.
        `max_log_bytes` caps each container's log file, as the kubelet's containerLogMaxSize does.
        `runtimes` are the (Cluster)TrainingRuntimes TrainJobs can name (default: Trainer's
        `torch-distributed` and kubetrain's `kubetrain-mpi`).
        """
        # Absolute: rewritten paths must mean the same to a replica whatever its working directory.
        self.root = (Path(root) if root is not None else default_root()).absolute()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InvalidInputError(
                f"local root {self.root}: cannot be used as a directory ({e.strerror}); choose a directory"
            ) from e
        self._sink = log_sink if log_sink is not None else (_print_line if stream_logs else None)
        self._namespace = namespace
        self._grace = max_grace_seconds
        self._backoff = restart_backoff_seconds
        self._poll = poll_interval_seconds
        self._probe_period = probe_period_seconds
        self._secrets = {k: dict(v) for k, v in (secrets or {}).items()}
        self._config_maps = {k: dict(v) for k, v in (config_maps or {}).items()}
        self._lock_dir = lock_dir
        self._max_log_bytes = max_log_bytes
        if runtimes is None:
            runtimes = [torch_distributed_runtime(), kubetrain_mpi_runtime(CHAINERMN_IMAGE)]
        self._runtimes = {runtime_key(r): dict(r) for r in runtimes}
        self._cwd = Path.cwd()
        self._records: dict[tuple[str, str, str], JobRecord] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._watchdog: list[Watchdog] = []  # started with the first job; a list so the finalizer can see it
        self._finalizer = weakref.finalize(self, _shut_down, self._records, self._watchdog)

    # --- helpers for users and tests --------------------------------------------------------------
    def claim_dir(self, claim_name: str) -> Path:
        """The local directory of PersistentVolumeClaim `claim_name` (created on demand)."""
        path = claim_directory(self.root, claim_name)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def host_addresses(self, ref: JobRef) -> dict[str, str]:
        """Every host name the job's manifest can use (service, pod host, `host.subdomain`) → address."""
        return dict(self._record(ref).controller.hosts())

    def rendezvous_ports(self, ref: JobRef) -> dict[int, int]:
        """Manifest port → the port this job's programs are told instead (see `addresses`)."""
        return self._record(ref).controller.ctx.block.ports

    def pod_address(self, ref: JobRef, pod: str) -> str:
        """The loopback address of a pod, by pod name, host name or `host.subdomain`."""
        hosts = self.host_addresses(ref)
        if pod in hosts:
            return hosts[pod]
        for info, local in self._record(ref).pods:
            if info.name == pod and local is not None:
                return local.plan.address
        raise BackendError(f"{ref.kind.kind} {ref.namespace}/{ref.name} has no pod or host named {pod!r}")

    def job_dir(self, ref: JobRef) -> Path:
        """The directory with the job's logs and emptyDir volumes."""
        return self._record(ref).controller.ctx.pods.job_dir

    # --- Backend ----------------------------------------------------------------------------------
    def debug_hint(self, ref: JobRef) -> str:
        """The job's directory: its pods' logs, one file per container start."""
        try:
            return f"its pods' logs are in {self.job_dir(ref) / 'logs'}"
        except BackendError:
            return f"{ref.kind.kind} {ref.namespace}/{ref.name} is gone"

    def submit(self, manifest: Mapping[str, Any]) -> JobRef:
        """Validate the manifest, start its supervisor and return at once (or adopt a running twin)."""
        obj: JobObject = copy.deepcopy(dict(manifest))
        kind = validate_manifest(obj)
        meta = obj["metadata"]
        namespace = str(meta.get("namespace") or self._namespace)
        key = (kind.kind, namespace, str(meta["name"]))
        with self._lock:
            if self._closed:
                raise BackendError("this LocalBackend is closed; create a new one")
            existing = self._records.get(key)
            if existing is not None:
                return self._adopt(existing, meta)
            uid = str(uuid.uuid4())
            meta.update(
                namespace=namespace,
                uid=uid,
                creationTimestamp=rfc3339(),
                resourceVersion="1",
                generation=1,
            )
            obj.pop("status", None)
            record = self._start(obj, JobRef(kind=kind, name=key[2], namespace=namespace, uid=uid))
            self._records[key] = record
        return record.ref

    def _adopt(self, existing: JobRecord, meta: Mapping[str, Any]) -> JobRef:
        mine = existing.obj["metadata"].get("labels") or {}
        theirs = meta.get("labels") or {}
        owners = (LABEL_RUN_ID, LABEL_TASK_ID)
        if all(mine.get(k) and mine.get(k) == theirs.get(k) for k in owners):
            return existing.ref
        ref = existing.ref
        raise JobConflictError(
            f"{ref.kind.kind} {ref.namespace}/{ref.name} already runs locally and belongs to another run "
            f"(its labels {owners[0]}={mine.get(owners[0])!r}, {owners[1]}={mine.get(owners[1])!r}); "
            "delete it or choose another name"
        )

    def _start(self, obj: JobObject, ref: JobRef) -> JobRecord:
        job_dir = self.root / "jobs" / ref.namespace / f"{ref.name}-{ref.uid[:8]}"
        job_dir.mkdir(parents=True, exist_ok=True)
        shims = ensure_python_shims(self.root / "bin")
        # Not the caller's whole environment: a pod does not see the shell that submitted it.
        base_env = machine_environment()
        base_env["PATH"] = search_path(shims, os.environ.get("PATH", ""))
        hosts: dict[str, str] = {}
        holder: list[JobRecord] = []
        wake = threading.Event()

        def event(etype: str, reason: str, message: str, involved: str) -> None:
            if holder:
                holder[0].add_event(etype, reason, message, involved)

        pod_ctx = PodContext(
            kind=ref.kind.kind,
            job_name=ref.name,
            namespace=ref.namespace,
            job_dir=job_dir,
            claims_dir=self.root / "claims",
            hosts=hosts,
            secrets=self._secrets,
            config_maps=self._config_maps,
            base_env=base_env,
            cwd=self._cwd,
            sink=self._sink,
            max_grace_seconds=self._grace,
            probe_period_seconds=self._probe_period,
            event=event,
            wake=wake.set,
            registry=self._ensure_watchdog(),
            max_log_bytes=self._max_log_bytes,
        )
        block = allocate_block(self._lock_dir)
        try:
            ctx = JobContext(ref.name, ref.namespace, ref.uid, pod_ctx, block, self._backoff)
            if ref.kind is TRAINJOB:
                controller: Controller = TrainJobController(obj, ctx, self._runtimes)
            else:
                controller = _CONTROLLERS[ref.kind.kind](obj, ctx)
        except BaseException as e:  # nothing ran: leave nothing behind, hold nothing
            block.release()
            shutil.rmtree(job_dir, ignore_errors=True)
            if isinstance(e, ValueError) and not isinstance(e, ManifestError):  # more pods than a block holds
                raise ManifestError("spec", str(e)) from e
            raise
        hosts.update(controller.hosts())
        record = JobRecord(ref=ref, obj=obj, controller=controller, block=block, wake=wake)
        holder.append(record)
        record.add_event(
            "Normal", f"{ref.kind.kind}Created", f"{ref.kind.kind} {ref.name} is created locally", ref.name
        )
        record.publish()
        thread = threading.Thread(
            target=supervise,
            args=(record,),
            kwargs={"poll_seconds": self._poll, "forget": self._forget},
            name=f"kubetrain-local-{ref.name}",
            daemon=True,
        )
        thread.start()
        return record

    def _ensure_watchdog(self) -> Watchdog | None:
        if not self._watchdog:
            try:
                self._watchdog.append(Watchdog(self._grace))
            except OSError as e:  # the backend still stops its replicas on every path it lives through
                log.warning("no watchdog for local replicas (they may outlive a SIGKILLed kubetrain): %s", e)
                return None
        return self._watchdog[0]

    def _forget(self, record: JobRecord) -> None:
        ref = record.ref
        with self._lock:
            if self._records.get((ref.kind.kind, ref.namespace, ref.name)) is record:
                del self._records[(ref.kind.kind, ref.namespace, ref.name)]
        record.end_watches()

    def _record(self, ref: JobRef) -> JobRecord:
        with self._lock:
            record = self._records.get((ref.kind.kind, ref.namespace, ref.name))
        if record is None:
            raise BackendError(f"{ref.kind.kind} {ref.namespace}/{ref.name} does not exist in this local backend")
        if record.broken is not None:
            raise BackendError(f"{ref.kind.kind} {ref.namespace}/{ref.name}: {record.broken}")
        return record

    def get(self, ref: JobRef) -> JobObject:
        """The job object now, with its status."""
        record = self._record(ref)
        with record.lock:
            return copy.deepcopy(record.obj)

    def watch(self, ref: JobRef, *, timeout_seconds: float) -> JobWatch:
        """The object now, then every new version, until `timeout_seconds` pass or the job is deleted."""
        return RecordJobWatch(self._record(ref), timeout_seconds=timeout_seconds)

    def pods(self, ref: JobRef) -> list[PodInfo]:
        """The job's pods now."""
        return [info for info, _ in self._record(ref).pods]

    def watch_pods(self, ref: JobRef, *, timeout_seconds: float) -> PodWatch:
        """The job's pods now, then whenever the supervisor sees one change, for about `timeout_seconds`."""
        return RecordPodWatch(self._record(ref), timeout_seconds=timeout_seconds)

    def pod_log(
        self, ref: JobRef, pod: PodInfo, *, follow: bool, tail_lines: int | None = None, previous: bool = False
    ) -> Iterator[str]:
        """Lines of a pod's current (or previous) container log; `follow` waits for more until it ends."""
        record = self._record(ref)
        local = next((lp for info, lp in record.pods if info.name == pod.name), None)
        if local is None:
            if any(info.name == pod.name for info, _ in record.pods):
                return iter(())  # a pod with no local process (an MPI worker)
            raise BackendError(f"{ref.kind.kind} {ref.namespace}/{ref.name} has no pod {pod.name!r}")
        path, stream = local.log_file(previous=previous)
        if path is None:
            return iter(())
        return read_log(path, stream=stream, follow=follow, tail_lines=tail_lines)

    def events(self, ref: JobRef, *, pods: Sequence[str] = ()) -> list[EventInfo]:
        """Events about the job and all its pods, oldest first (kept in memory: asking costs nothing)."""
        record = self._record(ref)
        with record.lock:
            return list(record.events)

    def delete(self, ref: JobRef) -> None:
        """Stop every process of the job (foreground) and forget it. Unknown jobs are not an error."""
        with self._lock:
            record = self._records.get((ref.kind.kind, ref.namespace, ref.name))
        if record is None:
            return
        record.delete_requested.set()
        record.wake.set()
        if not record.done.wait(timeout=self._grace + 60):
            raise BackendError(
                f"{ref.kind.kind} {ref.namespace}/{ref.name}: its processes did not stop within a minute"
            )
        self._forget(record)

    def suspend(self, ref: JobRef) -> None:
        """Set the job's suspend field: its processes stop, the object stays (condition Suspended)."""
        self._record(ref).set_suspend(True)

    def resume(self, ref: JobRef) -> None:
        """Clear the suspend field: the job starts again (startTime reset, as the operators do)."""
        self._record(ref).set_suspend(False)

    def close(self) -> None:
        """Stop every job's processes and refuse new submissions. Idempotent."""
        with self._lock:
            self._closed = True
        self._finalizer()
