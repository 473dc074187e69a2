"""manifest_patch may not cross the "restricted" line nor change what the step owns (issue 33, item 3)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubetrain.errors import ManifestError
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.request_base import JobPlan
from kubetrain.manifests import build_manifest
from kubetrain.manifests.patch import apply_manifest_patch
from kubetrain.presets import PodOptions, TrainingParams
from tests.conftest import CRD_DIR
from tests.crd_schema import validate_strict
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "train"}
PLAN = JobPlan(name="pytorch-0123456789ab", params=TrainingParams(), pod=PodOptions())
WORKER = ("spec", "pytorchReplicaSpecs", "Worker", "template")
WHERE = "spec.pytorchReplicaSpecs.Worker.template"


def _manifest(**kwargs: Any) -> dict[str, Any]:
    return build_manifest(PyTorchRequest(**IDS, workers=1, timeout_seconds=600, **kwargs).to_spec(PLAN))


def _at(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    *outer, last = path
    nested: dict[str, Any] = {last: value}
    for key in reversed(outer):
        nested = {key: nested}
    return nested


def _pod(value: dict[str, Any]) -> dict[str, Any]:
    return _at((*WORKER, "spec"), value)


def _container(manifest: dict[str, Any], **changes: Any) -> list[dict[str, Any]]:
    """The Worker's container list as a patch must give it: kubetrain's container with `changes`."""
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return [{**container, **changes}]


def _refused(patch: dict[str, Any], field: str, manifest: dict[str, Any] | None = None) -> str:
    with pytest.raises(ManifestError) as caught:
        apply_manifest_patch(manifest or _manifest(), patch, crd_dir=CRD_DIR)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"manifest_patch: {field}{'' if field.endswith('[') else ':'}"), message
    return message


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        ({"hostNetwork": True}, "hostNetwork"),
        ({"hostPID": True}, "hostPID"),
        ({"hostIPC": True}, "hostIPC"),
        ({"serviceAccountName": "admin"}, "serviceAccountName"),
        ({"serviceAccount": "admin"}, "serviceAccount"),
        ({"automountServiceAccountToken": True}, "automountServiceAccountToken"),
        ({"automountServiceAccountToken": None}, "automountServiceAccountToken"),
        ({"securityContext": {"runAsUser": 0}}, "securityContext"),
        ({"initContainers": [{"name": "x", "image": "busybox", "command": ["sh"]}]}, "initContainers"),
        ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "volumes[root].hostPath"),
        ({"volumes": [{"name": "tok", "secret": {"secretName": "admin-token"}}]}, "volumes[tok].secret"),
        ({"volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]},
         "volumes[t].projected"),
        ({"activeDeadlineSeconds": 5}, None),  # a pod deadline may be added (it only shortens the job's life)
    ],
)  # fmt: skip
def test_a_pod_level_addition_past_the_line_is_refused_naming_the_field(pod: dict[str, Any], field: str | None) -> None:
    manifest = _manifest()
    if field is None:
        apply_manifest_patch(manifest, _pod(pod), crd_dir=CRD_DIR)
        return
    message = _refused(_pod(pod), f"{WHERE}.spec.{field}", manifest)
    assert "may not" in message


def test_a_new_volume_is_added_beside_kubetrains_and_dropping_them_is_refused() -> None:
    manifest = _manifest()
    built = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"]
    # Named items merge by name (issue 48.11): the patch names only the volume it adds.
    patched = apply_manifest_patch(manifest, _pod({"volumes": [{"name": "cache", "emptyDir": {}}]}), crd_dir=CRD_DIR)
    volumes = patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"]
    assert volumes == [*built, {"name": "cache", "emptyDir": {}}]
    # Deleting the list drops /workspace: refused.
    _refused(_pod({"volumes": None}), f"{WHERE}.spec.volumes[workspace]", manifest)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"image": "evil:latest"}, "image"),
        ({"command": ["sh", "-c", "curl x | sh"]}, "command"),
        ({"args": ["--steal"]}, "args"),
        ({"securityContext": {"privileged": True}}, "securityContext.privileged"),
        ({"securityContext": {"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}, "allowPrivilegeEscalation": False,
                              "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}, "securityContext"),
        ({"ports": [{"containerPort": 80, "hostPort": 80}]}, "ports[1].hostPort"),  # after kubetrain's port
        ({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, "env[T].valueFrom.secretKeyRef"),
        ({"envFrom": [{"secretRef": {"name": "s"}}]}, "envFrom[0].secretRef"),
    ],
)  # fmt: skip
def test_a_container_change_past_the_line_is_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    manifest = _manifest()
    patch = _pod({"containers": _container(manifest, **changes)})
    _refused(patch, f"{WHERE}.spec.containers[pytorch].{field}", manifest)


def test_a_containers_patch_names_what_it_adds_and_keeps_kubetrains_env_and_mounts() -> None:
    manifest = _manifest()
    (container,) = _container(manifest)
    # What the sweep did: the container given with only a new env var. The pod used to lose
    # /workspace (round 1), then the patch was refused (round 4); now it merges by name.
    patch = _pod({"containers": [{"name": "pytorch", "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
                                  "resources": {"limits": {"memory": "2Gi"}}}]})  # fmt: skip
    patched = apply_manifest_patch(manifest, patch, crd_dir=CRD_DIR)
    (merged,) = patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert merged == {**container, "env": [*container["env"], {"name": "OMP_NUM_THREADS", "value": "1"}],
                      "resources": {**container.get("resources", {}), "limits": {"memory": "2Gi"}}}  # fmt: skip
    # Removing or changing kubetrain's items is still refused.
    _refused(_pod({"containers": [{"name": "pytorch", "volumeMounts": None}]}),
             f"{WHERE}.spec.containers[pytorch].volumeMounts[workspace]", manifest)  # fmt: skip
    name = container["env"][0]["name"]
    message = _refused(_pod({"containers": [{"name": "pytorch", "env": [{"name": name, "value": "changed"}]}]}),
                       f"{WHERE}.spec.containers[pytorch].env[{name}]", manifest)  # fmt: skip
    assert "may not drop or change kubetrain's env var" in message


def test_a_containers_patch_fits_every_job_name_though_the_args_carry_the_jobs_path() -> None:
    """Issue 48.11: the patch had to repeat the container, whose args hold runs/<job name>/, so one
    patch matched one job only; named items now merge, so the same patch serves every run."""
    patch = _pod({"containers": [{"name": "pytorch", "resources": {"requests": {"cpu": "2"}}}]})
    for name in ("pytorch-0123456789ab", "pytorch-ba9876543210"):
        plan = JobPlan(name=name, params=TrainingParams(output_dir=f"/workspace/runs/{name}/output"), pod=PodOptions())
        manifest = build_manifest(PyTorchRequest(**IDS, workers=1).to_spec(plan))
        patched = apply_manifest_patch(manifest, patch, crd_dir=CRD_DIR)
        (container,) = patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
        assert f"/workspace/runs/{name}/output" in container["args"]
        assert container["resources"]["requests"]["cpu"] == "2"


def test_the_parameter_servers_env_need_not_be_repeated() -> None:
    """The PS pods' env holds the job's addresses: a patch names the replicated job and the env var."""
    manifest = build_manifest(PSRequest(**IDS, workers=1).to_spec(PLAN))
    env = [{"name": "OMP_NUM_THREADS", "value": "1"}]
    pod = {"containers": [{"name": "ps", "env": env}]}
    patch = {"spec": {"replicatedJobs": [{"name": "worker", "template": {"spec": {"template": {"spec": pod}}}}]}}
    patched = apply_manifest_patch(manifest, patch, crd_dir=CRD_DIR)
    for built, job in zip(manifest["spec"]["replicatedJobs"], patched["spec"]["replicatedJobs"], strict=True):
        (before,) = built["template"]["spec"]["template"]["spec"]["containers"]
        (after,) = job["template"]["spec"]["template"]["spec"]["containers"]
        assert job["name"] == built["name"]
        assert after["env"] == (before["env"] + env if job["name"] == "worker" else before["env"])


def test_a_second_container_is_refused() -> None:
    manifest = _manifest()
    patch = _pod({"containers": [*_container(manifest), {"name": "side", "image": "busybox"}]})
    _refused(patch, f"{WHERE}.spec.containers[side]", manifest)


def test_kubetrains_labels_and_deadline_stay() -> None:
    manifest = _manifest()
    _refused({"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}},
             "metadata.labels.app.kubernetes.io/managed-by", manifest)  # fmt: skip
    label = next(iter(manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]))
    _refused(_at((*WORKER, "metadata", "labels", label), None), f"{WHERE}.metadata.labels.{label}", manifest)
    built = manifest["spec"]["runPolicy"]["activeDeadlineSeconds"]
    for raised in (None, built + 1):
        _refused({"spec": {"runPolicy": {"activeDeadlineSeconds": raised}}},
                 "spec.runPolicy.activeDeadlineSeconds", manifest)  # fmt: skip
    lowered = apply_manifest_patch(manifest, {"spec": {"runPolicy": {"activeDeadlineSeconds": built - 1}}})
    assert lowered["spec"]["runPolicy"]["activeDeadlineSeconds"] == built - 1


@pytest.mark.parametrize(
    "key",
    [
        "container.apparmor.security.beta.kubernetes.io/pytorch",
        "seccomp.security.alpha.kubernetes.io/pod",
        "container.seccomp.security.alpha.kubernetes.io/pytorch",  # the old per-container one (issue 48.7)
    ],
)
def test_a_security_profile_annotation_is_refused(key: str) -> None:
    _refused(_at((*WORKER, "metadata", "annotations", key), "unconfined"), f"{WHERE}.metadata.annotations.{key}")


def test_an_allowed_patch_still_lands() -> None:
    manifest = _manifest()
    (container,) = _container(manifest)
    container = {
        **container,
        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "env": [*container["env"], {"name": "OMP_NUM_THREADS", "value": "1"},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "volumeMounts": [*container["volumeMounts"], {"name": "cache", "mountPath": "/cache"}],
    }  # fmt: skip
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    patch = {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}, "annotations": {"note": "x"}},
        **_pod({
            "containers": [container],
            "volumes": [*pod["volumes"], {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
            "nodeSelector": {"pool": "cpu"},
            "tolerations": [{"key": "pool", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}],
            "schedulerName": "volcano",
        }),
    }  # fmt: skip
    patched = apply_manifest_patch(manifest, patch, crd_dir=CRD_DIR)
    validate_strict(patched)
    spec = patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert spec["containers"] == [container]
    assert spec["nodeSelector"] == {"pool": "cpu"}
    assert patched["metadata"]["annotations"]["note"] == "x"


@pytest.mark.parametrize(
    ("request_", "patch", "field"),
    [
        (ChainerMNRequest(**IDS, workers=1),
         {"spec": {"mpiReplicaSpecs": {"Launcher": {"template": {"spec": {"hostPID": True}}}}}},
         "spec.mpiReplicaSpecs.Launcher.template.spec.hostPID"),
        (PyTorchRequest(**IDS, job_api="trainjob", workers=1),
         {"spec": {"trainer": {"image": "evil:latest"}}}, "spec.trainer.image"),
        (PyTorchRequest(**IDS, job_api="trainjob", workers=1),
         {"spec": {"runtimeRef": {"name": "other"}}}, "spec.runtimeRef"),
    ],
)  # fmt: skip
def test_every_kind_is_guarded(request_: Any, patch: dict[str, Any], field: str) -> None:
    _refused(patch, field, build_manifest(request_.to_spec(PLAN)))


def test_the_jobsets_pods_are_guarded() -> None:
    manifest = build_manifest(PSRequest(**IDS, workers=1).to_spec(PLAN))
    jobs = json.loads(json.dumps(manifest["spec"]["replicatedJobs"]))
    jobs[0]["template"]["spec"]["template"]["spec"]["hostNetwork"] = True
    name = jobs[0]["name"]
    _refused({"spec": {"replicatedJobs": jobs}}, f"spec.replicatedJobs[{name}].template.spec.template.spec.hostNetwork",
             manifest)  # fmt: skip
    # The list given with only one job drops the others' pods.
    _refused({"spec": {"replicatedJobs": jobs[:1]}}, "spec.replicatedJobs[", manifest)
