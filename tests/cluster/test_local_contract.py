"""The local backend against the real operators: what a training program sees, side by side.

For every job kind, the same manifest (training containers replaced by a probe, see
program_view.py) runs on the local backend and is created on the real control plane, where the
real training-operator, mpi-operator, JobSet controller or Trainer makes the pods. For each pod
the two views are compared: environment variables (values with host names mapped to the local
backend's addresses, the pod IP to the local pod's address, and mount paths to the local
directories that stand for them), the arguments, the working directory, the MPI hostfile, and
the pod's restart policy. Every difference must be one listed in DIFFERENCES (each with its
reason, and named in the table of docs/local-vs-cluster.md); one that is not, or a listed one that went away,
fails the test.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.base import JobRef
from kubetrain.backends.local.backend import LocalBackend
from tests.cluster.jobs import KINDS, Kind, job_pods, render, simulate, templates, until
from tests.cluster.program_view import PROBE_COMMAND, ProgramView, from_pod, from_probe_line
from tools.cluster.controlplane import NAMESPACE, WORKSPACE_CLAIM, Cluster

pytestmark = [pytest.mark.timeout(300)]

LOCAL_VS_CLUSTER = Path(__file__).resolve().parents[2] / "docs" / "local-vs-cluster.md"
WORKSPACE = "/workspace"
_MPI_LOCAL = {"OMPI_MCA_rmaps_base_oversubscribe", "OMPI_MCA_mpi_yield_when_idle"} | (
    {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"} if os.geteuid() == 0 else set()
)
_EVERYWHERE = {"PATH", "KUBETRAIN_LOCAL_CONTAINER", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "cwd"}
# Every difference a program can see, by case; docs/local-vs-cluster.md's table gives the reason for each.
DIFFERENCES: dict[str, set[str]] = {
    "pytorch": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS"},
    "pytorch-elastic": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS"},
    "mpijob": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS", "hostfile"} | _MPI_LOCAL,
    "psjob": _EVERYWHERE,  # its manifest sets KUBETRAIN_BIND_ADDRESS from status.podIP on both sides
    "trainjob-torch": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS"},
    "trainjob-mpi": _EVERYWHERE | {"KUBETRAIN_BIND_ADDRESS", "hostfile"} | _MPI_LOCAL,
}


def probe_manifest(kind: Kind, name: str) -> dict[str, Any]:
    """What the components submit (with the workspace claim), its training containers running the probe."""
    manifest = render(dataclasses.replace(kind, render=(*kind.render, "--workspace-pvc", WORKSPACE_CLAIM)), name)
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


def _local_views(manifest: dict[str, Any], root: Path) -> tuple[dict[str, ProgramView], dict[str, str]]:
    """Run the manifest locally until every pod that runs the probe has printed; views by host name."""
    backend = LocalBackend(root=root, namespace=NAMESPACE)
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
            expected = [p for p in backend.pods(ref) if _runs_probe(manifest, p.replica_type)]
            return bool(views) and len(views) == len(expected) and not _missing_mpi_launcher(manifest, ref, backend)

        until("every local probe printed", all_printed, 90)
        hosts = backend.host_addresses(ref)
        backend.delete(ref)
    finally:
        backend.close()
    return {v.env["HOSTNAME"]: v for v in views.values()}, hosts


def _mpi_trainjob(manifest: Mapping[str, Any]) -> bool:
    return manifest["kind"] == "TrainJob" and "launcher" in templates(manifest)


def _runs_probe(manifest: Mapping[str, Any], replica_type: str) -> bool:
    """MPI workers and nodes run sshd on a cluster, and nothing locally (mpirun starts the ranks)."""
    if manifest["kind"] == "MPIJob":
        return replica_type == "Launcher"
    return not (_mpi_trainjob(manifest) and replica_type == "node")


def _missing_mpi_launcher(manifest: Mapping[str, Any], ref: JobRef, backend: LocalBackend) -> bool:
    # An MPI TrainJob's launcher starts after its nodes: wait for it rather than compare too early.
    return _mpi_trainjob(manifest) and not any(p.replica_type == "launcher" for p in backend.pods(ref))


def _real_views(
    cluster: Cluster, kind: Kind, manifest: dict[str, Any], count: int
) -> dict[str, tuple[ProgramView, dict[str, Any]]]:
    """Create the manifest as the admin; the views of the pods the real operator made, by host name."""
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    name = manifest["metadata"]["name"]

    def probed() -> list[dict[str, Any]]:
        pods = [p for p in job_pods(cluster, kind.kind, name) if p["spec"].get("nodeName") and _probe_container(p)]
        return pods if len(pods) >= count and all((p.get("status") or {}).get("podIP") for p in pods) else []

    pods = until(f"{count} probe pods of {name} scheduled", probed, 90)
    views = {}
    for pod in pods:
        view = from_pod(cluster, pod, _probe_container(pod) or "")
        views[view.env["HOSTNAME"]] = (view, pod)
    cluster.kubectl("delete", kind.plural, name, "-n", NAMESPACE, "--wait=false")
    return views


def _probe_container(pod: Mapping[str, Any]) -> str | None:
    return next((c["name"] for c in pod["spec"]["containers"] if (c.get("command") or []) == PROBE_COMMAND), None)


def _same(real: str, local: str, *, hosts: Mapping[str, str], pod_ip: str, address: str, root: Path) -> bool:
    """Whether a real value and a local one mean the same to the program, modulo what the local backend maps."""
    if real == local:  # a pod's own host name stays a name locally
        return True
    expected = real
    for host in sorted(hosts, key=len, reverse=True):
        expected = expected.replace(host, hosts[host])
    if pod_ip:
        expected = expected.replace(pod_ip, address)
    claim = str(root / "claims" / WORKSPACE_CLAIM)
    local = local.replace(claim, WORKSPACE)
    if local == expected:
        return True
    # Other mount paths (an MPI launcher's /etc/mpi) become directories under the local root.
    return local.startswith(str(root)) and expected.startswith("/") and Path(local).name == Path(expected).name


def differences(
    local: ProgramView, real: ProgramView, pod: Mapping[str, Any], *, hosts: Mapping[str, str], root: Path
) -> dict[str, str]:
    """What differs between the two views, item → how (an env variable's name, `argv`, `cwd`, `hostfile`)."""
    found: dict[str, str] = {}
    address = local.env.get("KUBETRAIN_BIND_ADDRESS", "")
    same = functools.partial(
        _same, hosts=hosts, pod_ip=(pod.get("status") or {}).get("podIP", ""), address=address, root=root
    )
    # The local process inherits this test's environment: what the backend set is what differs from it.
    set_locally = {k for k, v in local.env.items() if os.environ.get(k) != v}
    for key in sorted(set(real.env) | set_locally):
        r, v = real.env.get(key), local.env.get(key)
        if r is None:
            found[key] = f"only locally: {v!r}"
        elif v is None:
            found[key] = f"only on the cluster: {r!r}"
        elif not same(r, v):
            found[key] = f"cluster {r!r}, locally {v!r}"
    if len(real.argv) != len(local.argv) or not all(same(r, v) for r, v in zip(real.argv, local.argv, strict=True)):
        found["argv"] = f"cluster {real.argv}, locally {local.argv}"
    if real.cwd != local.cwd:
        found["cwd"] = f"cluster {real.cwd or 'the image WORKDIR'}, locally {local.cwd}"
    if real.hostfile != local.hostfile:
        found["hostfile"] = f"cluster {real.hostfile!r}, locally {local.hostfile!r}"
    return found


@pytest.mark.parametrize("case", sorted(KINDS))
def test_a_program_sees_on_the_local_backend_what_it_sees_under_the_real_operator(
    cluster: Cluster, tmp_path: Path, case: str
) -> None:
    kind = KINDS[case]
    manifest = probe_manifest(kind, f"contract-{case}")
    local, hosts = _local_views(manifest, tmp_path)
    real = _real_views(cluster, kind, manifest, len(local))
    assert sorted(real) == sorted(local), f"pods (host names) differ: cluster {sorted(real)}, locally {sorted(local)}"
    seen: dict[str, str] = {}
    for host, (view, pod) in sorted(real.items()):
        for item, how in differences(local[host], view, pod, hosts=hosts, root=tmp_path).items():
            seen.setdefault(item, f"{host}: {how}")
        assert pod["spec"].get("restartPolicy") == "OnFailure", (
            f"{host}: the operator gave restartPolicy {pod['spec'].get('restartPolicy')!r}; the local backend's "
            "controllers default every kind's pods to OnFailure"
        )
    unexplained = {k: v for k, v in seen.items() if k not in DIFFERENCES[case]}
    assert not unexplained, f"differences not in DIFFERENCES (fix the local backend or list them): {unexplained}"
    gone = DIFFERENCES[case] - set(seen)
    assert not gone, (
        f"listed differences no longer seen (drop them from DIFFERENCES and docs/local-vs-cluster.md): {sorted(gone)}"
    )
    until(f"contract-{case} deleted", lambda: not job_pods(cluster, kind.kind, f"contract-{case}"), 90)


def test_every_listed_difference_is_explained_in_docs() -> None:
    text = LOCAL_VS_CLUSTER.read_text()
    start = text.index("## What a training program sees")
    end = text.find("\n#", start + 1)
    section = text[start : end if end > 0 else len(text)]
    for item in sorted(set().union(*DIFFERENCES.values())):
        assert f"`{item}`" in section, f"docs/local-vs-cluster.md's table does not explain {item!r}"
