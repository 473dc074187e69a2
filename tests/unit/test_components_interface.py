"""The components' declared interface: what users and the KFP backend rely on without running them.

- every input and output is typed and documented (the description lands in the compiled YAML);
- lightweight components on the launcher image, no pip install at run time;
- the body imports kubetrain inside the function and makes one library call (KFP ships only the
  function's source, so a module-level import would be a NameError in the pod);
- training components pass resources, node selectors, tolerations, env and volumes through to
  the training pods, and their inputs match the library function they call.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from typing import Any

import pytest
import yaml

from kubetrain.kfp_runtime import frameworks
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.request_base import TrainingRequest
from kubetrain.presets import LAUNCHER_IMAGE
from kubetrain.tooling.catalog import COMPONENTS, Entry

TRAINING = ("pytorch_train", "chainermn_train", "ps_train")
WORKSPACE_DEFAULT = "kubetrain-workspace"


def _component(name: str) -> Any:
    return Entry("component", name).load()


def _compiled(name: str) -> dict[str, Any]:
    return next(iter(yaml.safe_load_all(Entry("component", name).yaml_path.read_text())))


def _body_function(name: str) -> ast.FunctionDef:
    component = _component(name)
    source = textwrap.dedent(inspect.getsource(component.python_func))
    module = ast.parse(source)
    func = module.body[0]
    assert isinstance(func, ast.FunctionDef)
    return func


@pytest.mark.parametrize("name", COMPONENTS)
def test_every_input_and_output_is_documented(name: str) -> None:
    spec = next(iter(_compiled(name)["components"].values()))
    inputs = {**spec["inputDefinitions"].get("parameters", {}), **spec["inputDefinitions"].get("artifacts", {})}
    outputs = {**spec["outputDefinitions"].get("parameters", {}), **spec["outputDefinitions"].get("artifacts", {})}
    undocumented = sorted(k for k, v in {**inputs, **outputs}.items() if not v.get("description"))
    assert not undocumented, f"{name}: undocumented {undocumented}"
    signature = inspect.signature(_component(name).python_func)
    untyped = [p for p, param in signature.parameters.items() if param.annotation is inspect.Parameter.empty]
    assert not untyped, f"{name}: untyped parameters {untyped}"
    assert signature.return_annotation is not inspect.Signature.empty


@pytest.mark.parametrize("name", COMPONENTS)
def test_lightweight_component_on_the_launcher_image_without_installs(name: str) -> None:
    compiled = _compiled(name)
    (executor,) = compiled["deploymentSpec"]["executors"].values()
    container = executor["container"]
    assert container["image"] == LAUNCHER_IMAGE
    command = " ".join(container["command"])
    assert "pip install" not in command, f"{name}: installs packages at run time"
    assert "kfp.dsl.executor_main" in command


@pytest.mark.parametrize("name", COMPONENTS)
def test_body_imports_kubetrain_inside_and_makes_one_call(name: str) -> None:
    func = _body_function(name)
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    assert len(body) == 2, f"{name}: expected an import and one call, got {len(body)} statements"
    imp, call = body
    assert isinstance(imp, ast.ImportFrom)
    assert imp.module is not None
    assert imp.module.startswith("kubetrain.kfp_runtime.")
    value = call.value if isinstance(call, (ast.Return, ast.Expr)) else None
    assert isinstance(value, ast.Call)
    assert isinstance(value.func, ast.Name)
    assert value.func.id in {alias.asname or alias.name for alias in imp.names}
    # Defaults are literals: the function's source is all the pod gets.
    for default in [*func.args.defaults, *func.args.kw_defaults]:
        assert default is None or isinstance(default, ast.Constant), f"{name}: non-literal default"


@pytest.mark.parametrize("name", COMPONENTS)
def test_workspace_default_is_the_same_everywhere(name: str) -> None:
    params = inspect.signature(_component(name).python_func).parameters
    if "workspace_pvc" in params:
        assert params["workspace_pvc"].default == WORKSPACE_DEFAULT


@pytest.mark.parametrize("name", TRAINING)
def test_training_components_pass_task_settings_to_the_training_pods(name: str) -> None:
    spec = next(iter(_compiled(name)["components"].values()))
    passthroughs = {p["field"]: p.get("applyToTask", False) for p in spec["taskConfigPassthroughs"]}
    assert passthroughs == {
        "RESOURCES": False,  # GPUs reserved for the training pods only, not the launcher
        "KUBERNETES_NODE_SELECTOR": False,
        "KUBERNETES_TOLERATIONS": False,
        "KUBERNETES_AFFINITY": False,  # node affinity for the training pods (the launcher need not run on GPU nodes)
        "ENV": True,
        "KUBERNETES_VOLUMES": True,  # the launcher reads the workspace too
    }
    assert spec["inputDefinitions"]["parameters"]["task_config"]["parameterType"] == "TASK_CONFIG"
    outputs = spec["outputDefinitions"]
    assert set(outputs["parameters"]) == {"job_name", "status"}
    assert {k: v["artifactType"]["schemaTitle"] for k, v in outputs["artifacts"].items()} == {
        "model": "system.Model",
        "metrics": "system.Metrics",
        "report": "system.HTML",
    }


@pytest.mark.parametrize(
    ("name", "function", "request_type", "own"),
    [
        ("pytorch_train", frameworks.train_pytorch, PyTorchRequest, {"workers", "elastic_min_workers", "backend"}),
        ("chainermn_train", frameworks.train_chainermn, ChainerMNRequest, {"workers", "slots_per_worker", "command"}),
        ("ps_train", frameworks.train_ps, PSRequest, {"ps_replicas", "workers", "mode", "records_per_task"}),
    ],
)
def test_component_inputs_are_exactly_what_the_library_takes(
    name: str, function: Any, request_type: type[TrainingRequest], own: set[str]
) -> None:
    component = inspect.signature(_component(name).python_func).parameters
    step = inspect.signature(function).parameters
    fields = {f.name: f for f in dataclasses.fields(request_type)}
    # The body's call names the step's own parameters: the component's inputs, with its defaults.
    assert {k: p.default for k, p in step.items()} == {k: p.default for k, p in component.items()}
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in step.values())
    assert set(component) == {"dataset", "model", "metrics", "report", "task_config"} | set(fields)
    assert own <= set(fields)
    # The request's defaults are the component's, so the library alone behaves as the component does.
    for key, field in fields.items():
        if key not in ("run_id", "task_id", "task_name"):
            assert field.default == component[key].default, key


def test_run_and_task_ids_are_optional_overrides_defaulting_to_empty() -> None:
    # Empty: the step reads its identity from KFP (kfp_runtime.task_identity). Not a placeholder:
    # KFP's driver resolves one only when it is the task's argument, never an input's default.
    for name in TRAINING:
        params = inspect.signature(_component(name).python_func).parameters
        for identity in ("run_id", "task_id", "task_name"):
            assert params[identity].default == "", (name, identity)


def test_the_default_timeout_suits_real_training() -> None:
    # It was one hour: a real training job would be deleted mid-run. The peers default to a day or more.
    for name in TRAINING:
        params = inspect.signature(_component(name).python_func).parameters
        assert params["timeout_seconds"].default >= 24 * 3600
