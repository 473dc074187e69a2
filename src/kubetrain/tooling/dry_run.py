"""`kubetrain run --dry-run`: compile the pipeline and check its inputs; train nothing.

Checked: the parameters (names and types, as for a run), that the pipeline compiles, and the
inputs of each kubetrain training step whose values are known before the run (constants and the
pipeline's parameters): they are validated as the step itself would validate them, so a bad
`architecture` or `epochs` fails here and not after the steps before it have run. Inputs that
come from another step's outputs are known only when the run gets there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.requests import ChainerMNRequest, PSRequest, PyTorchRequest, TrainingRequest
from kubetrain.tooling.compiling import compile_pipeline
from kubetrain.urls import redact_values

# The training components' functions (what their executors run), and the request each validates.
REQUESTS: Mapping[str, type[TrainingRequest]] = {
    "pytorch_train": PyTorchRequest,
    "chainermn_train": ChainerMNRequest,
    "ps_train": PSRequest,
}
_NAMING = {"run_id": "dry-run", "task_id": "dry-run", "task_name": "dry-run"}
_INTEGER = 2  # pipeline_spec ParameterType NUMBER_INTEGER


@dataclass(frozen=True)
class DryRun:
    """What a dry run checked: the steps it found, and those whose inputs it validated."""

    pipeline: str
    steps: tuple[str, ...]
    checked: tuple[str, ...]
    arguments: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The JSON object `run --dry-run --json` ends with."""
        return {
            "pipeline": self.pipeline,
            "state": "CHECKED",
            "exit_code": 0,
            "steps": list(self.steps),
            "checked_steps": list(self.checked),
            "arguments": redact_values(dict(self.arguments)),  # a presigned URL's signature is not printed
        }

    def describe(self) -> str:
        """What a user reads."""
        return "\n".join(
            [
                f"dry run of {self.pipeline}: it compiles; {len(self.steps)} steps ({', '.join(self.steps)})",
                f"  inputs checked of: {', '.join(self.checked) or 'no kubetrain training step'}",
                "  nothing ran",
            ]
        )


def _function(spec: Any, component: Any) -> str | None:
    executors = json_format.MessageToDict(spec.deployment_spec).get("executors", {})
    args = (executors.get(component.executor_label) or {}).get("container", {}).get("args") or []
    if "--function_to_execute" in args:
        i = args.index("--function_to_execute")
        return str(args[i + 1]) if i + 1 < len(args) else None
    return None


def _known_inputs(task: Any, component: Any, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The task's parameter inputs known before the run: constants and root pipeline parameters."""
    known: dict[str, Any] = {}
    types = {k: v.parameter_type for k, v in component.input_definitions.parameters.items()}
    for name, value in task.inputs.parameters.items():
        kind = value.WhichOneof("kind")
        if kind == "runtime_value":
            known[name] = json_format.MessageToDict(value.runtime_value.constant)
        elif kind == "component_input_parameter" and value.component_input_parameter in arguments:
            known[name] = arguments[value.component_input_parameter]
        else:
            continue
        if types.get(name) == _INTEGER and isinstance(known[name], float) and known[name].is_integer():
            known[name] = int(known[name])
    return known


def dry_run(pipeline: Any, *, name: str, arguments: Mapping[str, Any]) -> DryRun:
    """Compile `pipeline` and validate its training steps' known inputs; InvalidInputError naming the step."""
    compile_pipeline(pipeline, name)
    spec = pipeline.pipeline_spec
    defaults = {
        k: json_format.MessageToDict(v.default_value)
        for k, v in spec.root.input_definitions.parameters.items()
        if v.HasField("default_value")
    }
    values = {**defaults, **arguments}
    steps: list[str] = []
    checked: list[str] = []
    for task_name, task in spec.root.dag.tasks.items():
        component = spec.components[task.component_ref.name]
        steps.append(task_name)
        request = REQUESTS.get(_function(spec, component) or "")
        if request is None:
            continue
        fields = {f.name for f in dataclasses.fields(request)}
        known = _known_inputs(task, component, values)
        inputs = {**{k: v for k, v in known.items() if k in fields}, **_NAMING}
        try:
            request.from_inputs(inputs)
        except InvalidInputError as e:
            raise InvalidInputError(f"step {task_name}: {e}") from e
        checked.append(task_name)
    return DryRun(name, tuple(steps), tuple(checked), dict(arguments))
