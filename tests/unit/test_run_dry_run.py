"""`kubetrain run --dry-run`: compile and check the inputs, train nothing (issue 34)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode


def test_a_dry_run_checks_the_training_steps_inputs_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "compare_frameworks", "--dry-run", "--json", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == ExitCode.SUCCESS
    result = json.loads(out.strip().splitlines()[-1])
    assert result["state"] == "CHECKED"
    assert set(result["checked_steps"]) == {"pytorch-train", "chainermn-train", "ps-train"}
    assert not any(tmp_path.iterdir()), "a dry run made a run directory"


def test_a_dry_run_refuses_a_bad_training_input_before_anything_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "mnist_pytorch", "--param", "epochs=0", "--dry-run", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == ExitCode.INVALID_INPUT
    assert "step pytorch-train: epochs: got 0" in err
    assert not any(tmp_path.iterdir())
