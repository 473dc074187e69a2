"""`pytorch_train`'s own tests (the hub's tests/ beside the component): what its body hands to the library,
and the task settings a pipeline makes on it, compiled into its TaskConfig passthroughs."""

# No `from __future__ import annotations`: kfp reads the pipeline's annotations as types.

from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler, dsl, kubernetes

from kubetrain.components import pytorch_train
from tests.component_body import run_body, sentinels


def test_the_body_hands_every_input_to_train_pytorch_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = sentinels(pytorch_train)
    called, returned = run_body(pytorch_train, "kubetrain.kfp_runtime.frameworks.train_pytorch", monkeypatch, inputs)
    assert called == inputs and returned


def _compile(task_settings: Any, tmp_path: Path) -> dict[str, Any]:
    @dsl.pipeline(name="settings")
    def settings_pipeline() -> None:
        data = dsl.importer(artifact_uri="file:///data", artifact_class=dsl.Dataset)
        task = pytorch_train(
            dataset=data.output,
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
            task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
        )
        task_settings(task)

    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(settings_pipeline, str(path))
    return next(iter(yaml.safe_load_all(path.read_text())))


def test_task_settings_compile_into_the_passthrough(tmp_path: Path) -> None:
    def settings(task: Any) -> None:
        task.set_cpu_request("2").set_memory_request("4Gi").set_accelerator_type("nvidia.com/gpu")
        task.set_accelerator_limit(1)
        task.set_env_variable("PLAIN", "1")
        kubernetes.add_toleration(task, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        kubernetes.add_node_selector(task, label_key="accelerator", label_value="a100")
        kubernetes.mount_pvc(task, pvc_name="kubetrain-workspace", mount_path="/workspace")

    spec = _compile(settings, tmp_path)
    component = spec["components"]["comp-pytorch-train"]
    assert {p["field"] for p in component["taskConfigPassthroughs"]} >= {"RESOURCES", "KUBERNETES_TOLERATIONS"}


def test_node_affinity_on_a_training_task_compiles_into_the_passthrough(tmp_path: Path) -> None:
    """It was a compile error (KUBERNETES_AFFINITY was not passed through); now it reaches the training pods."""

    def settings(task: Any) -> None:
        kubernetes.add_node_affinity(task, match_expressions=[{"key": "zone", "operator": "In", "values": ["a"]}])

    spec = _compile(settings, tmp_path)
    component = spec["components"]["comp-pytorch-train"]
    passthroughs = {p["field"]: p.get("applyToTask", False) for p in component["taskConfigPassthroughs"]}
    assert passthroughs["KUBERNETES_AFFINITY"] is False  # for the training pods, not the launcher pod
    platform = yaml.safe_load_all((tmp_path / "p.yaml").read_text())
    kubernetes_config = next(d for d in platform if d and "platforms" in d)["platforms"]["kubernetes"]
    (executor,) = kubernetes_config["deploymentSpec"]["executors"].values()
    assert executor["nodeAffinity"] == [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
