"""PIPELINE as a user's file: a .py with @dsl.pipeline functions, or a compiled .yaml (nothing runs here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from kubetrain.cli import main
from kubetrain.components import compiled_yaml
from kubetrain.errors import ExitCode, InvalidInputError
from kubetrain.tooling.sources import load_pipeline

HEADER = """\
from pathlib import Path

from kfp import dsl

from kubetrain.components.download_dataset import download_dataset
from kubetrain.pipelines.mnist_ps import mnist_ps  # imported, not defined here: not a choice
"""
PIPELINE = '''
@dsl.pipeline(name="{name}")
def {func}(source: str = "builtin:digits", shards: int = 2):
    """Fetch a data set.

    Args:
        source: Where the data comes from.
        shards: Training shards.
    """
    download_dataset(source=source, shards=shards)
'''


def _write(tmp_path: Path, *funcs: str, extra: str = "") -> Path:
    body = HEADER + "".join(PIPELINE.format(name=f.replace("_", "-"), func=f) for f in funcs) + extra
    path = tmp_path / "user_dir" / "my_pipelines.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(body)
    return path


def test_one_pipeline_is_taken_and_main_block_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "main-ran"
    path = _write(tmp_path, "fetch", extra=f'\nif __name__ == "__main__":\n    Path({str(marker)!r}).touch()\n')
    loaded = load_pipeline(str(path))
    assert loaded.name == "fetch"
    assert loaded.pipeline.name == "fetch"
    assert not marker.exists()
    spec = yaml.safe_load(loaded.compile_text())
    assert spec["pipelineInfo"]["name"] == "fetch"


def test_several_pipelines_need_pipeline_func(tmp_path: Path) -> None:
    path = _write(tmp_path, "fetch", "fetch_again")
    with pytest.raises(InvalidInputError) as e:
        load_pipeline(str(path))
    assert str(e.value) == (
        f"pipeline: {path} defines 2 pipelines (fetch, fetch_again); choose one with --pipeline-func NAME"
    )
    assert load_pipeline(str(path), pipeline_func="fetch_again").name == "fetch_again"
    with pytest.raises(InvalidInputError, match=r"--pipeline-func mnist_ps: .* defines fetch, fetch_again$"):
        load_pipeline(str(path), pipeline_func="mnist_ps")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("x = 1\n", "defines no @dsl.pipeline function"),
        ("def broken(:\n", "syntax error"),
        ("import no_such_module_here\n", "an import failed while loading it: No module named 'no_such_module_here'"),
    ],
)
def test_files_without_a_usable_pipeline(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "p.py"
    path.write_text(body)
    with pytest.raises(InvalidInputError, match=message):
        load_pipeline(str(path))


def test_a_module_beside_the_file_imports(tmp_path: Path) -> None:
    (tmp_path / "settings_for_my_pipeline.py").write_text("SOURCE = 'builtin:digits'\n")
    path = tmp_path / "p.py"
    path.write_text(
        "from kfp import dsl\nfrom kubetrain.components.download_dataset import download_dataset\n"
        "from settings_for_my_pipeline import SOURCE\n\n"
        "@dsl.pipeline(name='p')\ndef p():\n    download_dataset(source=SOURCE)\n"
    )
    assert load_pipeline(str(path)).name == "p"


def test_a_pipeline_built_by_a_function_of_another_module_is_taken(tmp_path: Path) -> None:
    """Issue 34's first hour: `user_programs = make_pipeline(dir)` (docs/examples) was 'no @dsl.pipeline function'."""
    (tmp_path / "factory_for_my_pipeline.py").write_text(
        "from kfp import dsl\nfrom kubetrain.components.download_dataset import download_dataset\n\n"
        "def make_pipeline(source):\n"
        "    @dsl.pipeline(name='built')\n    def built():\n        download_dataset(source=source)\n"
        "    return built\n"
    )
    path = tmp_path / "p.py"
    path.write_text(
        "from factory_for_my_pipeline import make_pipeline\n"
        "from kubetrain.pipelines.mnist_ps import mnist_ps  # imported by name: still not a choice\n\n"
        "user_programs = make_pipeline('builtin:digits')\n"
    )
    loaded = load_pipeline(str(path))
    assert loaded.name == "user_programs" and loaded.pipeline.name == "built"


def test_compiled_yaml_is_taken_as_it_is(tmp_path: Path, repo_root: Path) -> None:
    compiled = tmp_path / "digits.yaml"
    compiled.write_text((repo_root / "pipelines" / "mnist_ps.yaml").read_text())
    loaded = load_pipeline(str(compiled))
    assert loaded.name == "digits"
    assert loaded.compile_text() == compiled.read_text()
    with pytest.raises(InvalidInputError, match="is a compiled component, not a pipeline"):
        load_pipeline(str(compiled_yaml()["download_dataset"]))


def test_missing_file_and_pipeline_func_for_a_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"nope\.py: no such file; expected a \.py file"):
        load_pipeline(str(tmp_path / "nope.py"))
    with pytest.raises(InvalidInputError, match=r"--pipeline-func x: only for a \.py file"):
        load_pipeline("mnist_ps", pipeline_func="x")


def test_list_params_of_a_users_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "fetch")
    runs = tmp_path / "runs"
    assert main(["run", str(path), "--list-params", "--runs-dir", str(runs)]) == ExitCode.SUCCESS
    assert capsys.readouterr().out.splitlines() == [
        "NAME    TYPE     DEFAULT           DESCRIPTION",
        "shards  Integer  2                 Training shards.",
        "source  String   'builtin:digits'  Where the data comes from.",
    ]
    assert not runs.exists()  # listing runs nothing


