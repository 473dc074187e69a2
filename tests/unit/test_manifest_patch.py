"""The escape hatch: an RFC 7386 merge patch on the emitted manifest, validated strictly before submission."""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain.errors import InvalidInputError, ManifestError
from kubetrain.kfp_runtime.frameworks import PyTorchRequest
from kubetrain.kfp_runtime.request_base import JobPlan
from kubetrain.manifests import build_manifest
from kubetrain.manifests.patch import MAX_JSON_DEPTH, apply_manifest_patch, merge_patch
from kubetrain.presets import PodOptions, TrainingParams
from tests.conftest import CRD_DIR
from tests.crd_schema import validate_strict
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "train"}
PLAN = JobPlan(name="pytorch-0123456789ab", params=TrainingParams(), pod=PodOptions())


def _manifest() -> dict[str, Any]:
    return build_manifest(PyTorchRequest(**IDS, workers=1).to_spec(PLAN))


def test_rfc7386_semantics() -> None:
    # The examples of RFC 7386 §3, in part: merge objects, null deletes, lists replace.
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": {"x": None, "y": 1}}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3], "n": {"y": 1}}
    assert target["c"] == {"d": "e", "f": "g"}  # unmodified
    assert merge_patch({"a": 1}, ["x"]) == ["x"]


def test_a_good_patch_lands_and_the_result_is_valid() -> None:
    patch = {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"schedulerName": "volcano"}}}}},
    }
    patched = apply_manifest_patch(_manifest(), patch, crd_dir=CRD_DIR)
    validate_strict(patched)
    assert patched["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] == "volcano"
    assert patched["spec"]["pytorchReplicaSpecs"]["Master"] == _manifest()["spec"]["pytorchReplicaSpecs"]["Master"]


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        # A misplaced field (the pod spec's, one level too high): the CRD schema names it.
        ({"spec": {"pytorchReplicaSpecs": {"Worker": {"schedulerName": "volcano"}}}}, "schedulerName"),
        ({"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "two"}}}}, "replicas"),
        ({"metadata": {"name": "other"}}, r"manifest_patch: metadata\.name: may not change"),
        # Another profile's namespace through the patch: refused before anything is submitted.
        ({"metadata": {"namespace": "alice"}}, r"manifest_patch: metadata\.namespace: may not change"),
        ({"kind": "MPIJob"}, "manifest_patch: kind: may not change"),
        (
            {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"securityContext": None}}}}}},
            "securityContext: may not change: the pods keep the restricted Pod Security settings",
        ),
        (["not", "an", "object"], "manifest_patch: expected a JSON object"),
    ],
)
def test_a_bad_patch_is_refused_naming_the_field(patch: Any, match: str) -> None:
    with pytest.raises(ManifestError, match=match):
        apply_manifest_patch(_manifest(), patch, crd_dir=CRD_DIR)


def test_the_request_refuses_a_patch_that_is_not_an_object() -> None:
    with pytest.raises(InvalidInputError, match="manifest_patch: got 'x'; expected a JSON object"):
        PyTorchRequest(**IDS, manifest_patch="x")  # type: ignore[arg-type]


def test_the_step_refuses_a_bad_patch_before_anything_is_submitted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubetrain.kfp_runtime import train_step

    class Artifact:
        def __init__(self, name: str, metadata: dict[str, Any] | None = None) -> None:
            self.path = str(tmp_path / name)
            self.metadata: dict[str, Any] = metadata or {}

        def log_metric(self, metric: str, value: float) -> None:
            raise AssertionError("nothing to log")

    def no_backend(*args: object, **kwargs: object) -> None:
        raise AssertionError("a backend was opened: something would have been submitted")

    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    monkeypatch.setattr(train_step, "open_backend", no_backend)
    request = PyTorchRequest(**IDS, manifest_patch={"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "x"}}}})
    outputs = train_step.StepArtifacts(
        dataset=Artifact("d", {"path": "/workspace/datasets/digits"}),
        model=Artifact("m"),
        metrics=Artifact("x"),
        report=Artifact("r"),
    )
    with pytest.raises(ManifestError, match="manifest_patch"):
        train_step.launch_training(request, outputs=outputs, task_config=None)


def _nested(depth: int) -> dict[str, Any]:
    patch: dict[str, Any] = {"a": 1}
    for _ in range(depth - 1):
        patch = {"a": patch}
    return patch


@pytest.mark.parametrize("depth", [3000, MAX_JSON_DEPTH + 1])
def test_a_patch_nested_past_the_cap_is_refused_in_one_line_naming_the_input(depth: int) -> None:
    # issue 33 item 7: 3,000 levels used to end in a RecursionError traceback in the merge.
    expected = f"manifest_patch: got JSON nested {depth} levels deep; expected at most {MAX_JSON_DEPTH} levels"
    with pytest.raises(InvalidInputError) as caught:
        PyTorchRequest(**IDS, manifest_patch=_nested(depth))
    assert str(caught.value).startswith(expected)
    with pytest.raises(InvalidInputError, match=expected):
        apply_manifest_patch(_manifest(), _nested(depth), crd_dir=CRD_DIR)


def test_a_patch_at_the_cap_is_merged() -> None:
    patch = {"metadata": {"annotations": {"note": "ok"}}, "x": _nested(MAX_JSON_DEPTH - 1)}
    assert merge_patch({}, patch)["x"] == _nested(MAX_JSON_DEPTH - 1)
