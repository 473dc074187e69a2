"""kubetrain against a real kube-apiserver: strict schemas, RBAC, Pod Security admission, the launcher.

The API server, its admission (PodSecurity), its RBAC authorizer, etcd and the garbage collector
are real (tools/cluster/controlplane.py); kwok plays the nodes. The operators reconciling what the
launcher submits are in test_operators.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.backends.kubernetes import KubernetesBackend
from kubetrain.backends.local.operators.trainer_runtime import resolve
from kubetrain.errors import ManifestError
from kubetrain.manifests.runtimes import kubetrain_mpi_runtime, torch_distributed_runtime
from kubetrain.presets import CHAINERMN_IMAGE
from tools.cluster.controlplane import LAUNCHER_USER, NAMESPACE, Cluster

pytestmark = [pytest.mark.timeout(600)]

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "manifests"
# The jobs; the PS job's NetworkPolicy, a built-in kind the launcher creates beside its JobSet, is
# checked on its own below.
COMPANIONS = ("ps-network-policy",)
CASES = sorted(p.stem for p in GOLDEN.glob("*.yaml") if p.stem not in COMPANIONS)


def _golden(case: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((GOLDEN / f"{case}.yaml").read_text())
    manifest["metadata"]["namespace"] = NAMESPACE
    return manifest


def _launcher(cluster: Cluster) -> KubernetesBackend:
    return KubernetesBackend(namespace=NAMESPACE, kubeconfig=str(cluster.launcher_kubeconfig))


@pytest.mark.parametrize("case", CASES)
def test_rendered_manifests_pass_the_real_servers_strict_validation(cluster: Cluster, case: str) -> None:
    """Server-side dry run with fieldValidation=Strict, as the non-admin launcher user."""
    backend = _launcher(cluster)
    try:
        stored = backend.dry_run(_golden(case))
    finally:
        backend.close()
    assert stored["metadata"]["name"] == _golden(case)["metadata"]["name"]
    assert stored["spec"]  # nothing pruned to emptiness


@pytest.mark.parametrize("case", COMPANIONS)
def test_the_network_policy_passes_strict_validation_as_the_launcher_user(cluster: Cluster, case: str) -> None:
    """Server-side dry run with fieldValidation=Strict, as the launcher user the Role lets create it."""
    stored = json.loads(cluster.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-",
        as_launcher=True, stdin=json.dumps(_golden(case)),
    ))  # fmt: skip
    assert stored["kind"] == "NetworkPolicy" and stored["metadata"]["name"] == _golden(case)["metadata"]["name"]
    assert stored["spec"] == _golden(case)["spec"]  # nothing pruned or defaulted away


def test_a_misplaced_field_is_refused_by_the_real_server_naming_it(cluster: Cluster) -> None:
    manifest = _golden("pytorch-master-only")
    manifest["spec"]["cleanPodPolicy"] = "All"  # the old launchers' mistake: it belongs under runPolicy
    backend = _launcher(cluster)
    try:
        with pytest.raises(ManifestError, match="cleanPodPolicy"):
            backend.dry_run(manifest)
    finally:
        backend.close()


def _pod_templates(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    kind, spec = manifest["kind"], manifest["spec"]
    if kind == "PyTorchJob":
        return [r["template"] for r in spec["pytorchReplicaSpecs"].values()]
    if kind == "MPIJob":
        return [r["template"] for r in spec["mpiReplicaSpecs"].values()]
    if kind == "TrainJob":
        runtime = torch_distributed_runtime() if spec["runtimeRef"]["name"] == "torch-distributed" else (
            kubetrain_mpi_runtime(CHAINERMN_IMAGE))  # fmt: skip
        return _pod_templates(resolve(manifest, runtime))
    return [r["template"]["spec"]["template"] for r in spec["replicatedJobs"]]


@pytest.mark.parametrize("case", CASES)
def test_every_pod_kubetrain_makes_is_admitted_under_restricted(cluster: Cluster, case: str) -> None:
    """The namespace enforces the "restricted" Pod Security Standard; each pod is a server-side dry run."""
    for i, template in enumerate(_pod_templates(_golden(case))):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pss-{i}", "namespace": NAMESPACE, "labels": template["metadata"].get("labels", {})},
            "spec": {**template["spec"], "restartPolicy": template["spec"].get("restartPolicy", "Never")},
        }
        done = subprocess.run(
            [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "create", "--dry-run=server",
             "-f", "-"],
            input=json.dumps(pod), capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, f"{case} pod {i}: {done.stderr}"
        assert "PodSecurity" not in done.stderr, f"{case} pod {i}: {done.stderr}"


def _can(cluster: Cluster, verb: str, resource: str) -> bool:
    """A SelfSubjectAccessReview as the launcher user; `resource` may be `plural/sub.group`."""
    plural_sub, _, group = resource.partition(".")
    plural, _, sub = plural_sub.partition("/")
    name = f"{plural}.{group}" if group else plural
    extra = [f"--subresource={sub}"] if sub else []
    done = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.launcher_kubeconfig), "auth", "can-i", verb,
         name, *extra, "-n", NAMESPACE],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    return done.stdout.strip() == "yes"


def test_the_real_authorizer_grants_the_launcher_exactly_the_role(cluster: Cluster) -> None:
    role = next(d for d in yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml").read_text())
                if d and d["kind"] == "Role")  # fmt: skip
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                name = f"{resource}.{group}" if group else resource
                for verb in rule["verbs"]:
                    assert _can(cluster, verb, name), f"{LAUNCHER_USER} may not {verb} {name}"
    for verb, name in (("update", "pytorchjobs/status.kubeflow.org"), ("delete", "pods"), ("get", "secrets"),
                       ("create", "pods"), ("patch", "trainjobs/status.trainer.kubeflow.org"), ("list", "secrets")):  # fmt: skip
        assert not _can(cluster, verb, name), (
            f"{LAUNCHER_USER} may {verb} {name}, which deploy/rbac.yaml must not grant"
        )


def test_the_launcher_limitrange_gives_a_request_only_to_containers_without_one(cluster: Cluster) -> None:
    """deploy/launcher-limitrange.yaml, as the README has it applied: the real LimitRanger admission
    gives a launcher container that declares no request (a KFP >= 2.15 training task's launcher)
    the default, and leaves a training container's own request alone."""
    namespace = "kubetrain-limitrange"
    limitrange = Path(__file__).resolve().parents[2] / "deploy" / "launcher-limitrange.yaml"
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.kubectl("apply", "-n", namespace, "-f", str(limitrange))
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "step", "namespace": namespace},
            "spec": {"containers": [
                {"name": "launcher", "image": "ghcr.io/kubetrain/launcher:0.1.0"},
                {"name": "trainer", "image": "ghcr.io/kubetrain/pytorch:0.1.0",
                 "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}},
            ]},
        }  # fmt: skip
        stored = json.loads(
            cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(pod))
        )
        launcher, trainer = stored["spec"]["containers"]
        assert launcher["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
        assert trainer["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
        assert stored["status"]["qosClass"] == "Burstable"  # no longer BestEffort, evicted first
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
