"""A local run leaves no `/tmp/tmp.*/ephemeral_component.py` behind (issue 34): its steps' temporary
directory is the run's own, removed when the run ends."""

# No `from __future__ import annotations`: kfp reads the components' annotations as types.
from pathlib import Path

import pytest
from kfp import dsl

from kubetrain.tooling.local_run import run_pipeline_locally


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def where_is_tmp() -> str:
    """The step's TMPDIR."""
    import os

    return os.environ.get("TMPDIR", "")


@dsl.pipeline(name="tmp-probe")
def tmp_probe() -> None:
    """One step."""
    where_is_tmp()


def test_the_steps_temporary_files_go_with_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    outcome = run_pipeline_locally(tmp_probe, name="tmp-probe", arguments={}, runs_dir=tmp_path / "runs")
    assert outcome.state == "SUCCEEDED", outcome
    step_tmp = Path(outcome.task("where-is-tmp").parameters["Output"])
    assert step_tmp.parent == system_tmp and step_tmp.name.startswith("kubetrain-run-")
    assert not step_tmp.exists()
    assert list(system_tmp.rglob("ephemeral_component.py")) == []
