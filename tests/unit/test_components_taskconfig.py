"""Task settings → training pods: the TaskConfig passthrough, from the compiled pipeline to the manifest."""

# No `from __future__ import annotations`: kfp reads the pipeline's annotations as types.

from typing import Any

import pytest

from kubetrain.errors import InvalidInputError, SpecError
from kubetrain.kfp_runtime.taskconfig import ExplicitResources, pod_options
from kubetrain.manifests import build_manifest
from kubetrain.presets import JobSettings, TrainingParams, ps_job_spec, pytorch_job_spec
from kubetrain.specs import (
    EnvVar,
    KeyRef,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    Resources,
    Toleration,
    Volume,
    VolumeMount,
)
from tests.crd_schema import validate_strict

# What the KFP driver hands the component for a task with resources, env, a toleration, a node
# selector, the workspace claim and a secret volume (Kubernetes JSON fragments).
TASK_CONFIG = {
    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "nvidia.com/gpu": "1"}},
    "env": [
        {"name": "PLAIN", "value": "1"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode", "optional": True}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ],
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"accelerator": "a100"},
    "volumes": [
        {"name": "workspace-pvc", "persistentVolumeClaim": {"claimName": "kubetrain-workspace"}},
        {"name": "creds", "secret": {"secretName": "creds"}},
        {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    ],
    "volumeMounts": [
        {"name": "workspace-pvc", "mountPath": "/workspace"},
        {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch"},
    ],
    # What the KFP driver builds from kfp.kubernetes.add_node_affinity: a required term, and a
    # preferred one (weight given).
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100"]}]}
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
            ],
        }
    },
}


class KfpTaskConfig:
    """The attribute form kfp.dsl.TaskConfig has inside the component."""

    def __init__(self, fragments: dict[str, Any]) -> None:
        self.resources = fragments.get("resources")
        self.env = fragments.get("env")
        self.tolerations = fragments.get("tolerations")
        self.node_selector = fragments.get("nodeSelector")
        self.volumes = fragments.get("volumes")
        self.volume_mounts = fragments.get("volumeMounts")
        self.affinity = fragments.get("affinity")


def test_task_config_becomes_pod_options() -> None:
    pod = pod_options(KfpTaskConfig(TASK_CONFIG), explicit=ExplicitResources(), workspace_claim="kubetrain-workspace")
    assert pod.resources == Resources(cpu="2", memory="4Gi", cpu_limit="4", gpus=1, gpu_resource="nvidia.com/gpu")
    assert pod.env == (
        EnvVar(name="PLAIN", value="1"),
        EnvVar(name="TOKEN", secret_key_ref=KeyRef(name="creds", key="token")),
        EnvVar(name="MODE", config_map_key_ref=KeyRef(name="settings", key="mode", optional=True)),
        EnvVar(name="NODE", field_path="spec.nodeName"),
    )
    assert pod.tolerations == (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)
    assert dict(pod.node_selector) == {"accelerator": "a100"}
    # The workspace claim is mounted by the job spec itself: passing it through would mount it twice.
    assert pod.volumes == (
        Volume(name="creds", secret="creds"),
        Volume(name="scratch", empty_dir=True, empty_dir_medium="Memory", size_limit="1Gi"),
    )
    assert pod.volume_mounts == (
        VolumeMount(name="creds", mount_path="/etc/creds", read_only=True),
        VolumeMount(name="scratch", mount_path="/scratch"),
    )
    assert pod.affinity == NodeAffinity(
        required=(
            NodeSelectorTerm(
                match_expressions=(
                    NodeSelectorRequirement(key="nvidia.com/gpu.product", operator="In", values=("A100",)),
                )
            ),
        ),
        preferred=(
            PreferredSchedulingTerm(
                weight=50,
                preference=NodeSelectorTerm(
                    match_expressions=(NodeSelectorRequirement(key="zone", operator="In", values=("a",)),)
                ),
            ),
        ),
    )


