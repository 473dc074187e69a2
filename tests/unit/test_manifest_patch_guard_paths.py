"""The patch guard cannot be fooled by keys spelled like paths, repeated items or sheer size, and the
patched manifest keeps the inputs' bounds (issue 48.11)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kubetrain.errors import ManifestError
from kubetrain.kfp_runtime.frameworks import PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.request_base import JobPlan
from kubetrain.manifests import build_manifest
from kubetrain.manifests.patch import apply_manifest_patch
from kubetrain.manifests.patch_guard import check_patch_guard
from kubetrain.manifests.validate import validate_manifest
from kubetrain.presets import PodOptions, TrainingParams
from kubetrain.specs import MAX_REPLICAS
from kubetrain.specs.limits import MAX_SECONDS
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "train"}
PLAN = JobPlan(name="pytorch-0123456789ab", params=TrainingParams(), pod=PodOptions())
WHERE = "spec.pytorchReplicaSpecs.Worker.template.spec"


def _pytorch() -> dict[str, Any]:
    return build_manifest(PyTorchRequest(**IDS, workers=1, timeout_seconds=600).to_spec(PLAN))


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return dict(container)


def _refused(manifest: dict[str, Any], patch: dict[str, Any]) -> str:
    # No CRD directory: the guard itself must refuse, not the schema's strict decoding after it.
    with pytest.raises(ManifestError) as caught:
        apply_manifest_patch(manifest, patch)
    return str(caught.value)


def test_a_key_spelled_like_a_list_item_does_not_hide_the_containers_change() -> None:
    manifest = _pytorch()
    built = _container(manifest)
    # The real container gets another image and command; a key "containers[pytorch]" beside the
    # list holds kubetrain's values under the same string path, and used to win.
    evil = {"name": "pytorch", "image": "evil:1", "command": ["sh"]}
    decoy = {key: built[key] for key in ("image", "command")}
    patch = {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {
        "containers": [evil], "containers[pytorch]": decoy}}}}}}  # fmt: skip
    message = _refused(manifest, patch)
    assert message.startswith(f"manifest_patch: {WHERE}.containers[pytorch].image: may not change"), message


def test_a_dotted_key_does_not_hide_the_api_token() -> None:
    manifest = _pytorch()
    patch = {"spec": {"pytorchReplicaSpecs": {"Worker": {
        "template": {"spec": {"automountServiceAccountToken": True}},
        "template.spec": {"automountServiceAccountToken": False}}}}}  # fmt: skip
    message = _refused(manifest, patch)
    assert message.startswith(f"manifest_patch: {WHERE}.automountServiceAccountToken: may not change"), message


def test_a_dotted_key_in_a_jobset_template_does_not_hide_the_api_token() -> None:
    manifest = build_manifest(PSRequest(**IDS, workers=1).to_spec(PLAN))
    # The workers' pods get no token (the master's gets its own account's, to watch its workers).
    pod = manifest["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"]
    job = {"name": "worker", "template": {"spec": {"template": {"spec": {"automountServiceAccountToken": True}}}},
           "template.spec.template.spec": {"automountServiceAccountToken": pod["automountServiceAccountToken"]}}  # fmt: skip
    message = _refused(manifest, {"spec": {"replicatedJobs": [job]}})
    expected = "manifest_patch: spec.replicatedJobs[worker].template.spec.template.spec.automountServiceAccountToken"
    assert message.startswith(expected), message


def test_a_key_that_looks_like_a_path_is_shown_quoted() -> None:
    manifest = _pytorch()
    patched = copy.deepcopy(manifest)
    patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers[x]"] = {"hostPID": True}
    with pytest.raises(ManifestError, match=r'spec\["containers\[x\]"\]\.hostPID: may not add'):
        check_patch_guard(manifest, patched)


def test_kubetrains_env_var_repeated_with_another_value_is_refused() -> None:
    manifest = _pytorch()
    patched = copy.deepcopy(manifest)
    (container,) = patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    first = container["env"][0]
    # The later of two env vars of one name wins in the container: kubetrain's would be replaced.
    container["env"].append({"name": first["name"], "value": "other"})
    with pytest.raises(ManifestError, match=rf"containers\[pytorch\]\.env\[{first['name']}\]: may not repeat"):
        check_patch_guard(manifest, patched)
    # Through a patch, named items merge: the same var with another value is a change, refused too.
    patch = {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
        {"name": "pytorch", "env": [first, {"name": first["name"], "value": "other"}]}]}}}}}}  # fmt: skip
    assert "may not drop or change kubetrain's env var" in _refused(manifest, patch)


class _Counted(dict[str, Any]):
    """An env var that counts how often it is compared: the guard's work, measured without a clock."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        _Counted.comparisons += 1
        return dict.__eq__(self, other)

    __hash__ = None


def test_the_guards_work_grows_with_the_list_not_its_square() -> None:
    """8,000 env vars took the guard 128 s: each item was looked for in the whole list."""
    count = 4000
    manifest = _pytorch()
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["containers"][0]["env"] = [_Counted(name=f"V{i}", value="x") for i in range(count)]
    patched = copy.deepcopy(manifest)
    patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        _Counted(name=f"V{i}", value="x") for i in range(count)
    ] + [_Counted(name=f"NEW{i}", value="y") for i in range(count)]
    _Counted.comparisons = 0
    check_patch_guard(manifest, patched)
    assert _Counted.comparisons <= 4 * count  # a quadratic guard makes millions


@pytest.mark.parametrize(
    ("patch", "field", "expected"),
    [
        ({"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 10**6}}}},
         "spec.pytorchReplicaSpecs.Worker.replicas", f"an integer from 0 to {MAX_REPLICAS}"),
        ({"spec": {"runPolicy": {"activeDeadlineSeconds": -5}}},
         "spec.runPolicy.activeDeadlineSeconds", "it may only be lowered, to 1 second or more"),
        ({"spec": {"runPolicy": {"backoffLimit": float("inf")}}},
         "spec.runPolicy.backoffLimit", "an integer from 0 to 1000"),
        ({"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"activeDeadlineSeconds": 0}}}}}},
         f"{WHERE}.activeDeadlineSeconds", f"an integer from 1 to {MAX_SECONDS}"),
        ({"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"terminationGracePeriodSeconds": float("nan")}}}}}},
         f"{WHERE}.terminationGracePeriodSeconds", "a finite number"),
    ],
)  # fmt: skip
def test_the_patched_manifest_keeps_the_inputs_bounds(patch: dict[str, Any], field: str, expected: str) -> None:
    message = _refused(_pytorch(), patch)
    assert message.startswith(f"manifest_patch: {field}: "), message
    assert expected in message


def test_a_full_manifest_keeps_the_bounds_too() -> None:
    """`kubetrain launch -f` validates with the same function: a million replicas is refused there."""
    manifest = json.loads(json.dumps(_pytorch()))
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 10**6
    with pytest.raises(ManifestError, match=r"^spec.pytorchReplicaSpecs.Worker.replicas: got 1000000; expected"):
        validate_manifest(manifest)
