"""Preemption on the real node, made deterministic: slots the scheduler counts, and an "online" pod.

The real node runs other scenarios' pods beside a preemption scenario's (the KFP half of the tier
shares it), so a preemptor sized in CPU could take any low-priority pod. Instead the node advertises
an extended resource (a node status patch, as Kubernetes documents for extended resources), only
the scenario's training pods request it, and the "online" pod asks for one more than is free at a
higher priority: the kube-scheduler's own preemption must then evict exactly one pod that holds
it, and no other pod of the node is a candidate.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.cluster import jobs
from tests.cluster.real_pods import RESTRICTED_CONTAINER, RealNode
from tools.cluster.controlplane import Cluster
from tools.cluster.node_config import NODE_NAME

SLOT = "kubetrain.io/e2e-slot"
ONLINE_CLASS = "kubetrain-e2e-online"
ONLINE_PRIORITY = 100000


def advertise_slots(node: RealNode, count: int, resource: str = SLOT) -> None:
    """The real node's capacity and allocatable of `resource` set to `count`."""
    path = "/status/{}/" + resource.replace("/", "~1")
    patch = [{"op": "add", "path": path.format(field), "value": str(count)} for field in ("capacity", "allocatable")]
    node.cluster.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(patch))

    def advertised() -> bool:
        status = json.loads(node.cluster.kubectl("get", "node", NODE_NAME, "-o", "json"))["status"]
        return str(status.get("allocatable", {}).get(resource)) == str(count)

    jobs.until(f"the node advertising {count} {resource}", advertised, 60)


def hold_slots(manifest: dict[str, Any], replica: str) -> None:
    """Each pod of `replica` (a JobSet's replicated job, a PyTorchJob's replica type: `jobs.templates`)
    requests one SLOT (requests and limits, as the API requires)."""
    for container in jobs.templates(manifest)[replica]["spec"]["containers"]:
        resources = container.setdefault("resources", {})
        resources.setdefault("requests", {})[SLOT] = "1"
        resources.setdefault("limits", {})[SLOT] = "1"


def ensure_online_class(cluster: Cluster) -> None:
    """The PriorityClass of the "online" pods: above every training pod, preempting lower ones."""
    priority_class = {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": ONLINE_CLASS},
        "value": ONLINE_PRIORITY, "preemptionPolicy": "PreemptLowerPriority",
        "description": "kubetrain e2e: online work that preempts training",
    }  # fmt: skip
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(priority_class))


def online_pod_manifest(
    name: str, *, image: str, resource: str = SLOT, count: int = 1, cpu: str = "10m"
) -> dict[str, Any]:
    """An "online" pod at ONLINE_CLASS asking for `count` of `resource` and `cpu` (restricted, idle)."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "online"}},
        "spec": {
            "priorityClassName": ONLINE_CLASS, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "online", "image": image, "securityContext": RESTRICTED_CONTAINER,
                "command": ["python", "-c", "import time; time.sleep(3600)"],
                "resources": {"requests": {"cpu": cpu, "memory": "32Mi", resource: str(count)},
                              "limits": {"memory": "64Mi", resource: str(count)}},
            }],
        },
    }  # fmt: skip


def online_pod(node: RealNode, name: str, *, slots: int = 1, image: str, cpu: str = "10m") -> None:
    """An "online" pod asking for `slots` SLOT in the real namespace: the scheduler preempts lower-priority
    slot holders to place it.

    With `cpu` the victim's own request, the online pod keeps the victim's CPU as well as its slot
    (other pods of the node cannot take it meanwhile), and its deletion frees both at once, for
    the victim's replacement, which the scheduler places ahead of lower-priority pods."""
    ensure_online_class(node.cluster)
    manifest = online_pod_manifest(name, image=image, count=slots, cpu=cpu)
    node.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))
