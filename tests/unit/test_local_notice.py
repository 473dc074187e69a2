"""The one line a local step prints about what of its manifest this machine does not use (issue 34)."""

from __future__ import annotations

from kubetrain.kfp_runtime.local_notice import local_notice
from kubetrain.presets import PYTORCH_IMAGE


def _pod(image: str, **spec: object) -> dict[str, object]:
    return {"template": {"spec": {"containers": [{"name": "c", "image": image}], **spec}}}


def test_node_selectors_tolerations_and_a_jobsets_nested_pods_are_named() -> None:
    jobset = {
        "spec": {
            "replicatedJobs": [
                {"template": {"spec": _pod(PYTORCH_IMAGE, nodeSelector={"pool": "gpu-a100"})}},
                {"template": {"spec": _pod(PYTORCH_IMAGE, tolerations=[{"key": "gpu"}, {"key": "spot"}])}},
            ]
        }
    }
    notice = local_notice(jobset)
    assert notice is not None
    assert "node selector pool=gpu-a100" in notice and "2 tolerations" in notice
    assert "image" not in notice  # kubetrain's own image is what runs here anyway


def test_nothing_unused_says_nothing() -> None:
    assert local_notice({"spec": {"pytorchReplicaSpecs": {"Master": _pod(PYTORCH_IMAGE)}}}) is None
