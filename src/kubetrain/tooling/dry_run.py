"""`kubetrain run --dry-run`, and the checks every `kubetrain run` makes before its first step.

Checked: the parameters (names and types, as for a run), that the pipeline compiles, and the
inputs of each kubetrain step whose values are known before the run: constants, the pipeline's
parameters, and the items of a `dsl.ParallelFor` over a list written in the pipeline or given as
a parameter (each item is checked), for the steps inside control flow too (`ParallelFor`,
`ExitHandler`, a nested pipeline). Inside a `dsl.If`/`Elif`/`Else` branch, in every branch, only
the constants the pipeline writes are checked (wrong whichever branch runs): a parameter or an item
there may be what the condition guards against, and this machine's store drivers matter only if
the branch runs. A training step's inputs are validated as the step itself validates them (its
request), a download step's source, sha256 and shards as the download step checks them before
fetching anything (:func:`kubetrain.data.sources.check_source`), so a bad `architecture`,
`workers=-1` or `source=htp://...` fails here and not after the steps before it have run. Inputs
that come from another step's outputs are known only when the run gets there.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from kubetrain.data.sources import check_source
from kubetrain.errors import DataError, InvalidInputError
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.request_base import TrainingRequest
from kubetrain.tooling.compiling import compile_pipeline
from kubetrain.tooling.outcome import run_fields, upstream_first
from kubetrain.tooling.result_json import result_json

# The training components' functions (what their executors run), and the request each validates.
REQUESTS: Mapping[str, type[TrainingRequest]] = {
    "pytorch_train": PyTorchRequest,
    "chainermn_train": ChainerMNRequest,
    "ps_train": PSRequest,
}
DOWNLOAD_FUNCTION = "download_dataset"
_NAMING = {"run_id": "dry-run", "task_id": "dry-run", "task_name": "dry-run"}
_INTEGER = 2  # pipeline_spec ParameterType NUMBER_INTEGER
# A task's many possible input values (ParallelFor items, nested loops) are checked in combination up to this many.
MAX_COMBINATIONS = 256
# What kfp writes for `item.key` of a ParallelFor over dicts.
_SELECTOR = re.compile(r'parseJson\(string_value\)\["([^"]*)"\]')


@dataclass(frozen=True)
class _Known:
    """An input's values known before the run: one, or one per loop item."""

    values: tuple[Any, ...]
    written: bool  # a constant written in the pipeline, not a parameter's value or a loop item


# Input name -> what is known of it in this DAG; absent: unknown before the run (another step's output).
Scope = dict[str, _Known]


@dataclass(frozen=True)
class DryRun:
    """What a dry run checked: the steps it found, and those whose inputs it validated."""

    pipeline: str
    steps: tuple[str, ...]
    checked: tuple[str, ...]
    arguments: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The JSON object `run --dry-run --json` ends with: a run's (nothing ran), and the steps checked."""
        fields = {
            **run_fields(self.pipeline, self.arguments),
            "steps": list(self.steps),
            "checked_steps": list(self.checked),
        }
        return result_json(state="CHECKED", exit_code=0, fields=fields)

    def describe(self) -> str:
        """What a user reads."""
        return "\n".join(
            [
                f"dry run of {self.pipeline}: it compiles; {len(self.steps)} steps ({', '.join(self.steps)})",
                f"  inputs checked of: {', '.join(self.checked) or 'no kubetrain step'}",
                "  nothing ran",
            ]
        )


@dataclass(frozen=True)
class _Step:
    name: str  # as the run's outcome names it: its component's name without "comp-" (unique)
    function: str | None  # the Python function its executor runs, None for a container
    inputs: Scope
    defaults: Mapping[str, Any]  # the component's own defaults
    # Inside a dsl.If/Elif/Else branch: only what the pipeline writes is checked (a parameter or an
    # item there may be what the condition guards against), and not this machine's store drivers.
    guarded: bool


