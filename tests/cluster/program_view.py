"""What a training program sees, on a cluster pod the real operator made and in the local backend's process.

Both sides run the same manifest, whose training containers run a probe instead of the program
(contract_probe.py): it prints its environment, its arguments, its working directory, its user,
(for an MPI launcher) the hostfile Open MPI reads, and which names resolve and endpoints answer,
then waits to be stopped. Locally and in a real pod the probe really runs, so its line is what
the program sees. On a kwok node nothing runs, so the view is derived from the pod the operator
created, as the kubelet and the container runtime would build it: the container's env in order
with `$(VAR)` expansion, downward-API fields, config maps, HOSTNAME from the pod's host name, the
API server's KUBERNETES_SERVICE_* variables, the ENV of kubetrain's images (which a real container
starts with, and the local backend gives too); the hostfile from the config map the operator mounts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain.backends.local.env import IMAGE_ENV, image_repository
from tests.cluster.contract_probe import MARK
from tools.cluster.controlplane import NAMESPACE, Cluster

PROBE = (Path(__file__).parent / "contract_probe.py").read_text()
PROBE_COMMAND = ["python", "-c", PROBE]
# What the kubelet adds for the `kubernetes` Service of the default namespace (always, whatever
# enableServiceLinks says); the address itself is the cluster's.
KUBELET_SERVICE_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


@dataclass
class ProgramView:
    """One pod's program: env, arguments, working directory, MPI hostfile; where the probe ran, also
    its user, and which names resolved and endpoints answered (None when derived from a kwok pod)."""

    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    cwd: str | None = None
    hostfile: str | None = None
    user: dict[str, Any] | None = None
    resolves: dict[str, bool] | None = None
    answers: dict[str, bool] | None = None


def from_probe_line(line: str) -> ProgramView | None:
    """The view a probe printed (locally or in a real pod), or None when `line` is not the probe's."""
    at = line.find(MARK)
    if at < 0:
        return None
    data = json.loads(line[at + len(MARK) :])
    return ProgramView(
        env=data["env"], argv=data["argv"], cwd=data["cwd"], hostfile=data.get("hostfile"),
        user=data["user"], resolves=data["resolves"], answers=data["answers"],
    )  # fmt: skip


_REF = re.compile(r"\$\((\w+)\)")


def _expand(text: str, env: Mapping[str, str]) -> str:
    # The kubelet expands $(VAR) from variables defined earlier; $$ escapes, unknown ones stay.
    return _REF.sub(lambda m: env.get(m.group(1), m.group(0)), text.replace("$$", "\0")).replace("\0", "$")


def _field(pod: Mapping[str, Any], path: str) -> str:
    meta = pod["metadata"]
    simple = {
        "metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.podIP": (pod.get("status") or {}).get("podIP", ""),
        "status.hostIP": (pod.get("status") or {}).get("hostIP", ""),
    }  # fmt: skip
    if path in simple:
        return str(simple[path])
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise AssertionError(f"fieldRef {path!r} is not modelled by this test")


def _config_map(cluster: Cluster, name: str) -> dict[str, str]:
    data: dict[str, str] = json.loads(cluster.kubectl("get", "configmap", name, "-n", NAMESPACE, "-o", "json"))["data"]
    return data


def from_pod(cluster: Cluster, pod: Mapping[str, Any], container_name: str) -> ProgramView:
    """The view the program of `container_name` in `pod` would have on a real node."""
    container = next(c for c in pod["spec"]["containers"] if c["name"] == container_name)
    spec = pod["spec"]
    hostname = spec.get("hostname") or pod["metadata"]["name"][:63]
    # The container runtime starts from the image's ENV (kubetrain's images only: the ENV of another
    # image cannot be known here), then the kubelet adds HOSTNAME and the container's env.
    env: dict[str, str] = {**IMAGE_ENV.get(image_repository(str(container.get("image") or "")), {})}
    env["HOSTNAME"] = hostname
    for source in container.get("envFrom") or ():
        if "configMapRef" in source:
            prefix = source.get("prefix", "")
            env.update({prefix + k: v for k, v in _config_map(cluster, source["configMapRef"]["name"]).items()})
    for item in container.get("env") or ():
        if "valueFrom" not in item:
            env[item["name"]] = _expand(str(item.get("value", "")), env)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            env[item["name"]] = _field(pod, source["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            env[item["name"]] = _config_map(cluster, ref["name"])[ref["key"]]
        else:
            raise AssertionError(f"env {item['name']}: {sorted(source)} is not modelled by this test")
    for name in KUBELET_SERVICE_ENV:
        env.setdefault(name, "<the cluster's>")
    argv = [_expand(str(a), env) for a in (container.get("command") or [])[len(PROBE_COMMAND) :]]
    argv += [_expand(str(a), env) for a in container.get("args") or ()]
    hostfile = None
    path = env.get("OMPI_MCA_orte_default_hostfile")
    if path:
        mount = next(
            (m for m in container.get("volumeMounts") or () if path.startswith(m["mountPath"].rstrip("/") + "/")), None
        )
        volume = next((v for v in spec.get("volumes") or () if mount and v["name"] == mount["name"]), None)
        if mount and volume and "configMap" in volume:
            key = path[len(mount["mountPath"].rstrip("/")) + 1 :]
            for item in volume["configMap"].get("items") or ():
                if item["path"] == key:
                    key = item["key"]
            hostfile = _config_map(cluster, volume["configMap"]["name"]).get(key)
    return ProgramView(env=env, argv=argv, cwd=container.get("workingDir"), hostfile=hostfile)
