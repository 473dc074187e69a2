"""One local "pod": its volumes, environment and command translated to this machine, and its process.

Controllers (PyTorchJob, MPIJob launcher, JobSet child Jobs) decide when a pod starts, restarts
or stops; this module does what the kubelet would: mount volumes (PVC claim → a directory shared
by every replica and kept across runs; emptyDir → a fresh directory of this pod; hostPath → the
path itself; configMap/secret → files from the data the backend was given; `/dev/shm` → left
alone), evaluate the container's env (`value`, `$(VAR)`, downward-API `fieldRef`, secret and
configMap refs, `envFrom`), run its command (or its args, when it has no command), and run its
readiness probe. Only the pod's main container runs; init containers and sidecars are reported
in a Warning event and skipped.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubetrain.backends.base import PodInfo
from kubetrain.backends.local_env import (
    Rewriter,
    expand_references,
    resolve_command,
    resolve_field_ref,
    resource_field_value,
)
from kubetrain.backends.local_probe import ProbeLoop, build_check
from kubetrain.backends.local_process import LineSink, LogStream, ReplicaProcess

BIND_ENV = "KUBETRAIN_BIND_ADDRESS"
EventSink = Callable[[str, str, str, str], None]  # type, reason, message, involved object
DEFAULT_GRACE_SECONDS = 30.0


class PodStartError(Exception):
    """The pod cannot run on this machine (missing command, secret, config map)."""


@dataclass(frozen=True)
class PodContext:
    """What every pod of one job shares."""

    kind: str
    job_name: str
    namespace: str
    job_dir: Path
    claims_dir: Path
    hosts: Mapping[str, str]
    secrets: Mapping[str, Mapping[str, str]]
    config_maps: Mapping[str, Mapping[str, str]]
    base_env: Mapping[str, str]  # inherited environment, PATH already set
    cwd: Path
    sink: LineSink | None
    max_grace_seconds: float
    probe_period_seconds: float
    event: EventSink
    wake: Callable[[], None]
    log_seq: dict[str, int] = field(default_factory=dict)

    def next_log_path(self, pod_name: str) -> Path:
        """A new log file for the next container started under `pod_name`."""
        seq = self.log_seq.get(pod_name, 0)
        self.log_seq[pod_name] = seq + 1
        return self.job_dir / "logs" / f"{pod_name}.{seq}.log"


@dataclass(frozen=True)
class PodPlan:
    """Who a pod is: identity, template, and what its operator adds."""

    name: str
    hostname: str
    replica_type: str
    index: int
    address: str
    prefix: str  # log prefix, e.g. "master-0"
    uid: str
    template: Mapping[str, Any]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    container_name: str
    image: str
    operator_env: tuple[Mapping[str, Any], ...] = ()  # appended after the container's env
    local_env: tuple[Mapping[str, Any], ...] = ()  # put first: local accommodations a user may override
    extra_mounts: Mapping[str, str] = field(default_factory=dict)
    host_overrides: Mapping[str, str] = field(default_factory=dict)


def main_container(template: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    """The container named `name`, else the first."""
    containers = template["spec"]["containers"]
    for container in containers:
        if name is not None and container.get("name") == name:
            return dict(container)
    return dict(containers[0])


class LocalPod:
    """A pod's runtime state and its current process."""

    def __init__(self, plan: PodPlan, ctx: PodContext) -> None:
        self.plan = plan
        self.ctx = ctx
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.restart_count = 0
        self.exit_code: int | None = None
        self.fatal: str | None = None
        self.created = datetime.now(UTC)
        self.restart_at: float | None = None  # when a pending in-place restart is due
        self._process: ReplicaProcess | None = None
        self._probe: ProbeLoop | None = None
        self._logs: list[Path] = []
        self._streams: list[LogStream] = []
        self.pod_dir = ctx.job_dir / "pods" / plan.name
        # A new pod gets fresh emptyDir volumes, even when it reuses a name.
        shutil.rmtree(self.pod_dir / "volumes", ignore_errors=True)
        self._container = main_container(plan.template, plan.container_name)
        self._warn_skipped_containers()

    # --- what the controllers read ---------------------------------------------------------
    @property
    def running(self) -> bool:
        """The main process is alive."""
        return self._process is not None and self.phase == "Running"

    @property
    def ready(self) -> bool:
        """Running and, if it has a readiness probe, passing it."""
        if not self.running:
            return False
        return self._probe.ready if self._probe is not None else True

    def info(self) -> PodInfo:
        """The pod as the launcher sees it."""
        return PodInfo(
            name=self.plan.name,
            replica_type=self.plan.replica_type,
            index=self.plan.index,
            phase=self.phase,
            container=str(self._container.get("name") or ""),
            reason=self.reason,
            message=self.message,
            restart_count=self.restart_count,
            exit_code=self.exit_code,
            created=self.created,
        )

    def log_file(self, *, previous: bool) -> tuple[Path | None, LogStream | None]:
        """The current (or previous) container's log file and, if still written, its stream."""
        idx = len(self._logs) - (2 if previous else 1)
        if idx < 0:
            return None, None
        stream = self._streams[idx] if idx < len(self._streams) else None
        return self._logs[idx], stream

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or restart) the container. A pod that cannot run here becomes Failed with `fatal` set."""
        self.restart_at = None
        try:
            argv, env, cwd = self._launch()
        except PodStartError as e:
            self.fatal = str(e)
            self.phase, self.reason, self.message = "Failed", "ContainerCannotRun", str(e)
            self.ctx.event("Warning", "Failed", str(e), f"Pod/{self.plan.name}")
            return
        log = LogStream(self.ctx.next_log_path(self.plan.name))
        self._logs.append(log.path)
        self._streams.append(log)
        self._process = ReplicaProcess(
            argv=argv, env=env, cwd=cwd, log=log, prefix=self.plan.prefix, sink=self.ctx.sink
        )
        self.phase, self.reason, self.message, self.exit_code = "Running", "", "", None
        self.ctx.event(
            "Normal",
            "Started",
            f"Started container {self._container.get('name')} (pid {self._process.pid}) at {self.plan.address}",
            f"Pod/{self.plan.name}",
        )
        probe = self._container.get("readinessProbe")
        if probe:
            check = build_check(
                probe,
                address=self.plan.address,
                ports=self._named_ports(),
                exec_argv=lambda a: resolve_command(
                    [self._rewriter().rewrite(expand_references(x, env)) for x in a], env.get("PATH", "")
                ),
                env=env,
            )
            self._probe = ProbeLoop(check, probe, max_period=self.ctx.probe_period_seconds, on_change=self.ctx.wake)

    def poll(self) -> int | None:
        """The exit code if the container has just exited (phase becomes Succeeded or Failed)."""
        if self._process is None or self.phase != "Running":
            return None
        code = self._process.poll()
        if code is None:
            return None
        self._after_exit(code)
        self.ctx.event(
            "Normal" if code == 0 else "Warning",
            "Completed" if code == 0 else "Error",
            f"container exited with code {code}",
            f"Pod/{self.plan.name}",
        )
        return code

    def restart_in_place(self) -> None:
        """The kubelet restarting the container (restartPolicy OnFailure/Always): emptyDirs stay."""
        self.restart_count += 1
        self.start()

    def stop(self, *, phase: str, reason: str, message: str) -> None:
        """Kill the container's processes (SIGTERM, then SIGKILL after the grace period) and reap them."""
        if self._process is not None and self.phase == "Running":
            code = self._process.stop(self._grace())
            self.exit_code = code
            self.ctx.event("Normal", "Killing", f"Stopping container: {message}", f"Pod/{self.plan.name}")
        if self._probe is not None:
            self._probe.stop()
            self._probe = None
        self.phase, self.reason, self.message, self.restart_at = phase, reason, message, None

    def _after_exit(self, code: int) -> None:
        if self._probe is not None:
            self._probe.stop()
            self._probe = None
        self.exit_code = code
        self.phase = "Succeeded" if code == 0 else "Failed"
        self.reason = "Completed" if code == 0 else "Error"
        self.message = f"exit code {code}"

    def _grace(self) -> float:
        declared = self.plan.template.get("spec", {}).get("terminationGracePeriodSeconds")
        grace = float(declared) if isinstance(declared, int | float) else DEFAULT_GRACE_SECONDS
        return min(grace, self.ctx.max_grace_seconds)

    # --- translation ------------------------------------------------------------------------
    def _warn_skipped_containers(self) -> None:
        spec = self.plan.template.get("spec", {})
        skipped = [str(c.get("name")) for c in spec.get("initContainers") or []]
        skipped += [
            str(c.get("name")) for c in spec.get("containers") or [] if c.get("name") != self._container.get("name")
        ]
        if skipped:
            self.ctx.event(
                "Warning",
                "NotRunLocally",
                f"the local backend runs only container {self._container.get('name')!r}; skipped: {', '.join(skipped)}",
                f"Pod/{self.plan.name}",
            )

    def _named_ports(self) -> dict[str, int]:
        return {str(p["name"]): int(p["containerPort"]) for p in self._container.get("ports") or [] if p.get("name")}

    def _rewriter(self, mounts: Mapping[str, str] | None = None) -> Rewriter:
        hosts = {**self.ctx.hosts, **self.plan.host_overrides}
        return Rewriter(hosts=hosts, namespace=self.ctx.namespace, mounts=mounts or {})

    def _fail(self, what: str) -> PodStartError:
        return PodStartError(
            f"replica {self.plan.prefix} of {self.ctx.kind} {self.ctx.job_name}: {what} "
            f"(on a cluster it runs in image {self.plan.image!r})"
        )

    def _launch(self) -> tuple[list[str], dict[str, str], Path]:
        mounts = self._mount_volumes()
        rewriter = self._rewriter(mounts)
        defined, literal = self._container_env()
        env = dict(self.ctx.base_env)
        env["HOSTNAME"] = self.plan.hostname
        # Only text of the manifest is translated; what the API supplies (downward-API fields,
        # secrets, config maps) is a fact about the pod, e.g. a pod name equal to its service name.
        env.update({k: rewriter.rewrite(v) if k in literal else v for k, v in defined.items()})
        command = [str(x) for x in self._container.get("command") or []]
        args = [str(x) for x in self._container.get("args") or []]
        # No command: the image's ENTRYPOINT would run, which has no local equivalent; an image
        # with an empty ENTRYPOINT runs its args, which is what runs here.
        argv = [rewriter.rewrite(expand_references(x, defined)) for x in (command + args)]
        if not argv:
            raise self._fail("the container has neither command nor args, and its image's entrypoint cannot run here")
        resolved = resolve_command(argv, env.get("PATH", ""))
        if resolved is None:
            raise self._fail(f"command {argv[0]!r} not found on this machine")
        return resolved, env, self._working_dir(rewriter)

    def _working_dir(self, rewriter: Rewriter) -> Path:
        declared = self._container.get("workingDir")
        if not declared:
            return self.ctx.cwd
        local = Path(rewriter.local_path(str(declared)))
        if str(local) != str(declared):
            local.mkdir(parents=True, exist_ok=True)  # a directory on a mounted volume, as in the pod
            return local
        if local.is_dir():
            return local
        self.ctx.event(
            "Warning",
            "WorkingDirMissing",
            f"workingDir {declared} does not exist here; running in {self.ctx.cwd}",
            f"Pod/{self.plan.name}",
        )
        return self.ctx.cwd

    def _container_env(self) -> tuple[dict[str, str], set[str]]:
        """The container's env in definition order, and the names whose value is literal text."""
        defined: dict[str, str] = {}
        literal: set[str] = set()
        for source in self._container.get("envFrom") or []:
            prefix = str(source.get("prefix") or "")
            for ref_key, store in (("configMapRef", self.ctx.config_maps), ("secretRef", self.ctx.secrets)):
                ref = source.get(ref_key)
                if not ref:
                    continue
                data = store.get(str(ref.get("name")))
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise self._fail(f"envFrom {ref_key} {ref.get('name')!r} is not available to the local backend")
                defined.update({prefix + k: v for k, v in data.items()})
        items: Sequence[Mapping[str, Any]] = [
            # kubetrain's own servers listen on $KUBETRAIN_BIND_ADDRESS: locally that must be the
            # replica's address, since two replicas on 0.0.0.0 and one port would collide (or,
            # with gRPC's SO_REUSEPORT, silently share connections).
            {"name": BIND_ENV, "value": self.plan.address},
            *self.plan.local_env,
            *(self._container.get("env") or []),
            *self.plan.operator_env,
        ]
        for item in items:
            name = str(item["name"])
            value = self._env_value(item, defined)
            if value is not None:
                defined[name] = value
                if "valueFrom" in item:
                    literal.discard(name)
                else:
                    literal.add(name)
        return defined, literal

    def _env_value(self, item: Mapping[str, Any], defined: Mapping[str, str]) -> str | None:
        if "valueFrom" not in item:
            return expand_references(str(item.get("value") or ""), defined)
        source = item["valueFrom"] or {}
        if "fieldRef" in source:
            path = str(source["fieldRef"].get("fieldPath"))
            spec = self.plan.template.get("spec", {})
            value = resolve_field_ref(
                path,
                name=self.plan.name,
                namespace=self.ctx.namespace,
                uid=self.plan.uid,
                labels=self.plan.labels,
                annotations=self.plan.annotations,
                address=self.plan.address,
                service_account=str(spec.get("serviceAccountName") or "default"),
            )
            if value is None:
                raise self._fail(f"env {item['name']}: fieldRef {path!r} is not a supported downward-API field")
            return value
        if "resourceFieldRef" in source:
            return resource_field_value(source["resourceFieldRef"], self._container.get("resources") or {})
        for ref_key, store in (("secretKeyRef", self.ctx.secrets), ("configMapKeyRef", self.ctx.config_maps)):
            if ref_key in source:
                ref = source[ref_key]
                data = store.get(str(ref.get("name"))) or {}
                if str(ref.get("key")) in data:
                    return data[str(ref.get("key"))]
                if ref.get("optional"):
                    return None
                raise self._fail(
                    f"env {item['name']}: {ref_key} {ref.get('name')}/{ref.get('key')} is not available to the "
                    "local backend (pass secrets=/config_maps= to LocalBackend)"
                )
        raise self._fail(f"env {item['name']}: unsupported valueFrom {sorted(source)}")

    def _mount_volumes(self) -> dict[str, str]:
        spec = self.plan.template.get("spec", {})
        volumes = {str(v.get("name")): v for v in spec.get("volumes") or []}
        mounts: dict[str, str] = {}
        for mount in self._container.get("volumeMounts") or []:
            path = str(mount.get("mountPath"))
            if path.rstrip("/") == "/dev/shm":
                continue  # the host's shared memory is already there
            volume = volumes[str(mount.get("name"))]
            base = self._volume_dir(volume)
            if mount.get("subPath"):
                base = base / str(mount["subPath"])
                base.mkdir(parents=True, exist_ok=True)
            mounts[path] = str(base)
        mounts.update(self.plan.extra_mounts)
        return mounts

    def _volume_dir(self, volume: Mapping[str, Any]) -> Path:
        name = str(volume.get("name"))
        if "persistentVolumeClaim" in volume:
            path = self.ctx.claims_dir / str(volume["persistentVolumeClaim"].get("claimName"))
        elif "hostPath" in volume:
            return Path(str(volume["hostPath"].get("path")))
        else:
            path = self.pod_dir / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        for key, store in (("configMap", self.ctx.config_maps), ("secret", self.ctx.secrets)):
            if key in volume:
                ref = volume[key] or {}
                ref_name = str(ref.get("name") or ref.get("secretName"))
                data = store.get(ref_name)
                if data is None:
                    if ref.get("optional"):
                        return path
                    raise self._fail(f"{key} volume {name!r} ({ref_name}) is not available to the local backend")
                items = ref.get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    target = path / str(item.get("path"))
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(data.get(str(item.get("key")), ""))
        if not any(k in volume for k in ("persistentVolumeClaim", "emptyDir", "configMap", "secret")):
            self.ctx.event(
                "Warning",
                "VolumeNotLocal",
                f"volume {name!r} of type {sorted(k for k in volume if k != 'name')} is an empty directory locally",
                f"Pod/{self.plan.name}",
            )
        return path