def test_list_params_of_a_compiled_pipeline(repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(repo_root / "pipelines" / "mnist_ps.yaml"), "--list-params"]) == ExitCode.SUCCESS
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "DEFAULT", "DESCRIPTION"]
    assert (
        "epochs           Integer  10                     Passes over the training data (asynchronous updates need more "
        "than DDP's 5)."
    ) in lines


def test_run_of_an_unknown_name_mentions_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "my_pipeline"]) == ExitCode.INVALID_INPUT
    err = capsys.readouterr().err
    assert "expected one of mnist_pytorch" in err
    assert "or a file: a .py defining a @dsl.pipeline function, or a compiled pipeline .yaml" in err


def test_bad_parameter_for_a_users_pipeline_names_its_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "fetch")
    runs = tmp_path / "runs"
    assert main(["run", str(path), "--param", "shard=3", "--runs-dir", str(runs)]) == ExitCode.INVALID_INPUT
    assert "this pipeline has no such parameter; it has shards, source" in capsys.readouterr().err
    assert not runs.exists()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("\nundefined_name()\n", "loading it failed: NameError: name 'undefined_name' is not defined"),
        # kfp's own TypeError while it builds the pipeline's graph (an unknown input of a component).
        (
            '\n@dsl.pipeline(name="bad")\ndef bad():\n    download_dataset(nonsense=1)\n',
            'loading it failed: TypeError: download-dataset() got an unexpected keyword argument "nonsense".',
        ),
        ("\nimport kubetrain_no_such_module\n", "an import failed while loading it: No module named"),
    ],
)
def test_an_error_in_the_users_module_level_code_is_one_line_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, expected: str
) -> None:
    path = _write(tmp_path, "fetch", extra=extra)
    module = "kubetrain_user_pipeline_my_pipelines"
    sys.modules.pop(module, None)  # an earlier test's successful load
    failing_line = len(path.read_text().splitlines())
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs")]) == ExitCode.INVALID_INPUT
    err = capsys.readouterr().err
    assert f"pipeline: {path}:{failing_line}: {expected}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert module not in sys.modules, "the half-loaded module stayed behind"


def test_a_compiled_file_whose_name_is_no_run_name_gets_one(
    tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compiled = tmp_path / "my pipeline (v2).yaml"
    compiled.write_text((repo_root / "pipelines" / "mnist_ps.yaml").read_text())
    assert load_pipeline(str(compiled)).name == "my-pipeline-v2"
    assert main(["run", str(compiled), "--list-params"]) == ExitCode.SUCCESS
    assert "epochs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "code", "expected"),
    [
        # A script's own ending at module level: it ended kubetrain itself, exit 0 and nothing said.
        (
            "\nimport sys\nsys.exit(0)\n",
            ExitCode.INVALID_INPUT,
            "calls sys.exit(0) when imported; kubetrain imports the file and runs nothing else: put the script "
            'part under `if __name__ == "__main__":`',
        ),
        (
            "\nraise KeyboardInterrupt\n",
            ExitCode.CANCELLED,
            "loading it was interrupted (KeyboardInterrupt); nothing ran",
        ),
    ],
)
def test_a_file_that_exits_or_is_interrupted_while_loading_ends_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, code: ExitCode, expected: str
) -> None:
    path = _write(tmp_path, "fetch", extra=extra)
    sys.modules.pop("kubetrain_user_pipeline_my_pipelines", None)
    failing_line = len(path.read_text().splitlines())
    for command in (
        ["run", str(path), "--runs-dir", str(tmp_path / "runs")],
        ["submit", str(path), "--host", "http://127.0.0.1:9"],
    ):
        assert main(command) == code, command
        err = capsys.readouterr().err
        assert f"pipeline: {path}:{failing_line}: {expected}" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


TYPED = """
from typing import Dict, List

from kfp import dsl

from kubetrain.components.download_dataset import download_dataset


@dsl.pipeline(name="typed")
def typed(zeta: int = 2, sizes: List[int] = [1, 2], weights: Dict[str, float] = {"a": 1.0}, names: list = ["x"],
          rate: float = 2.0, source: str = "builtin:digits"):
    download_dataset(source=source, shards=zeta)
"""


def test_list_params_is_the_same_for_a_file_and_its_compiled_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kfp import compiler

    source = tmp_path / "typed.py"
    source.write_text(TYPED)
    compiled = tmp_path / "typed.yaml"
    compiler.Compiler().compile(load_pipeline(str(source)).pipeline, str(compiled))
    listed = []
    for path in (source, compiled):
        assert main(["run", str(path), "--list-params"]) == ExitCode.SUCCESS
        listed.append(capsys.readouterr().out.splitlines())
    assert listed[0] == listed[1]
    # In name order (a compiled YAML keeps no other), KFP's type names, list and dict defaults as --param takes them.
    assert [line.split()[:3] for line in listed[0]] == [
        ["NAME", "TYPE", "DEFAULT"],
        ["names", "List", '["x"]'],
        ["rate", "Float", "2.0"],
        ["sizes", "List", "[1,"],
        ["source", "String", "'builtin:digits'"],
        ["weights", "Dict", '{"a":'],
        ["zeta", "Integer", "2"],
    ]