def _function(spec: Any, component: Any) -> str | None:
    executors = json_format.MessageToDict(spec.deployment_spec).get("executors", {})
    args = (executors.get(component.executor_label) or {}).get("container", {}).get("args") or []
    if "--function_to_execute" in args:
        i = args.index("--function_to_execute")
        return str(args[i + 1]) if i + 1 < len(args) else None
    return None


def _typed(value: Any, parameter_type: int) -> Any:
    """A compiled NUMBER_INTEGER value (protobuf keeps every number as a float) as the integer it is."""
    if parameter_type == _INTEGER and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _selected(values: tuple[Any, ...], selector: str) -> tuple[Any, ...] | None:
    """`item.key` of each loop item; None when the selector is not one this module reads."""
    if not selector:
        return values
    match = _SELECTOR.fullmatch(selector)
    if match is None:
        return None
    key = match.group(1)
    picked = tuple(v[key] for v in values if isinstance(v, dict) and key in v)
    return picked if len(picked) == len(values) else None


def _task_inputs(task: Any, component: Any, scope: Scope) -> Scope:
    """The task's parameter inputs known before the run, each with the values it can take."""
    types = {k: v.parameter_type for k, v in component.input_definitions.parameters.items()}
    known: Scope = {}
    for name, value in task.inputs.parameters.items():
        kind = value.WhichOneof("kind")
        values: tuple[Any, ...] | None = None
        written = True
        if kind == "runtime_value":
            values = (json_format.MessageToDict(value.runtime_value.constant),)
        elif kind == "component_input_parameter" and value.component_input_parameter in scope:
            outer = scope[value.component_input_parameter]
            values, written = _selected(outer.values, value.parameter_expression_selector), outer.written
        if values is not None:
            known[name] = _Known(tuple(_typed(v, types.get(name, 0)) for v in values), written)
    return known


def _loop_items(task: Any, inputs: Scope) -> tuple[Any, ...] | None:
    """The items a ParallelFor task iterates over, when known before the run."""
    iterator = task.parameter_iterator
    if iterator.items.WhichOneof("kind") == "raw":
        items = json.loads(iterator.items.raw)
        return tuple(items) if isinstance(items, list) else None
    lists = inputs.get(iterator.items.input_parameter)
    if lists is None or not all(isinstance(v, list) for v in lists.values):
        return None
    return tuple(item for each in lists.values for item in each)


def _steps(spec: Any, dag: Any, scope: Scope, *, guarded: bool = False) -> Iterator[_Step]:
    """The steps of `dag` and of its control-flow groups, upstream first, with their known inputs."""
    tasks = dict(dag.tasks.items())
    for task_name in upstream_first(tasks):
        task = tasks[task_name]
        component = spec.components[task.component_ref.name]
        inputs = _task_inputs(task, component, scope)
        if component.WhichOneof("implementation") == "dag":
            if task.WhichOneof("iterator") == "parameter_iterator":
                items = _loop_items(task, inputs)
                if items:
                    inputs[task.parameter_iterator.item_input] = _Known(items, written=False)
            inner = guarded or bool(task.trigger_policy.condition)
            yield from _steps(spec, component.dag, _written(inputs) if inner else inputs, guarded=inner)
            continue
        defaults = {
            k: _typed(json_format.MessageToDict(v.default_value), v.parameter_type)
            for k, v in component.input_definitions.parameters.items()
            if v.HasField("default_value")
        }
        name = task.component_ref.name.removeprefix("comp-")
        known = _written(inputs) if guarded else inputs
        yield _Step(name, _function(spec, component), known, defaults, guarded)


def _written(inputs: Scope) -> Scope:
    """The inputs whose values the pipeline writes (constants), what a branch's condition cannot guard."""
    return {name: known for name, known in inputs.items() if known.written}


