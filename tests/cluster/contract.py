"""The contract between the local backend and a cluster: one probe manifest, two views, their differences.

The same manifest of a job kind (its training containers running contract_probe.py) runs on the
local backend and on the cluster; `differences` says what a program would see differently, item
by item: an environment variable's name, `argv`, `cwd`, `hostfile`, `user`, `endpoints`, and
never-acceptable ones (`unresolved`, `unanswered`: a name the job gave that does not resolve, an
endpoint that does not answer). Host names are mapped to the local backend's addresses, a pod's IP
to its local address, the job's rendezvous ports to the ports the local job was given instead, and
mount paths to the local directories that stand for them first.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubetrain.backends.base import JobRef
from kubetrain.backends.local.backend import LocalBackend
from tests.cluster.jobs import Kind, render, simulate, templates, until
from tests.cluster.program_view import KUBELET_SERVICE_ENV, PROBE_COMMAND, ProgramView, from_probe_line
from tools.cluster.controlplane import WORKSPACE_CLAIM

WORKSPACE = "/workspace"
_MPI_LOCAL = {"OMPI_MCA_rmaps_base_oversubscribe", "OMPI_MCA_mpi_yield_when_idle"} | (
    {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"} if os.geteuid() == 0 else set()
)
_EVERYWHERE = {"PATH", "KUBETRAIN_LOCAL_CONTAINER", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "cwd"}
# Every difference a program can see, by case, as derived from the operators' pods on kwok nodes;
# docs/local-vs-cluster.md's table gives the reason for each.
DIFFERENCES: dict[str, set[str]] = {
    "pytorch": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS"},
    "pytorch-elastic": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS"},
    "mpijob": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS", "hostfile"} | _MPI_LOCAL,
    # Its manifest sets KUBETRAIN_BIND_ADDRESS from status.podIP on both sides; its workers'
    # KUBETRAIN_POD_UID (metadata.uid) is each side's own pod's.
    "psjob": _EVERYWHERE | {"KUBETRAIN_POD_UID"},
    "trainjob-torch": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS"},
    "trainjob-mpi": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS", "hostfile"} | _MPI_LOCAL,
}
# What only a running container shows (the derived view cannot): the container's HOME, the
# kubelet's service links, and the user (pods run as uid 1000; locally the user who runs kubetrain).
IN_REAL_PODS = {"HOME", "service links"} | ({"user"} if os.getuid() != 1000 else set())
# The kubelet's service links: `<SVC>_SERVICE_HOST`, `<SVC>_SERVICE_PORT[_<NAME>]`, `<SVC>_PORT[_<N>_<PROTO>[_*]]`,
# for every Service with a cluster IP in the namespace (the API server's two are listed on their own).
_SERVICE_LINK = re.compile(r"_SERVICE_(HOST|PORT(_\w+)?)$|_PORT(_\d+_(TCP|UDP|SCTP)(_\w+)?)?$")


def probe_manifest(kind: Kind, name: str, namespace: str) -> dict[str, Any]:
    """What the components submit (with the workspace claim), its training containers running the probe."""
    manifest = render(
        dataclasses.replace(kind, render=(*kind.render, "--workspace-pvc", WORKSPACE_CLAIM)), name, namespace
    )
    if manifest["kind"] == "TrainJob":
        manifest["spec"]["trainer"]["command"] = PROBE_COMMAND
    for replica, template in templates(manifest).items():
        for container in template["spec"].get("containers") or ():
            # The probe answers no readiness probe; dependsOn Ready must not wait for one.
            container.pop("readinessProbe", None)
            if manifest["kind"] == "MPIJob" and replica != "Launcher":
                continue  # workers run sshd, on the cluster and (not at all) locally
            if manifest["kind"] != "TrainJob":
                container["command"] = PROBE_COMMAND
    return simulate(manifest, seconds=3600)


def runs_probe(manifest: Mapping[str, Any], replica_type: str) -> bool:
    """MPI workers and nodes run sshd on a cluster, and nothing locally (mpirun starts the ranks)."""
    if manifest["kind"] == "MPIJob":
        return replica_type == "Launcher"
    return not (_mpi_trainjob(manifest) and replica_type == "node")


def _mpi_trainjob(manifest: Mapping[str, Any]) -> bool:
    return manifest["kind"] == "TrainJob" and "launcher" in templates(dict(manifest))


def local_views(
    manifest: dict[str, Any], root: Path, namespace: str
) -> tuple[dict[str, ProgramView], dict[str, str], dict[int, int]]:
    """Run the manifest locally until every pod that runs the probe has printed.

    The views by host name, the job's host names → addresses, and its rendezvous ports (manifest
    port → the job's own: torch's stores listen on every interface, so locally each job has its own).
    """
    backend = LocalBackend(root=root, namespace=namespace)
    try:
        ref = backend.submit(manifest)
        views: dict[str, ProgramView] = {}

        def all_printed() -> bool:
            for pod in backend.pods(ref):
                if pod.name in views:
                    continue
                for line in backend.pod_log(ref, pod, follow=False):
                    view = from_probe_line(line)
                    if view is not None:
                        views[pod.name] = view
            expected = [p for p in backend.pods(ref) if runs_probe(manifest, p.replica_type)]
            return bool(views) and len(views) == len(expected) and not _missing_mpi_launcher(manifest, ref, backend)

        until("every local probe printed", all_printed, 180)
        hosts = backend.host_addresses(ref)
        ports = backend.rendezvous_ports(ref)
        backend.delete(ref)
    finally:
        backend.close()
    return {v.env["HOSTNAME"]: v for v in views.values()}, hosts, ports


def _missing_mpi_launcher(manifest: Mapping[str, Any], ref: JobRef, backend: LocalBackend) -> bool:
    # An MPI TrainJob's launcher starts after its nodes: wait for it rather than compare too early.
    return _mpi_trainjob(manifest) and not any(p.replica_type == "launcher" for p in backend.pods(ref))


def probe_container(pod: Mapping[str, Any]) -> str | None:
    """The name of the pod's container that runs the probe, if one does."""
    return next((c["name"] for c in pod["spec"]["containers"] if (c.get("command") or []) == PROBE_COMMAND), None)


