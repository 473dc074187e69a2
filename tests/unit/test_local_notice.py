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


def test_a_tasks_kubernetes_settings_that_kfp_local_drops_are_named_per_task() -> None:
    """Issue 34 item 6: set_accelerator_limit and kfp.kubernetes' node selector on a task vanished locally, unsaid."""
    from kfp import dsl, kubernetes

    from kubetrain.components import download_dataset, pytorch_train
    from kubetrain.tooling.local_settings import unused_task_settings

    @dsl.pipeline(name="settings")
    def settings():  # type: ignore[no-untyped-def]  # KFP reads the return annotation as an output
        data = download_dataset()
        with dsl.ParallelFor(items=[1, 2]):
            train = pytorch_train(dataset=data.outputs["dataset"])
            train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
            kubernetes.add_node_selector(train, label_key="accelerator", label_value="a100")
            kubernetes.add_toleration(train, key="gpu", operator="Exists", effect="NoSchedule")

    notices = unused_task_settings(settings)
    assert list(notices) == ["pytorch-train"]  # inside the loop too; the download asks for nothing
    notice = notices["pytorch-train"]
    assert notice.startswith("locally, not used: accelerator nvidia.com/gpu: 1 (set_accelerator_limit")
    assert "node selector accelerator=a100" in notice and "1 toleration " in notice
