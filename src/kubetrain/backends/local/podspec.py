"""A pod's identity (PodPlan), what its job shares (PodContext), and its container translated here.

The translation does what the kubelet does before starting a container: mount volumes (PVC claim
→ a directory shared by every replica and kept across runs; emptyDir → a fresh directory of this
pod; hostPath → the path itself; configMap/secret → files from the data the backend was given;
`/dev/shm` → left alone), evaluate the env (`value`, `$(VAR)`, downward-API `fieldRef`,
`resourceFieldRef`, secret and configMap refs, `envFrom`), and build the command (or the args,
when there is no command). Host names and mount paths in literal env values and in the command
line are then rewritten (`env.Rewriter`); values the API supplies are not.

Nothing here may write outside the volume it is preparing. The manifest's names and paths were
checked at submission (`validate`), and are checked again here for pods whose templates come from
elsewhere (TrainJob runtimes); what only the file system can tell is checked when the pod starts,
as the kubelet does: a subPath is resolved one component at a time and refused if a symbolic link
takes it out of its volume, and configMap and secret volumes are written afresh into an empty
directory on every start, so that a link a previous run of the container left there is never
followed.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kubetrain.backends.local.env import (
    Rewriter,
    expand_references,
    image_environment,
    python_script,
    resolve_command,
    resolve_field_ref,
    resource_field_value,
)
from kubetrain.backends.local.logfile import DEFAULT_MAX_LOG_BYTES
from kubetrain.backends.local.process import LineSink, SessionRegistry
from kubetrain.backends.local.validate import dns1123_label_problem, dns1123_subdomain_problem, go_quote
from kubetrain.errors import BackendError

BIND_ENV = "KUBETRAIN_BIND_ADDRESS"
EventSink = Callable[[str, str, str, str], None]  # type, reason, message, involved object


class PodStartError(BackendError):
    """The pod cannot run on this machine (missing command, secret, config map).

    Never leaves the backend: the pod fails at once and its job fails with this message.
    """


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
    base_env: Mapping[str, str]  # what this machine passes on (env.machine_environment), PATH already set
    cwd: Path
    sink: LineSink | None
    max_grace_seconds: float
    probe_period_seconds: float
    event: EventSink
    wake: Callable[[], None]
    registry: SessionRegistry | None = None
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
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


class ContainerTranslator:
    """The pod's main container, translated to this machine."""

    def __init__(self, plan: PodPlan, ctx: PodContext, container: Mapping[str, Any], pod_dir: Path) -> None:
        self.plan = plan
        self.ctx = ctx
        self._container = container
        self.pod_dir = pod_dir

    def named_ports(self) -> dict[str, int]:
        """Container port name → number (probes may name ports)."""
        return {str(p["name"]): int(p["containerPort"]) for p in self._container.get("ports") or [] if p.get("name")}

    def rewriter(self, mounts: Mapping[str, str] | None = None) -> Rewriter:
        """Host names of the job (with this pod's overrides) and `mounts` → local values."""
        hosts = {**self.ctx.hosts, **self.plan.host_overrides}
        return Rewriter(hosts=hosts, namespace=self.ctx.namespace, mounts=mounts or {})

    def fail(self, what: str) -> PodStartError:
        """The error for something this pod needs that this machine does not have."""
        return PodStartError(
            f"replica {self.plan.prefix} of {self.ctx.kind} {self.ctx.job_name}: {what} "
            f"(on a cluster it runs in image {self.plan.image!r})"
        )

    def launch(self) -> tuple[list[str], dict[str, str], Path]:
        """argv, environment and working directory of the container; PodStartError if it cannot run here."""
        mounts = self._mount_volumes()
        rewriter = self.rewriter(mounts)
        defined, literal = self._container_env()
        # As a container starts: its image's ENV, then (here) what this machine needs, then the pod's own.
        env = {**image_environment(self.plan.image), **self.ctx.base_env}
        env["HOSTNAME"] = self.plan.hostname
        # Only text of the manifest is translated; what the API supplies (downward-API fields,
        # secrets, config maps) is a fact about the pod, e.g. a pod name equal to its service name.
        env.update({k: rewriter.rewrite(v) if k in literal else v for k, v in defined.items()})
        command = [str(x) for x in self._container.get("command") or []]
        args = [str(x) for x in self._container.get("args") or []]
        # No command: the image's ENTRYPOINT would run, which has no local equivalent; an image
        # with an empty ENTRYPOINT runs its args, which is what runs here.
        declared = [expand_references(x, defined) for x in (command + args)]
        argv = [rewriter.rewrite(x) for x in declared]
        if not argv:
            raise self.fail("the container has neither command nor args, and its image's entrypoint cannot run here")
        resolved = resolve_command(argv, env.get("PATH", ""))
        if resolved is None:
            raise self.fail(f"command {argv[0]!r} not found on this machine")
        cwd = self._working_dir(rewriter)
        script = python_script(argv)
        if script is not None and not (cwd / argv[script]).exists():
            # Python would exit 2 with this, and the restart policy start it again, up to the
            # backoff limit, for nothing: known here before the start, the replica fails once.
            here = cwd / argv[script]
            where = f" (on this machine {here})" if str(here) != declared[script] else ""
            raise self.fail(f"python: can't open file {declared[script]!r}{where}: no such file")
        return resolved, env, cwd

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
                    raise self.fail(f"envFrom {ref_key} {ref.get('name')!r} is not available to the local backend")
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
                raise self.fail(f"env {item['name']}: fieldRef {path!r} is not a supported downward-API field")
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
                raise self.fail(
                    f"env {item['name']}: {ref_key} {ref.get('name')}/{ref.get('key')} is not available to the "
                    "local backend (pass secrets=/config_maps= to LocalBackend)"
                )
        raise self.fail(f"env {item['name']}: unsupported valueFrom {sorted(source)}")

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
                base = self._sub_path(str(mount.get("name")), base, str(mount["subPath"]))
            mounts[path] = str(base)
        mounts.update(self.plan.extra_mounts)
        return mounts

    def _sub_path(self, volume_name: str, volume_dir: Path, sub_path: str) -> Path:
        """`volume_dir/sub_path`, created where missing, provided it stays inside the volume.

        The kubelet resolves a subPath and refuses one that leaves its volume through a symbolic
        link (the API server has already refused absolute paths and '..'). Here each component is
        resolved before anything is created, so that no directory is made through a link out of the
        volume. Not race-proof against a process that swaps a component for a link meanwhile (the
        kubelet's file descriptors are), but such a process can write there itself anyway.
        """
        try:
            root = volume_dir.resolve(strict=True)
            current = root
            for part in PurePosixPath(sub_path).parts:
                current = (current / part).resolve()
                if not current.is_relative_to(root):
                    raise self._sub_path_error(volume_name, sub_path, f"it resolves to {current}, outside the volume")
                if not current.exists():
                    current.mkdir(exist_ok=True)
        except (OSError, RuntimeError) as e:  # RuntimeError: a loop of symbolic links (Python 3.11)
            raise self._sub_path_error(volume_name, sub_path, str(e)) from e
        return volume_dir / sub_path

    def _sub_path_error(self, volume_name: str, sub_path: str, why: str) -> PodStartError:
        # The kubelet's words (kubelet_pods.go makeMounts); it keeps the reason to its log, we can say it.
        container = go_quote(self._container.get("name"))
        return self.fail(
            f"failed to prepare subPath for volumeMount {go_quote(volume_name)} of container {container}: "
            f"subPath {go_quote(sub_path)}: {why}"
        )

    def _volume_dir(self, volume: Mapping[str, Any]) -> Path:
        name = str(volume.get("name"))
        if "hostPath" in volume:
            return Path(str(volume["hostPath"].get("path")))
        if "persistentVolumeClaim" in volume:
            claim = str(volume["persistentVolumeClaim"].get("claimName"))
            problem = dns1123_subdomain_problem(claim)
            if problem is not None:  # a directory of claims_dir, never a path
                raise self.fail(f"volume {go_quote(name)}: no PersistentVolumeClaim can be named {go_quote(claim)}")
            path = self.ctx.claims_dir / claim
        else:
            problem = dns1123_label_problem(name)
            if problem is not None:  # the volume becomes a directory named after it
                raise self.fail(f"spec.volumes: Invalid value: {go_quote(name)}: {problem}")
            path = self.pod_dir / "volumes" / name
            if "configMap" in volume or "secret" in volume:
                # Written afresh on every start, as the kubelet projects them: a link that a previous run
                # of the container put in their place must not be followed.
                shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        for key, store in (("configMap", self.ctx.config_maps), ("secret", self.ctx.secrets)):
            if key in volume:
                ref = volume[key] or {}
                ref_name = str(ref.get("name") or ref.get("secretName"))
                data = store.get(ref_name)
                if data is None:
                    if ref.get("optional"):
                        return path
                    raise self.fail(f"{key} volume {name!r} ({ref_name}) is not available to the local backend")
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
