"""`--param` for a pipeline's List and Struct parameters (JSON), and the parameter records themselves."""

# No `from __future__ import annotations`: kfp reads the pipeline's annotations as types.

import pytest
from kfp import dsl

from kubetrain.errors import InvalidInputError, SpecError
from kubetrain.tooling.params import PipelineInput, parse_params, pipeline_inputs


# Bare `list` and `dict` on purpose, as a user writes them (hence the type: ignore[type-arg]s).
@dsl.component(base_image="python:3.11", install_kfp_package=False)
def use(tags: list, cfg: dict, sizes: list[int], weights: dict[str, float]) -> None:  # type: ignore[type-arg]
    """Take them."""


@dsl.pipeline(name="structured")
def structured(
    tags: list = ["a"],  # type: ignore[type-arg]  # noqa: B006 - a KFP default, never mutated
    cfg: dict = {"k": 1},  # type: ignore[type-arg]  # noqa: B006
    sizes: list[int] = [1],  # noqa: B006
    weights: dict[str, float] = {},  # noqa: B006
) -> None:
    """List and Struct parameters."""
    use(tags=tags, cfg=cfg, sizes=sizes, weights=weights)


def test_list_and_struct_parameters_take_json() -> None:
    inputs = pipeline_inputs(structured)
    got = parse_params(
        ['tags=["a", "b"]', 'cfg={"k": 1, "nested": {"x": [1]}}', "sizes=[2, 3]", 'weights={"w": 0.5}'], inputs
    )
    assert got == {"tags": ["a", "b"], "cfg": {"k": 1, "nested": {"x": [1]}}, "sizes": [2, 3], "weights": {"w": 0.5}}
    # As kfp types them from typing's generics, and from a compiled YAML.
    typed = {"x": PipelineInput("x", "typing.List[str]", None, True), "y": PipelineInput("y", "Dict", None, True)}
    assert parse_params(['x=["a"]', 'y={"k": "v"}'], typed) == {"x": ["a"], "y": {"k": "v"}}


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("tags=[a", r"--param tags=\[a: expected a JSON list, e\.g\. tags='\[\"a\", \"b\"\]' \(Expecting value"),
        ('tags={"k": 1}', r"--param tags=.*: expected a JSON list, e\.g\. .*; got a JSON dict"),
        ("cfg=[1]", r"--param cfg=\[1\]: expected a JSON object, e\.g\. cfg='\{\"key\": 1\}'; got a JSON list"),
        ("sizes=3", r"--param sizes=3: expected a JSON list.*; got a JSON int"),
    ],
)
def test_bad_json_names_the_parameter_and_the_form_expected(pair: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_params([pair], pipeline_inputs(structured))


def test_a_pipeline_without_parameters_says_so() -> None:
    with pytest.raises(InvalidInputError) as e:
        parse_params(["epochs=1"], {})
    assert str(e.value) == "--param epochs: this pipeline has no such parameter; it takes no parameters"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "not a name"}, "pipeline input name: got 'not a name'; expected a Python identifier"),
        ({"type": ""}, "pipeline input epochs: type: got ''; expected a KFP type name"),
        ({"optional": "yes"}, "pipeline input epochs: optional: got 'yes'; expected True or False"),
    ],
)
def test_a_pipeline_input_validates_itself(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"name": "epochs", "type": "Integer", "default": 1, "optional": True, **kwargs}
    with pytest.raises(SpecError, match=message):
        PipelineInput(**fields)  # type: ignore[arg-type]
