"""The local backend against the real operators: what a training program sees, side by side.

For every job kind, the same manifest (training containers replaced by a probe, contract_probe.py)
runs on the local backend and is created on the real control plane, where the real
training-operator, mpi-operator, JobSet controller or Trainer makes the pods, twice: on a kwok node
(nothing runs; the view is derived from the pod, program_view.py) and on the real node, where the
probe runs in the container and reports what it sees. For each pod the views are compared
(contract.py, which maps host names, pod IPs, the job's rendezvous ports and mount paths to the
local ones first): environment variables, arguments, working directory, MPI hostfile, user and groups,
the job's endpoints, and that every name the job gives resolves and every endpoint answers; and
the pod's restart policy. Every difference must be one listed (DIFFERENCES, and IN_REAL_PODS for
what only a running container shows), each with its reason in the table of
docs/local-vs-cluster.md; one that is not, or a listed one that went away, fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kubetrain.presets import IMAGE_NAMES
from tests.cluster import real_pods
from tests.cluster.contract import (
    DIFFERENCES,
    IN_REAL_PODS,
    differences,
    local_views,
    probe_container,
    probe_manifest,
)
from tests.cluster.jobs import JOBSET_NAME_LABEL, KINDS, TRAINING_JOB_LABEL, Kind, job_pods, until
from tests.cluster.program_view import ProgramView, from_pod, from_probe_line
from tests.cluster.real_pods import RealNode
from tools.cluster import node
from tools.cluster.controlplane import NAMESPACE, STATE, Cluster, ControlPlaneError

pytestmark = [pytest.mark.timeout(600)]

LOCAL_VS_CLUSTER = Path(__file__).resolve().parents[2] / "docs" / "local-vs-cluster.md"
Views = dict[str, tuple[ProgramView, dict[str, Any]]]


def _kwok_views(cluster: Cluster, kind: Kind, manifest: dict[str, Any], count: int) -> Views:
    """Create the manifest as the admin; the views derived from the pods the real operator made, by host name."""
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    name = manifest["metadata"]["name"]

    def probed() -> list[dict[str, Any]]:
        pods = [p for p in job_pods(cluster, kind.kind, name) if p["spec"].get("nodeName") and probe_container(p)]
        return pods if len(pods) >= count and all((p.get("status") or {}).get("podIP") for p in pods) else []

    pods = until(f"{count} probe pods of {name} scheduled", probed, 90)
    views = {}
    for pod in pods:
        view = from_pod(cluster, pod, probe_container(pod) or "")
        views[view.env["HOSTNAME"]] = (view, pod)
    cluster.kubectl("delete", kind.plural, name, "-n", NAMESPACE, "--wait=false")
    return views


def _real_views(real: RealNode, kind: Kind, manifest: dict[str, Any], count: int) -> Views:
    """Create the manifest in the real namespace; what the probe printed in each real pod, by host name."""
    name = manifest["metadata"]["name"]
    label = JOBSET_NAME_LABEL if kind.kind in ("JobSet", "TrainJob") else TRAINING_JOB_LABEL
    real.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    views: dict[str, tuple[ProgramView, dict[str, Any]]] = {}
    states: dict[str, str] = {}

    def printed() -> bool:
        for pod in json.loads(real.kubectl("get", "pods", "-l", f"{label}={name}", "-o", "json"))["items"]:
            pod_name, container = pod["metadata"]["name"], probe_container(pod)
            states[pod_name] = (pod.get("status") or {}).get("phase", "")
            if container is None or pod_name in views or states[pod_name] != "Running":
                continue
            try:
                log = real.kubectl("logs", pod_name, "-c", container)
            except ControlPlaneError:
                continue  # the container is starting
            view = next((v for v in map(from_probe_line, log.splitlines()) if v is not None), None)
            if view is not None:
                views[pod_name] = (view, pod)
        return len(views) >= count

    try:
        until(f"{count} probes in the real pods of {name} to print (pods: {states})", printed, 300)
    finally:
        real.kubectl("delete", kind.plural, name, "--wait=false")
    return {view.env["HOSTNAME"]: (view, pod) for view, pod in views.values()}


def _restart_policy(manifest: Mapping[str, Any], host: str) -> str:
    """The restartPolicy a pod of `manifest` gets: a JobSet's pods their template's (the PS master's
    Never, for its podFailurePolicy), every other pod OnFailure, as the local backend's controllers."""
    name = manifest["metadata"]["name"]
    for rjob in manifest["spec"].get("replicatedJobs", []) if manifest["kind"] == "JobSet" else []:
        if host.startswith(f"{name}-{rjob['name']}-"):
            return str(rjob["template"]["spec"]["template"]["spec"].get("restartPolicy") or "OnFailure")
    return "OnFailure"