def _combinations(inputs: Scope) -> Iterator[dict[str, Any]]:
    """Each combination of the inputs' possible values (one when every input has one value), up to a bound."""
    names = list(inputs)
    for values in itertools.islice(itertools.product(*(inputs[n].values for n in names)), MAX_COMBINATIONS):
        yield dict(zip(names, values, strict=True))


# A step's check: (its known inputs, its component's defaults, whether it sits in a branch) -> None or raise.
Check = Callable[[Mapping[str, Any], Mapping[str, Any], bool], None]


def _check_training(request: type[TrainingRequest]) -> Check:
    fields = {f.name for f in dataclasses.fields(request)}

    def check(known: Mapping[str, Any], defaults: Mapping[str, Any], guarded: bool) -> None:
        request.from_inputs({**{k: v for k, v in known.items() if k in fields}, **_NAMING})

    return check


def _check_download(known: Mapping[str, Any], defaults: Mapping[str, Any], guarded: bool) -> None:
    values = {**defaults, **known}
    if "source" in values:  # else it comes from another step's output
        shards = values.get("shards", 1)
        check_source(values["source"], sha256=values.get("sha256") or "", shards=shards, drivers=not guarded)


CHECKS: Mapping[str, Check] = {
    **{function: _check_training(request) for function, request in REQUESTS.items()},
    DOWNLOAD_FUNCTION: _check_download,
}


def dry_run(pipeline: Any, *, name: str, arguments: Mapping[str, Any]) -> DryRun:
    """Compile `pipeline` and validate its kubetrain steps' known inputs; InvalidInputError naming the step."""
    compile_pipeline(pipeline, name)
    spec = pipeline.pipeline_spec
    given = {
        **{
            k: _typed(json_format.MessageToDict(v.default_value), v.parameter_type)
            for k, v in spec.root.input_definitions.parameters.items()
            if v.HasField("default_value")
        },
        **arguments,
    }
    root: Scope = {k: _Known((v,), written=False) for k, v in given.items()}
    steps: list[str] = []
    checked: list[str] = []
    for step in _steps(spec, spec.root.dag, root):
        steps.append(step.name)
        check = CHECKS.get(step.function or "")
        if check is None:
            continue
        for known in _combinations(step.inputs):
            try:
                check(known, step.defaults, step.guarded)
            except (InvalidInputError, DataError) as e:
                raise InvalidInputError(f"step {step.name}: {e}") from e
        checked.append(step.name)
    return DryRun(name, tuple(steps), tuple(checked), dict(arguments))


def unmounted_workspace(compiled_yaml: str) -> list[str]:
    """The kubetrain download and training steps of a compiled pipeline that mount no claim at /workspace.

    On this machine the workspace is a directory whatever the pipeline says; on a cluster such a
    step fails when it starts (`kfp.kubernetes.mount_pvc` is what puts the claim there), so
    `kubetrain submit` says so before it uploads.
    """
    import yaml

    from kubetrain.presets import WORKSPACE_MOUNT

    documents = [d for d in yaml.safe_load_all(compiled_yaml) if isinstance(d, dict)]
    if not documents:
        return []
    spec, platform = documents[0], (documents[1] if len(documents) > 1 else {})
    mounts = ((platform.get("platforms") or {}).get("kubernetes") or {}).get("deploymentSpec") or {}
    mounted = {
        label
        for label, config in (mounts.get("executors") or {}).items()
        if any(m.get("mountPath") == WORKSPACE_MOUNT for m in (config or {}).get("pvcMount") or [])
    }
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    unmounted = []
    for name, component in sorted((spec.get("components") or {}).items()):
        label = (component or {}).get("executorLabel")
        args = ((executors.get(label) or {}).get("container") or {}).get("args") or []
        function = args[args.index("--function_to_execute") + 1] if "--function_to_execute" in args[:-1] else None
        if function in CHECKS and label not in mounted:
            unmounted.append(name.removeprefix("comp-"))
    return unmounted
