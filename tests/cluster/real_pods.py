"""Helpers of the real-pod scenarios: the images on the node's registry, the digits on the workspace claim.

Real pods run in `tools.cluster.node.REAL_NAMESPACE` ("restricted" enforced, scheduled only on the
real node); the workspace claim there is a host directory, so the test reads what the pods wrote
(the model, `metrics.json`) from the host.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubetrain.presets import image_ref
from tools.cluster import images
from tools.cluster.controlplane import STATE, Cluster
from tools.cluster.node import REAL_NAMESPACE, WORKSPACE_CLAIM, paths

DATA = "/workspace/datasets/digits"
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip


@dataclass(frozen=True)
class RealNode:
    """The real node as the scenarios use it."""

    cluster: Cluster
    workspace: Path  # the host directory behind the workspace claim
    build_seconds: float

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """kubectl as the admin, in the real namespace."""
        return self.cluster.kubectl("-n", REAL_NAMESPACE, *args, stdin=stdin)

    def fresh_run(self, job: str) -> None:
        """Remove what an earlier run of `job` left (a cluster kept by `make cluster-up` keeps it): a
        kept job object would be adopted by the launch, its checkpoints resumed, its metrics.json read."""
        self.kubectl("delete", "pytorchjobs,mpijobs,jobsets,trainjobs", job, "--ignore-not-found", "--wait=true")
        shutil.rmtree(self.workspace / "runs" / job, ignore_errors=True)

    def pod_json(self, name: str) -> dict[str, Any]:
        """One pod of the real namespace."""
        pod: dict[str, Any] = json.loads(self.kubectl("get", "pod", name, "-o", "json"))
        return pod

    def wait_pod(self, name: str, phase: str, timeout: float) -> dict[str, Any]:
        """Wait until the pod reaches `phase`; AssertionError with its state and log tail if it ends otherwise."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pod = self.pod_json(name)
            now = pod.get("status", {}).get("phase")
            if now == phase:
                return pod
            if now in ("Succeeded", "Failed"):
                break
            time.sleep(1)
        log = self.kubectl("logs", name, "--all-containers", "--tail", "40")
        raise AssertionError(f"pod {name} is {now}, not {phase}; its log:\n{log}")


def prepare(cluster: Cluster, names: list[str]) -> RealNode:
    """Build and push `names`, and put the digits on the workspace claim (a pod of the launcher image)."""
    built = images.ensure(names, STATE / "images.log", node=paths(STATE, cluster.bin_dir))
    node = RealNode(cluster, paths(STATE, cluster.bin_dir).workspace, built.seconds)
    if (node.workspace / "datasets" / "digits" / "dataset.json").exists():
        return node
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "download-digits"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "download", "image": image_ref("launcher"), "securityContext": RESTRICTED_CONTAINER,
                "command": ["kubetrain", "download", "builtin:digits", "--out", DATA, "--shards", "3", "--quiet"],
                "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}],
            }],
            "volumes": [{"name": "workspace", "persistentVolumeClaim": {"claimName": WORKSPACE_CLAIM}}],
        },
    }  # fmt: skip
    node.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod))
    node.wait_pod("download-digits", "Succeeded", 300)
    return node


def render(kind: str, name: str, *args: str) -> dict[str, Any]:
    """`kubetrain render` for the real namespace, reading the digits from the workspace claim."""
    done = subprocess.run(
        [sys.executable, "-m", "kubetrain", "render", kind, "--name", name, "--namespace", REAL_NAMESPACE,
         "--data", DATA, "--workspace-pvc", WORKSPACE_CLAIM, *args, "-o", "yaml"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    manifest: dict[str, Any] = yaml.safe_load(done.stdout)
    return manifest


def metrics(node: RealNode, job: str) -> dict[str, Any]:
    """The `metrics.json` the job's training wrote to its output directory on the claim."""
    found: dict[str, Any] = json.loads((node.workspace / "runs" / job / "output" / "metrics.json").read_text())
    return found


def kill_container(node: RealNode, pod: str) -> None:
    """SIGKILL the first container of `pod` through the node's containerd, as an OOM kill or a crash would end it."""
    status = node.pod_json(pod)["status"]["containerStatuses"][0]
    container_id = status["containerID"].removeprefix("containerd://")
    socket = paths(STATE, node.cluster.bin_dir).containerd_socket
    subprocess.run(
        [str(node.cluster.bin_dir / "ctr"), "--address", str(socket), "--namespace", "k8s.io", "tasks", "kill",
         "--signal", "SIGKILL", container_id],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