def test_the_mapping_form_gives_the_same_options() -> None:
    as_object = pod_options(
        KfpTaskConfig(TASK_CONFIG), explicit=ExplicitResources(), workspace_claim="kubetrain-workspace"
    )
    as_mapping = pod_options(TASK_CONFIG, explicit=ExplicitResources(), workspace_claim="kubetrain-workspace")
    assert as_object == as_mapping


def test_empty_task_config_and_component_inputs() -> None:
    pod = pod_options(None, explicit=ExplicitResources(cpu="1", memory="2Gi", gpus=2), workspace_claim=None)
    assert pod.resources == Resources(cpu="1", memory="2Gi", gpus=2)
    assert pod.env == ()
    assert pod.volumes == ()


def test_the_same_value_both_ways_is_fine_different_values_are_an_error() -> None:
    task = {"resources": {"requests": {"cpu": "2"}}}
    assert pod_options(task, explicit=ExplicitResources(cpu="2"), workspace_claim=None).resources.cpu == "2"
    with pytest.raises(InvalidInputError, match=r"cpu: the component input says '3' but the task sets '2'"):
        pod_options(task, explicit=ExplicitResources(cpu="3"), workspace_claim=None)


@pytest.mark.parametrize(
    ("fragments", "message"),
    [
        # The driver fills node affinity only; pod (anti-)affinity would mean the launcher's neighbours.
        (
            {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
            "node affinity only",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In"}]}]
                        }
                    }
                }
            },
            r"matchExpressions\[0\]\.values: got \[\]; expected at least one value with operator In",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 0, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}
                        ]
                    }
                }
            },
            r"weight: got 0; expected an integer from 1 to 100",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["x"]}]}
                            ]
                        }
                    }
                }
            },
            "the only field matchFields supports",
        ),
        ({"resources": {"limits": {"ephemeral-storage": "1Gi"}}}, "ephemeral-storage"),
        ({"resources": {"limits": {"nvidia.com/gpu": "1", "amd.com/gpu": "1"}}}, "at most one accelerator"),
        ({"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}, "whole number"),
        ({"volumes": [{"name": "x", "hostPath": {"path": "/x"}}]}, "hostPath"),
        ({"env": [{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}, "resourceFieldRef"),
        ({"bogus": 1}, "unknown fields"),
    ],
)
def test_what_cannot_be_carried_over_is_refused(fragments: dict[str, Any], message: str) -> None:
    with pytest.raises((InvalidInputError, SpecError), match=message):
        pod_options(fragments, explicit=ExplicitResources(), workspace_claim=None)


def test_options_reach_every_training_pod_of_the_manifest() -> None:
    pod = pod_options(TASK_CONFIG, explicit=ExplicitResources(), workspace_claim="kubetrain-workspace")
    spec = pytorch_job_spec(
        JobSettings(
            name="pytorch-0123456789ab",
            params=TrainingParams(),
            pod=pod,
            workspace_pvc="kubetrain-workspace",
            kfp_run_id="run",
            kfp_task_id="task",
        ),
        workers=2,
    )
    manifest = build_manifest(spec)
    validate_strict(manifest)
    for role in ("Master", "Worker"):
        template = manifest["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        (container,) = template["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert container["resources"]["requests"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
        assert template["nodeSelector"] == {"accelerator": "a100"}
        assert template["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert template["affinity"] == TASK_CONFIG["affinity"]  # the driver's fragment, carried over as it was
        env = {e["name"]: e for e in container["env"]}
        assert env["TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "creds"
        assert env["TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "token"
        assert env["PLAIN"] == {"name": "PLAIN", "value": "1"}
        claims = [v for v in template["volumes"] if "persistentVolumeClaim" in v]
        assert [c["persistentVolumeClaim"]["claimName"] for c in claims] == ["kubetrain-workspace"]
        assert {"/workspace", "/etc/creds", "/scratch"} <= {m["mountPath"] for m in container["volumeMounts"]}


def test_ps_servers_bind_their_pod_ip() -> None:
    manifest = build_manifest(ps_job_spec(JobSettings(name="ps-0123456789ab", params=TrainingParams())))
    for rjob in manifest["spec"]["replicatedJobs"]:
        env = {e["name"]: e for e in rjob["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["KUBETRAIN_BIND_ADDRESS"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
