"""TrainJob `trainer.kubeflow.org/v1alpha1` manifests (Kubeflow Trainer v2.3).

The TrainJob carries what to train (`spec.trainer`) and a reference to the runtime; the pod
settings a TrainJob has no field for travel in one runtime patch owned by kubetrain
(`spec.runtimePatches[manager=kubetrain.io/launcher]`), restricted to what the Trainer lets a
patch set on a pod: labels and annotations, volumes and the `node` container's mounts, env and
security context, scheduling, the service account and image pull secrets. Resources go to
`trainer.resourcesPerNode`. The same restricted Pod Security settings as every other kind apply.
"""

from __future__ import annotations

import copy
from typing import Any

from kubetrain.manifests.kinds import TRAINJOB, TRAINJOB_CONTAINER
from kubetrain.manifests.pod import Manifest, build_pod_template, job_metadata, resources_to_k8s, workspace_env
from kubetrain.specs.trainjob import TrainJobSpec

PATCH_MANAGER = "kubetrain.io/launcher"
# The pod fields a runtime patch may set (Trainer v2.3 CRD), and the container fields.
_PATCHABLE_POD_FIELDS = (
    "securityContext",
    "serviceAccountName",
    "nodeSelector",
    "tolerations",
    "imagePullSecrets",
    "volumes",
    "affinity",
)
_PATCHABLE_CONTAINER_FIELDS = ("securityContext", "volumeMounts")


def _pod_patch(spec: TrainJobSpec) -> Manifest:
    """The pod template patch every patched replicated job gets, cut from the common pod template."""
    template = build_pod_template(
        meta=spec.meta,
        replica=spec.trainer,
        container_name=TRAINJOB_CONTAINER,
        role_labels={},
        workspace=spec.workspace,
    )
    pod_spec: dict[str, Any] = template["spec"]
    (container,) = pod_spec["containers"]
    patch_container: Manifest = {"name": TRAINJOB_CONTAINER}
    patch_container.update({k: container[k] for k in _PATCHABLE_CONTAINER_FIELDS if k in container})
    patch_spec: Manifest = {k: pod_spec[k] for k in _PATCHABLE_POD_FIELDS if k in pod_spec}
    patch_spec["containers"] = [patch_container]
    return {"metadata": template["metadata"], "spec": patch_spec}


def build_trainjob(spec: TrainJobSpec) -> Manifest:
    """The TrainJob for `spec`."""
    trainer = spec.trainer
    body: Manifest = {"image": trainer.image}
    if trainer.command:
        body["command"] = list(trainer.command)
    if trainer.args:
        body["args"] = list(trainer.args)
    env = build_pod_template(
        meta=spec.meta, replica=trainer, container_name=TRAINJOB_CONTAINER, role_labels={},
        extra_env=workspace_env(spec.workspace),
    )["spec"]["containers"][0].get("env")  # fmt: skip
    if env:
        body["env"] = env
    body["numNodes"] = trainer.replicas
    if spec.num_proc_per_node is not None:
        body["numProcPerNode"] = spec.num_proc_per_node
    resources = resources_to_k8s(trainer.resources)
    if resources:
        body["resourcesPerNode"] = resources
    pod = _pod_patch(spec)
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": dict(job_metadata(spec.meta)["labels"])},
                "spec": {
                    "replicatedJobs": [
                        {"name": job, "template": {"spec": {"template": copy.deepcopy(pod)}}}
                        for job in spec.patched_jobs
                    ]
                },
            }
        },
    }
    out_spec: Manifest = {
        "runtimeRef": {"apiGroup": TRAINJOB.group, "kind": spec.runtime_kind, "name": spec.runtime},
        "trainer": body,
        "runtimePatches": [patch],
    }
    if spec.active_deadline_seconds is not None:
        out_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return {
        "apiVersion": TRAINJOB.api_version,
        "kind": TRAINJOB.kind,
        "metadata": job_metadata(spec.meta),
        "spec": out_spec,
    }
