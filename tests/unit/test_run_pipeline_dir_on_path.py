"""`kubetrain run path/to/pipeline.py` from any directory: the modules beside the file import in its
steps (and their pods, which get the steps' PYTHONPATH), as they did when the file loaded (issue 34:
`ps_train(model_module=...)` worked only from the module's directory)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode

PIPELINE = textwrap.dedent(
    """
    from kfp import dsl

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def use_helper() -> str:
        import team_helper_34

        return team_helper_34.NAME

    @dsl.pipeline(name="beside")
    def beside() -> None:
        use_helper()
    """
)


def test_a_module_beside_the_pipeline_file_imports_in_its_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "beside.py").write_text(PIPELINE)
    (project / "team_helper_34.py").write_text('NAME = "found"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code = main(["run", str(project / "beside.py"), "--json", "--runs-dir", str(tmp_path / "runs")])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == ExitCode.SUCCESS, out
    assert out["tasks"]["use-helper"]["parameters"]["Output"] == "found"