def _compare(
    local: Mapping[str, ProgramView],
    cluster: Views,
    hosts: Mapping[str, str],
    ports: Mapping[int, int],
    root: Path,
    listed: set[str],
    manifest: Mapping[str, Any],
) -> None:
    """Every difference is listed, every listed one is seen, every pod restarts as its template says."""
    assert sorted(cluster) == sorted(local), (
        f"pods (host names) differ: cluster {sorted(cluster)}, locally {sorted(local)}"
    )
    seen: dict[str, str] = {}
    for host, (view, pod) in sorted(cluster.items()):
        for item, how in differences(local[host], view, pod, hosts=hosts, root=root, ports=ports).items():
            seen.setdefault(item, f"{host}: {how}")
        expected = _restart_policy(manifest, host)
        assert pod["spec"].get("restartPolicy") == expected, (
            f"{host}: the operator gave restartPolicy {pod['spec'].get('restartPolicy')!r}; the local backend's "
            f"controllers give it {expected}"
        )
    unexplained = {k: v for k, v in seen.items() if k not in listed}
    assert not unexplained, f"differences not listed (fix the local backend or list them): {unexplained}"
    gone = listed - set(seen)
    assert not gone, (
        f"listed differences no longer seen (drop them here and in docs/local-vs-cluster.md): {sorted(gone)}"
    )


@pytest.mark.parametrize("case", sorted(KINDS))
def test_a_program_sees_on_the_local_backend_what_it_sees_under_the_real_operator(
    cluster: Cluster, tmp_path: Path, case: str
) -> None:
    kind = KINDS[case]
    manifest = probe_manifest(kind, f"contract-{case}", NAMESPACE)
    local, hosts, ports = local_views(manifest, tmp_path, NAMESPACE)
    _compare(
        local, _kwok_views(cluster, kind, manifest, len(local)), hosts, ports, tmp_path, DIFFERENCES[case], manifest
    )
    until(f"contract-{case} deleted", lambda: not job_pods(cluster, kind.kind, f"contract-{case}"), 90)


@pytest.fixture(scope="module")
def real(cluster: Cluster) -> RealNode:
    """The real node with every training image on its registry."""
    if not node.running(STATE):
        pytest.skip("no real node in this cluster (KUBETRAIN_REAL_NODE=0)")
    return real_pods.prepare(cluster, list(IMAGE_NAMES))


@pytest.mark.parametrize("case", sorted(KINDS))
def test_a_program_sees_on_the_local_backend_what_it_sees_in_a_real_pod(
    real: RealNode, tmp_path: Path, case: str
) -> None:
    kind = KINDS[case]
    manifest = probe_manifest(kind, f"contract-{case}", node.REAL_NAMESPACE)
    real.kubectl("delete", kind.plural, f"contract-{case}", "--ignore-not-found", "--wait=true")
    local, hosts, ports = local_views(manifest, tmp_path, node.REAL_NAMESPACE)
    cluster = _real_views(real, kind, manifest, len(local))
    _compare(local, cluster, hosts, ports, tmp_path, DIFFERENCES[case] | IN_REAL_PODS, manifest)


def test_every_listed_difference_is_explained_in_docs() -> None:
    text = LOCAL_VS_CLUSTER.read_text()
    start = text.index("## What a training program sees")
    end = text.find("\n#", start + 1)
    section = text[start : end if end > 0 else len(text)]
    for item in sorted(set().union(*DIFFERENCES.values(), IN_REAL_PODS)):
        assert f"`{item}`" in section, f"docs/local-vs-cluster.md's table does not explain {item!r}"
