"""`--param KEY=VALUE` for `kubetrain run` and `submit`, typed by the pipeline's own inputs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubetrain.errors import InvalidInputError, SpecError
from kubetrain.manifests.patch import MAX_JSON_DEPTH, check_json_depth

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True)
class PipelineInput:
    """One pipeline parameter: its KFP type name, default and description (from the docstring's Args)."""

    name: str
    type: str  # String, Integer, Float, Boolean, List, Dict (typing.List[str], ...), or an artifact's type
    default: Any
    optional: bool
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise SpecError("pipeline input name", self.name, "a Python identifier, as KFP names its inputs")
        if not isinstance(self.type, str) or not self.type.strip():
            raise SpecError(f"pipeline input {self.name}: type", self.type, "a KFP type name such as String or List")
        if not isinstance(self.optional, bool):
            raise SpecError(f"pipeline input {self.name}: optional", self.optional, "True or False")
        if not isinstance(self.description, str):
            raise SpecError(f"pipeline input {self.name}: description", self.description, "text")


def _json_kind(kind: str) -> str | None:
    """ "list" or "dict" for the KFP types a pipeline's List and Struct parameters have, else None."""
    base = kind.removeprefix("typing.").split("[", 1)[0].lower()
    return {"list": "list", "dict": "dict"}.get(base)


def _compiled_descriptions(pipeline: Any) -> dict[str, str]:
    """The parameters' descriptions a compiled YAML holds, which kfp's YAML loader leaves out."""
    text = getattr(pipeline, "component_yaml", None)
    if not isinstance(text, str):
        return {}
    import yaml

    doc = next(iter(yaml.safe_load_all(text)), None)
    root = doc.get("root") if isinstance(doc, dict) else None
    params = ((root or {}).get("inputDefinitions") or {}).get("parameters") or {}
    return {name: str(p.get("description") or "") for name, p in params.items() if isinstance(p, dict)}


def _type_name(kind: str) -> str:
    """The type name a compiled pipeline gives a parameter: `typing.List[int]` and `List[String]` are List."""
    json_kind = _json_kind(kind)
    return {"list": "List", "dict": "Dict"}[json_kind] if json_kind else kind


def pipeline_inputs(pipeline: Any) -> dict[str, PipelineInput]:
    """The parameters a KFP pipeline object (from Python or compiled YAML) declares, by name, in name order.

    A .py file and its compiled .yaml give the same: the YAML keeps neither the order the function
    declares them in (its keys are sorted) nor the element types of a list or dict.
    """
    spec = pipeline.component_spec
    compiled = _compiled_descriptions(pipeline)
    return {
        name: PipelineInput(
            name=name,
            type=_type_name(str(inp.type)),
            default=inp.default,
            optional=bool(inp.optional),
            description=" ".join(str(inp.description or compiled.get(name, "")).split()),
        )
        for name, inp in sorted((spec.inputs or {}).items())
    }


def _shown_default(item: PipelineInput, kind: str) -> str:
    if not item.optional:
        return "(required)"
    # A compiled YAML stores every number as a float: show an Integer's default as the integer it is.
    if kind == "Integer" and isinstance(item.default, float) and item.default.is_integer():
        return str(int(item.default))
    if _json_kind(kind) is not None and item.default is not None:
        # As --param takes it; a compiled YAML stores 1 as 1.0, so a whole number shows as one.
        return json.dumps(_whole_numbers(item.default))
    return "(none)" if item.default is None else repr(item.default)


def _whole_numbers(value: Any) -> Any:
    """`value` with every float that is a whole number as an int, inside lists and dicts too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    return value


def describe_inputs(inputs: Mapping[str, PipelineInput]) -> str:
    """A table of the parameters (name, type, default, description), for `kubetrain run PIPELINE --list-params`."""
    if not inputs:
        return "this pipeline takes no parameters"
    rows = [("NAME", "TYPE", "DEFAULT", "DESCRIPTION")]
    rows += [(i.name, i.type, _shown_default(i, i.type), i.description) for i in inputs.values()]
    widths = [max(len(row[col]) for row in rows) for col in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in rows
    ).rstrip()


def convert(value: str, kind: str, name: str) -> Any:
    """`value` as the Python type KFP expects for an input of type `kind`."""
    try:
        if kind == "Integer":
            return int(value)
        if kind == "Float":
            return float(value)
    except ValueError as e:
        raise InvalidInputError(
            f"--param {name}={value}: expected {'an integer' if kind == 'Integer' else 'a number'}"
        ) from e
    if kind == "Boolean":
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise InvalidInputError(f"--param {name}={value}: expected true or false")
    if kind == "String":
        return value
    json_kind = _json_kind(kind)
    if json_kind is not None:
        return _from_json(value, json_kind, name)
    raise InvalidInputError(
        f"--param {name}: inputs of type {kind} cannot be set from the command line "
        "(an artifact comes from a step of the pipeline)"
    )


def _from_json(value: str, kind: str, name: str) -> Any:
    """A List or Struct parameter's JSON value; errors name the parameter and show the form expected."""
    example = """'["a", "b"]'""" if kind == "list" else """'{"key": 1}'"""
    what = "a JSON list" if kind == "list" else "a JSON object"
    try:
        data = json.loads(value)
    except RecursionError:
        raise InvalidInputError(
            f"--param {name}: got JSON nested too deeply; expected at most {MAX_JSON_DEPTH} levels of lists and objects"
        ) from None
    except ValueError as e:
        raise InvalidInputError(f"--param {name}={value}: expected {what}, e.g. {name}={example} ({e})") from e
    # KFP cannot carry a Struct over 100 levels (a protobuf traceback when the task starts).
    check_json_depth(data, f"--param {name}")
    if not isinstance(data, list if kind == "list" else dict):
        raise InvalidInputError(
            f"--param {name}={value}: expected {what}, e.g. {name}={example}; got a JSON {type(data).__name__}"
        )
    return data


def parse_params(pairs: Iterable[str], inputs: Mapping[str, PipelineInput]) -> dict[str, Any]:
    """`KEY=VALUE` strings → typed arguments; unknown keys and bad values are errors naming the choices."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidInputError(f"--param {pair!r}: expected KEY=VALUE")
        if key not in inputs:
            has = f"it has {', '.join(sorted(inputs))}" if inputs else "it takes no parameters"
            raise InvalidInputError(f"--param {key}: this pipeline has no such parameter; {has}")
        if key in out:
            raise InvalidInputError(f"--param {key}: given twice")
        out[key] = convert(value, inputs[key].type, key)
    missing = sorted(n for n, i in inputs.items() if not i.optional and n not in out)
    if missing:
        raise InvalidInputError(f"missing required parameters: {', '.join(missing)} (use --param KEY=VALUE)")
    return out
