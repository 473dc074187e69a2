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
    assert set(result["checked_steps"]) == {"download-dataset", "pytorch-train", "chainermn-train", "ps-train"}
    assert not any(tmp_path.iterdir()), "a dry run made a run directory"


def test_a_dry_run_refuses_a_bad_training_input_before_anything_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "mnist_pytorch", "--param", "epochs=0", "--dry-run", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == ExitCode.INVALID_INPUT
    assert "step pytorch-train: epochs: got 0" in err
    assert not any(tmp_path.iterdir())


LOOPED = """
from kfp import dsl

from kubetrain.components import download_dataset, pytorch_train


@dsl.pipeline(name="looped")
def looped(epochs: int = 1, sizes: list = [0, 1]):
    data = download_dataset(source="{source}")
    with dsl.ParallelFor({items}) as item:
        pytorch_train(dataset=data.outputs["dataset"], workers={workers}, epochs=epochs)
    with dsl.ParallelFor(sizes) as size:
        pytorch_train(dataset=data.outputs["dataset"], workers=size, epochs=epochs)
"""


def _looped(tmp_path: Path, *, source: str = "builtin:digits", items: str = "[1, 2]", workers: str = "item") -> str:
    path = tmp_path / "looped.py"
    path.write_text(LOOPED.format(source=source, items=items, workers=workers), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("items", "workers", "said"),
    [
        ("[1, -1]", "item", "workers: got -1"),  # an item of a ParallelFor over a list written in the pipeline
        ('[{"w": 1}, {"w": -2}]', "item.w", "workers: got -2"),  # a field of a dict item
        ("[1, 2]", "-1", "workers: got -1"),  # a constant inside the loop
    ],
)
def test_a_dry_run_checks_the_steps_inside_a_parallel_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], items: str, workers: str, said: str
) -> None:
    pipeline = _looped(tmp_path, items=items, workers=workers)
    code = main(["run", pipeline, "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    assert code == ExitCode.INVALID_INPUT
    assert f"step pytorch-train: {said}" in capsys.readouterr().err


def test_a_dry_run_checks_a_loop_over_a_parameter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = _looped(tmp_path)
    code = main(["run", pipeline, "--param", "sizes=[0, -3]", "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    assert code == ExitCode.INVALID_INPUT
    assert "step pytorch-train-2: workers: got -3" in capsys.readouterr().err


def test_a_dry_run_checks_the_download_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = _looped(tmp_path, source="htp://example.com/data.npz")
    code = main(["run", pipeline, "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    assert code == ExitCode.INVALID_INPUT
    assert "step download-dataset: htp://example.com/data.npz: unknown scheme 'htp'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("param", "said"),
    [
        ("dataset=htp://example.com/data.npz", "unknown scheme 'htp'"),
        ("dataset=builtin:nope", "builtin:nope: unknown built-in data set"),
        ("epochs=0", "step pytorch-train: epochs: got 0"),
    ],
)
def test_a_run_checks_every_step_before_the_first_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], param: str, said: str
) -> None:
    runs = tmp_path / "runs"
    code = main(["run", "mnist_pytorch", "--param", param, "--runs-dir", str(runs), "--json"])
    captured = capsys.readouterr()
    assert code == ExitCode.INVALID_INPUT
    assert said in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["exit_code"] == ExitCode.INVALID_INPUT
    assert not any(runs.iterdir()), "the run started a step before refusing the input"


def test_a_dry_run_lists_the_steps_upstream_first_in_the_same_order_every_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = _looped(tmp_path)
    assert main(["run", pipeline, "--dry-run", "--json", "--runs-dir", str(tmp_path / "runs")]) == ExitCode.SUCCESS
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == ["download-dataset", "pytorch-train", "pytorch-train-2"]
    assert result["checked_steps"] == result["steps"]
    shipped = main(["run", "compare_frameworks", "--dry-run", "--json", "--runs-dir", str(tmp_path / "runs")])
    assert shipped == ExitCode.SUCCESS
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == [
        "download-cache-key",
        "download-dataset",
        "chainermn-train",
        "ps-train",
        "pytorch-train",
        "compare-summary",
    ]


GUARDED = """
from kfp import dsl

from kubetrain.components import download_dataset, pytorch_train


@dsl.pipeline(name="guarded")
def guarded(w: int = 1):
    data = download_dataset(source="builtin:digits")
    with dsl.If(w >= 0):
        pytorch_train(dataset=data.outputs["dataset"], workers=w)
        download_dataset(source="{source}")
        pytorch_train(dataset=data.outputs["dataset"], workers={constant})
"""


def _guarded(tmp_path: Path, *, source: str = "s3://bucket/data.npz", constant: int = 1) -> str:
    path = tmp_path / "guarded.py"
    path.write_text(GUARDED.format(source=source, constant=constant), encoding="utf-8")
    return str(path)


def test_in_a_branch_what_the_condition_may_guard_is_left_to_the_run(tmp_path: Path) -> None:
    # w=-1 is what `dsl.If(w >= 0)` keeps from the step; whether this machine has s3's driver matters
    # only if the branch runs here.
    pipeline = _guarded(tmp_path)
    assert main(["run", pipeline, "--param", "w=-1", "--dry-run", "--runs-dir", str(tmp_path / "runs")]) == 0


@pytest.mark.parametrize(
    ("source", "constant", "said"),
    [
        ("s3://bucket/data.npz", -4, "step pytorch-train-2: workers: got -4"),
        ("htp://example.com/data.npz", 1, "step download-dataset-2: htp://example.com/data.npz: unknown scheme"),
    ],
)
def test_in_a_branch_a_value_the_pipeline_writes_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, constant: int, said: str
) -> None:
    pipeline = _guarded(tmp_path, source=source, constant=constant)
    code = main(["run", pipeline, "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    assert code == ExitCode.INVALID_INPUT
    assert said in capsys.readouterr().err