def _as_local(
    real: str, *, hosts: Mapping[str, str], pod_ip: str, address: str, ports: Mapping[int, int] | None = None
) -> str:
    """A cluster value as the local backend would give it: host names, the pod IP and rendezvous ports mapped.

    A rendezvous port is mapped where it is the whole value (MASTER_PORT) or a `host:port`'s port.
    """
    for host in sorted(hosts, key=len, reverse=True):
        real = real.replace(host, hosts[host])
    real = real.replace(pod_ip, address) if pod_ip else real
    for cluster_port, local_port in (ports or {}).items():
        if real == str(cluster_port):
            return str(local_port)
        real = re.sub(rf"(?<=:){cluster_port}(?!\d)", str(local_port), real)
    return real


def _same(
    real: str, local: str, *, hosts: Mapping[str, str], pod_ip: str, address: str, root: Path, ports: Mapping[int, int]
) -> bool:
    """Whether a real value and a local one mean the same to the program, modulo what the local backend maps."""
    if real == local:  # a pod's own host name stays a name locally
        return True
    expected = _as_local(real, hosts=hosts, pod_ip=pod_ip, address=address, ports=ports)
    local = local.replace(str(root / "claims" / WORKSPACE_CLAIM), WORKSPACE)
    if local == expected:
        return True
    # Other mount paths (an MPI launcher's /etc/mpi) become directories under the local root; a list
    # of paths (PATH) is not one of them.
    return (
        ":" not in local
        and local.startswith(str(root))
        and expected.startswith("/")
        and Path(local).name == Path(expected).name
    )


def _env_item(key: str) -> str:
    """The item a variable is reported under: the kubelet's service links are one item."""
    if key in KUBELET_SERVICE_ENV:
        return key
    return "service links" if _SERVICE_LINK.search(key) else key


def differences(
    local: ProgramView,
    real: ProgramView,
    pod: Mapping[str, Any],
    *,
    hosts: Mapping[str, str],
    root: Path,
    ports: Mapping[int, int] | None = None,
) -> dict[str, str]:
    """What differs between the two views, item → how (an env variable's name, `argv`, `cwd`, `hostfile`, ...)."""
    found: dict[str, str] = {}
    address = local.env.get("KUBETRAIN_BIND_ADDRESS", "")
    pod_ip = (pod.get("status") or {}).get("podIP", "")
    same = functools.partial(_same, hosts=hosts, pod_ip=pod_ip, address=address, root=root, ports=ports or {})
    # The local process gets part of this machine's environment: what the backend set is what differs from it.
    set_locally = {k for k, v in local.env.items() if os.environ.get(k) != v}
    for key in sorted(set(real.env) | set_locally):
        r, v = real.env.get(key), local.env.get(key)
        how = None
        if r is None:
            how = f"only locally: {v!r}"
        elif v is None:
            how = f"only on the cluster: {r!r}"
        elif not same(r, v):
            how = f"cluster {r!r}, locally {v!r}"
        if how is not None:
            found.setdefault(_env_item(key), f"{key}: {how}")
    if len(real.argv) != len(local.argv) or not all(same(r, v) for r, v in zip(real.argv, local.argv, strict=True)):
        found["argv"] = f"cluster {real.argv}, locally {local.argv}"
    if real.cwd != local.cwd:
        found["cwd"] = f"cluster {real.cwd or 'the image WORKDIR'}, locally {local.cwd}"
    if real.hostfile != local.hostfile:
        found["hostfile"] = f"cluster {real.hostfile!r}, locally {local.hostfile!r}"
    if real.user is not None and real.user != local.user:
        found["user"] = f"cluster {real.user}, locally {local.user}"
    if real.answers is not None and local.answers is not None:
        mapped = {_as_local(e, hosts=hosts, pod_ip=pod_ip, address=address, ports=ports) for e in real.answers}
        if mapped != set(local.answers):
            found["endpoints"] = f"cluster {sorted(real.answers)}, locally {sorted(local.answers)}"
    for side, view in (("cluster", real), ("locally", local)):
        unresolved = [h for h, ok in (view.resolves or {}).items() if not ok]
        if unresolved:
            found.setdefault("unresolved", f"{side}: {unresolved} do not resolve")
        unanswered = [e for e, ok in (view.answers or {}).items() if not ok]
        if unanswered:
            found.setdefault("unanswered", f"{side}: nothing answers at {unanswered}")
    return found
